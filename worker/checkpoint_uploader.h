// CheckpointUploader: a worker's background checkpoint uploads when it has
// a checkpoint cache instead of a shared root (--checkpoint-cache; see
// docs/checkpoint-transfer.md). Trials never wait for it: the relay hands
// over each acknowledged report's checkpoint and goes on. One thread
// uploads in report order; of one attempt's checkpoints still waiting only
// the newest is sent (it supersedes the older ones as the restore point).
// Each upload names as bases the checkpoints this attempt derives from
// (the one it restored, PBT sources, its last upload), so unchanged chunks
// never cross the network. Once a trainer checkpoint is uploaded, the
// attempt's older ones leave the local cache. The worker waits for an
// attempt's uploads (WaitFor) before finishing it, so a paused trial
// resumes from its newest checkpoint. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "dial/v1/service.pb.h"
#include "storage/checkpoint_store.h"
#include "transfer/transfer_client.h"

namespace dial::worker {

struct CheckpointUploaderOptions {
  transfer::CheckpointTransfer* transfer = nullptr;  // required, not owned
  std::string root;  // the local checkpoint cache the trials write to
  // The cache as a store, to drop uploaded trainer checkpoints; null:
  // nothing is dropped. Not owned.
  storage::FileCheckpointStore* cache = nullptr;
  // Bytes sent and upload times (dial-worker --metrics-listen); null:
  // not counted. Not owned.
  metrics::Counter* upload_bytes = nullptr;
  metrics::Histogram* upload_seconds = nullptr;
};

class CheckpointUploader {
 public:
  explicit CheckpointUploader(const CheckpointUploaderOptions& options);
  // Stops: an upload under way ends at its next retry; queued ones are
  // dropped.
  ~CheckpointUploader();

  // Starts tracking an attempt: `bases` are the checkpoints it starts from
  // (its restore checkpoint).
  void Begin(const v1::TrialLease& lease, std::vector<std::string> bases);
  // Queues checkpoint `id` of `lease`'s attempt, reported at `step`.
  void Enqueue(const v1::TrialLease& lease, int64_t step,
               const std::string& id);
  // A checkpoint the attempt now derives from (a PBT source).
  void AddBase(const v1::TrialLease& lease, const std::string& id);
  // Keeps checkpoint `id` in the cache while the attempt lives (until
  // Finish or Cancel), though its own trial uploads newer ones: a PBT
  // source the attempt is about to copy. Call it before looking for `id`
  // in the cache: a drop under way finishes first.
  void Pin(const v1::TrialLease& lease, const std::string& id);
  // Waits until none of the attempt's checkpoints is queued or uploading,
  // at most `timeout`; true if so. Forgets the attempt either way.
  bool Finish(const v1::TrialLease& lease, absl::Duration timeout);
  // Drops the attempt's queued checkpoints (it was fenced).
  void Cancel(const v1::TrialLease& lease);

  struct Stats {
    int64_t uploaded = 0;
    int64_t superseded = 0;  // skipped for a newer one of the same attempt
    int64_t failed = 0;
    int64_t bytes_total = 0;
    int64_t bytes_sent = 0;
  };
  Stats stats() const;

 private:
  struct Item {
    v1::TrialLease lease;
    std::string key;
    int64_t step = 0;
    std::string id;
  };
  struct Attempt {
    std::vector<std::string> bases;
    int busy = 0;  // queued or uploading
    bool cancelled = false;
  };
  static std::string Key(const v1::TrialLease& lease);
  void Loop();
  // After uploading trainer checkpoint `id`: older local ones of its
  // trial, except pinned ones.
  void DropOlder(const std::string& id);
  void Unpin(const std::string& key);

  const CheckpointUploaderOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Attempt> attempts_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Held while checking pins and deleting (never with mu_ inside it).
  absl::Mutex drop_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<std::string, std::set<std::string>> pins_ ABSL_GUARDED_BY(drop_mu_);
  std::thread thread_;
};

}  // namespace dial::worker
