// ReportBuffer: reports wait in order through an outage, in bounded memory.
#include "worker/report_buffer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "worker/report_relay.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;

v1::ReportProgressRequest At(int64_t step) {
  v1::ReportProgressRequest r;
  r.set_study("s");
  r.set_trial(3);
  r.set_step(step);
  (*r.mutable_metrics())["loss"] = 1.0 / double(step);
  return r;
}

TEST(ReportBufferTest, KeepsOrderAndSpillsBeyondTheMemoryLimit) {
  const fs::path spill =
      fs::temp_directory_path() / ("dial-spill-" + std::to_string(getpid()));
  {
    ReportBuffer buffer(spill.string(), 4);
    for (int step = 1; step <= 10; ++step)
      ASSERT_TRUE(buffer.Push(At(step)).ok());
    EXPECT_EQ(buffer.size(), 10u);
    EXPECT_EQ(buffer.spilled(), 6u);  // memory holds 4
    EXPECT_TRUE(fs::exists(spill));
    // The worker's alone: a trial of another user reads no report.
    EXPECT_EQ(fs::status(spill).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
    int expected = 1;
    // Drain a little, push more while spilled ones are pending: order holds.
    for (int i = 0; i < 3; ++i) {
      ASSERT_FALSE(buffer.empty());
      EXPECT_EQ(buffer.Front().step(), expected++);
      buffer.Pop();
    }
    for (int step = 11; step <= 12; ++step)
      ASSERT_TRUE(buffer.Push(At(step)).ok());
    while (!buffer.empty()) {
      EXPECT_EQ(buffer.Front().step(), expected);
      EXPECT_DOUBLE_EQ(buffer.Front().metrics().at("loss"), 1.0 / expected);
      ++expected;
      buffer.Pop();
    }
    EXPECT_EQ(expected, 13);
    EXPECT_EQ(buffer.size(), 0u);
    EXPECT_FALSE(fs::exists(spill));  // drained: the file is gone
    // It works again after draining.
    ASSERT_TRUE(buffer.Push(At(13)).ok());
    EXPECT_EQ(buffer.Front().step(), 13);
  }
  EXPECT_FALSE(fs::exists(spill));
}

TEST(ReportBufferTest, AnUnwritableSpillFileIsAnErrorNotALoss) {
  ReportBuffer buffer("/nonexistent-dir/spill", 1);
  ASSERT_TRUE(buffer.Push(At(1)).ok());
  EXPECT_EQ(buffer.Push(At(2)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(buffer.Front().step(), 1);  // what was buffered is still there
}

}  // namespace
}  // namespace dial::worker

namespace dial::worker {
namespace {

// Security round two, M3: a report over its owner's checkpoint quota is
// refused for good; retrying it would stall the trial forever. Other
// RESOURCE_EXHAUSTED answers (a full queue) are still retried.
TEST(ReportRetryTest, AQuotaRefusalIsFinal) {
  EXPECT_FALSE(IsRetryable(absl::ResourceExhaustedError(
      "checkpoint quota: 'alice' holds 120 bytes of its 150-byte quota")));
  EXPECT_TRUE(IsRetryable(absl::ResourceExhaustedError("busy")));
  EXPECT_TRUE(IsRetryable(absl::UnavailableError("down")));
  // A scheduler's server shutting down cancels the calls in flight.
  EXPECT_TRUE(IsRetryable(absl::CancelledError("Cancelled")));
}

}  // namespace
}  // namespace dial::worker
