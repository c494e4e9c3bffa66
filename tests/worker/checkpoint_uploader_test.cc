// CheckpointUploader against a fake transfer: order, coalescing of an
// attempt's waiting checkpoints, the bases each upload names, waiting for an
// attempt's uploads, and cancelling a fenced attempt's.
#include "worker/checkpoint_uploader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

// Records each upload; holds one while `gate_` is closed.
class FakeTransfer : public transfer::CheckpointTransfer {
 public:
  absl::StatusOr<transfer::TransferStats> Upload(
      const v1::TrialLease& lease, int64_t step, const std::string& root,
      const std::string& id, const std::vector<std::string>& bases) override {
    absl::MutexLock lock(&mu_);
    started_.push_back(id);
    mu_.Await(absl::Condition(&open_));
    uploaded_.push_back(id);
    bases_.push_back(bases);
    transfer::TransferStats stats;
    stats.restore_point = true;
    return stats;
  }
  absl::StatusOr<transfer::TransferStats> Download(
      const std::string&, const std::string&, const std::string&) override {
    return absl::UnimplementedError("not in this test");
  }
  void Open(bool open) {
    absl::MutexLock lock(&mu_);
    open_ = open;
  }
  // Blocks until `n` uploads have started.
  void WaitStarted(size_t n) {
    absl::MutexLock lock(&mu_);
    auto started = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return started_.size() >= n;
    };
    mu_.Await(absl::Condition(&started));
  }
  std::vector<std::string> uploaded() {
    absl::MutexLock lock(&mu_);
    return uploaded_;
  }
  std::vector<std::vector<std::string>> bases() {
    absl::MutexLock lock(&mu_);
    return bases_;
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<std::string> started_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> uploaded_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> bases_ ABSL_GUARDED_BY(mu_);
};

v1::TrialLease Lease(int64_t trial, int32_t attempt) {
  v1::TrialLease lease;
  lease.set_worker_id("w-1");
  lease.set_study("s");
  lease.set_trial(trial);
  lease.set_attempt(attempt);
  lease.set_lease_token("t");
  return lease;
}

TEST(CheckpointUploaderTest, ANewerCheckpointSupersedesOneStillWaiting) {
  FakeTransfer fake;
  CheckpointUploader uploader({&fake, "/cache", nullptr});
  const v1::TrialLease lease = Lease(1, 1);
  uploader.Begin(lease, {"s/1/100"});  // restored from step 100
  fake.Open(false);
  uploader.Enqueue(lease, 200, "s/1/200");
  fake.WaitStarted(1);  // 200 is uploading; 300 and 400 wait behind it
  uploader.Enqueue(lease, 300, "s/1/300");
  uploader.Enqueue(lease, 400, "s/1/400");
  fake.Open(true);
  EXPECT_TRUE(uploader.Finish(lease, absl::Seconds(30)));
  EXPECT_THAT(fake.uploaded(), ElementsAre("s/1/200", "s/1/400"));
  EXPECT_EQ(uploader.stats().superseded, 1);
  // Each names what it derives from: first the restored checkpoint, then
  // the last upload ahead of it.
  EXPECT_THAT(fake.bases(), ElementsAre(ElementsAre("s/1/100"),
                                        ElementsAre("s/1/200", "s/1/100")));
}

TEST(CheckpointUploaderTest, FinishWaitsAtMostItsTimeoutAndCancelDropsTheRest) {
  FakeTransfer fake;
  CheckpointUploader uploader({&fake, "/cache", nullptr});
  const v1::TrialLease a = Lease(1, 1), b = Lease(2, 1);
  uploader.Begin(a, {});
  uploader.Begin(b, {});
  fake.Open(false);
  uploader.Enqueue(a, 10, "s/1/10");
  fake.WaitStarted(1);
  uploader.Enqueue(b, 10, "s/2/10");
  // a's upload is held: waiting for it gives up after the timeout.
  EXPECT_FALSE(uploader.Finish(a, absl::Milliseconds(50)));
  // b was fenced: its waiting upload never starts.
  uploader.Cancel(b);
  fake.Open(true);
  EXPECT_TRUE(uploader.Finish(b, absl::Seconds(30)));
  // a's upload still completes in the background.
  const v1::TrialLease c = Lease(3, 1);
  uploader.Begin(c, {});
  uploader.Enqueue(c, 10, "s/3/10");
  EXPECT_TRUE(uploader.Finish(c, absl::Seconds(30)));
  EXPECT_THAT(fake.uploaded(), ElementsAre("s/1/10", "s/3/10"));
}

// Regression (a flaky PBT test): trial 1's upload dropped its older
// checkpoint from the cache while trial 2, on the same worker, was copying
// it as a PBT source. A pinned source stays until its attempt ends.
TEST(CheckpointUploaderTest,
     APinnedCheckpointStaysInTheCacheUntilItsAttemptEnds) {
  const fs::path root = fs::temp_directory_path() /
                        ("dial-uploader-pin-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto cache = storage::FileCheckpointStore::Create({root.string()});
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int step : {100, 200, 300, 400}) {
    ASSERT_TRUE((*cache)->Write("s", 1, step, {{"model.pt", "w"}}).ok());
  }
  FakeTransfer fake;
  CheckpointUploader uploader({&fake, root.string(), cache->get()});
  const v1::TrialLease donor = Lease(1, 1), copier = Lease(2, 1);
  uploader.Begin(donor, {});
  uploader.Begin(copier, {});
  uploader.Pin(copier, "s/1/100");
  uploader.Enqueue(donor, 300, "s/1/300");
  ASSERT_TRUE(uploader.Finish(donor, absl::Seconds(30)));
  // 200 went; the pinned 100 stayed, whole.
  EXPECT_TRUE((*cache)->Verify("s/1/100").ok());
  EXPECT_FALSE((*cache)->Verify("s/1/200").ok());
  EXPECT_TRUE((*cache)->CopyInto("s/1/100", "s", 2).ok());
  // Once the copier's attempt ends, the next upload drops it.
  ASSERT_TRUE(uploader.Finish(copier, absl::Seconds(30)));
  const v1::TrialLease donor2 = Lease(1, 2);
  uploader.Begin(donor2, {});
  uploader.Enqueue(donor2, 400, "s/1/400");
  ASSERT_TRUE(uploader.Finish(donor2, absl::Seconds(30)));
  EXPECT_FALSE((*cache)->Verify("s/1/100").ok());
  EXPECT_TRUE((*cache)->Verify("s/1/400").ok());
  fs::remove_all(root);
}

}  // namespace
}  // namespace dial::worker
