// CheckpointQuota (scheduler/checkpoint_quota.h) on its own.
#include "scheduler/checkpoint_quota.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointQuotaTest, CountsEachOwnersCheckpointsOnce) {
  CheckpointQuota quota(100);
  EXPECT_TRUE(quota.Check("alice", "s", "s/0/a", 100).ok());
  quota.Set("alice", "s", "s/0/a", 60);
  // The same path written again is counted at its new size, not twice.
  EXPECT_TRUE(quota.Check("alice", "s", "s/0/a", 90).ok());
  quota.Set("alice", "s", "s/0/a", 90);
  EXPECT_EQ(quota.Used("alice"), 90);
  absl::Status refused = quota.Check("alice", "s", "s/0/b", 20);
  EXPECT_TRUE(IsCheckpointQuotaRefusal(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("'alice' holds 90 bytes"));
  EXPECT_THAT(refused.message(), HasSubstr("s/0/b (20 bytes)"));
  // Another owner has its own quota.
  EXPECT_TRUE(quota.Check("bob", "t", "t/0/a", 100).ok());
  quota.Set("alice", "s2", "s2/1/x", 10);
  quota.Remove("s", "s/0/a");
  EXPECT_EQ(quota.Used("alice"), 10);
  quota.ForgetStudy("s2");
  EXPECT_EQ(quota.Used("alice"), 0);
  // No quota: anything fits.
  EXPECT_TRUE(CheckpointQuota(0).Check("alice", "s", "s/0/a", 1 << 30).ok());
}

}  // namespace
}  // namespace dial::scheduler
