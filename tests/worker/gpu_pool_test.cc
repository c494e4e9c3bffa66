// GpuPool: per-device shares for --trials-per-gpu.
#include "worker/gpu_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <map>

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

namespace dial::worker {
namespace {

// An environment of the given variables (others unset).
std::function<std::optional<std::string>(const char*)> Env(
    std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(VisibleGpusTest, TheFlagWinsOverEveryVariable) {
  EXPECT_EQ(
      VisibleGpus("2,3",
                  Env({{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURM_JOB_GPUS", "1"}}),
                  8),
      (std::vector<std::string>{"2", "3"}));
}

TEST(VisibleGpusTest, CudaVisibleDevicesWinsOverSlurmsGlobalIds) {
  // With device cgroups Slurm renumbers: the job sees its GPUs 4,5 as 0,1.
  EXPECT_EQ(VisibleGpus("",
                        Env({{"CUDA_VISIBLE_DEVICES", "0,1"},
                             {"SLURM_JOB_GPUS", "4,5"},
                             {"SLURM_JOB_ID", "7"}}),
                        8),
            (std::vector<std::string>{"0", "1"}));
  // Set but empty: no GPU, even where the driver lists some.
  EXPECT_TRUE(VisibleGpus("", Env({{"CUDA_VISIBLE_DEVICES", ""}}), 8).empty());
}

TEST(VisibleGpusTest, ASlurmJobUsesItsAllocationAndNeverTheWholeNode) {
  EXPECT_EQ(VisibleGpus(
                "", Env({{"SLURM_JOB_GPUS", "1,3"}, {"SLURM_JOB_ID", "7"}}), 4),
            (std::vector<std::string>{"1", "3"}));
  // A CPU job on a GPU node.
  EXPECT_TRUE(VisibleGpus("", Env({{"SLURM_JOB_ID", "7"}}), 4).empty());
}

TEST(VisibleGpusTest, OutsideAJobEveryGpuTheDriverListsIsUsed) {
  EXPECT_EQ(VisibleGpus("", Env({}), 3),
            (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_TRUE(VisibleGpus("", Env({}), 0).empty());
}

TEST(AvailableCpusTest, CountsTheAffinityMaskNotTheMachine) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(AvailableCpus(), CPU_COUNT(&all));
  // Restricted to one CPU (as a one-CPU Slurm task is): 1, whatever the
  // machine has.
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(AvailableCpus(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
}

TEST(GpuMemoryTest, ReadsNvidiaSmiLinesForThisWorkersDevicesOnly) {
  const std::string text =
      "0, 1024, 81559\n1, 0, 81559\n2, [N/A], 81559\nnot a line\n";
  auto got = ParseGpuMemory(text, {"0", "2"});
  ASSERT_EQ(got.size(), 1u);  // device 1 is not ours, 2 has no reading
  EXPECT_EQ(got[0].id, "0");
  EXPECT_EQ(got[0].used_bytes, int64_t{1024} << 20);
  EXPECT_EQ(got[0].total_bytes, int64_t{81559} << 20);
  EXPECT_TRUE(ReadGpuMemory({}).empty());
}

}  // namespace
}  // namespace dial::worker
