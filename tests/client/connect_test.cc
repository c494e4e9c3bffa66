// Connecting (common/grpc_channel.h, client/client.h): where a token may
// travel without TLS.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/client.h"
#include "common/grpc_channel.h"

namespace dial::client {
namespace {

using ::testing::HasSubstr;

// Security round two, finding 12: without tls_ca the clients sent tokens in
// plaintext to any host with no warning. Beyond this host they refuse,
// unless told insecure; loopback and tokenless connections go on.
TEST(ConnectTest, ATokenIsNeverSentInPlaintextBeyondThisHost) {
  DialClientOptions options;
  options.token = "secret-token";
  options.target = "10.20.30.40:7070";
  auto refused = DialClient::Create(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("plaintext"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--insecure"));
  EXPECT_THAT(refused.status().message(),
              ::testing::Not(HasSubstr("secret-token")));
  options.target = "scheduler.example.org:7070";
  EXPECT_FALSE(DialClient::Create(options).ok());
  options.insecure = true;
  EXPECT_TRUE(DialClient::Create(options).ok());
  options.insecure = false;
  for (const char* local : {"127.0.0.1:7070", "localhost:7070", "[::1]:7070",
                            "unix:/run/dial.sock", "dns:///localhost:1"}) {
    options.target = local;
    EXPECT_TRUE(DialClient::Create(options).ok()) << local;
  }
  options.target = "10.20.30.40:7070";
  options.token.clear();
  EXPECT_TRUE(DialClient::Create(options).ok()) << "no token, nothing to leak";
  EXPECT_FALSE(IsLoopbackTarget("128.0.0.1:1"));
  EXPECT_FALSE(IsLoopbackTarget("[::2]:1"));
}

}  // namespace
}  // namespace dial::client
