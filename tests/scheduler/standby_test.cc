// StandbyServer: what a scheduler that does not lead answers. Health is
// NOT_SERVING for the whole server (a readiness probe fails, so a
// Kubernetes Service routes to the leader only) but SERVING for
// kLivenessService (a liveness probe passes, so the standby is not
// restarted); every other call is UNAVAILABLE and names the leader.
#include <gmock/gmock.h>
#include <grpcpp/security/server_credentials.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "scheduler/leadership.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(StandbyServerTest, ReadinessFailsLivenessPassesAndCallsNameTheLeader) {
  auto standby =
      StandbyServer::Start("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           [] { return "leader.example:7070"; });
  ASSERT_TRUE(standby.ok()) << standby.status();
  auto c = client::DialClient::Create(
      {absl::StrCat("127.0.0.1:", (*standby)->port()), absl::Seconds(5)});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->CheckHealth("").ok());
  EXPECT_TRUE((*c)->CheckHealth(kLivenessService).ok());
  auto study = (*c)->GetStudy("any");
  EXPECT_EQ(study.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(study.status().message(), HasSubstr("leader.example:7070"));
}

}  // namespace
}  // namespace dial::scheduler
