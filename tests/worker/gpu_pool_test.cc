// GpuPool: per-device shares for --trials-per-gpu.
#include "worker/gpu_pool.h"

#include <gtest/gtest.h>

namespace dial::worker {
namespace {

using Ids = std::vector<std::string>;

TEST(GpuPoolTest, OneTrialPerGpuByDefault) {
  GpuPool pool({"0", "1"}, 1);
  EXPECT_EQ(pool.FreeDevices(), 2);
  EXPECT_EQ(pool.Take(2), (Ids{"0", "1"}));
  EXPECT_EQ(pool.FreeDevices(), 0);
  EXPECT_EQ(pool.Take(1), std::nullopt);
  EXPECT_EQ(pool.Take(0), Ids{});  // CPU trials need no device
  pool.Release({"1"});
  EXPECT_EQ(pool.Take(1), Ids{"1"});
}

TEST(GpuPoolTest, SharedGpusSpreadTrialsAndNeverGiveOneTrialADeviceTwice) {
  GpuPool pool({"0", "1"}, 2);
  EXPECT_EQ(pool.Take(1), Ids{"0"});
  EXPECT_EQ(pool.Take(1), Ids{"1"});  // least loaded first
  EXPECT_EQ(pool.Take(1), Ids{"0"});
  EXPECT_EQ(pool.FreeDevices(), 1);
  EXPECT_EQ(pool.Take(2), std::nullopt);  // only device 1 has a share left
  EXPECT_EQ(pool.Take(1), Ids{"1"});
  EXPECT_EQ(pool.FreeDevices(), 0);
  pool.Release({"0"});
  pool.Release({"1"});
  EXPECT_EQ(pool.Take(2), (Ids{"0", "1"}));
  // Releasing more than was taken never creates shares.
  pool.Release({"0", "0", "0"});
  EXPECT_EQ(pool.Take(1), Ids{"0"});
  EXPECT_EQ(pool.Take(1), Ids{"0"});
  EXPECT_EQ(pool.Take(1), std::nullopt);
}

}  // namespace
}  // namespace dial::worker
