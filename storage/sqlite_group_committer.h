// GroupCommitter: the thread that commits a store's open transaction (the
// group of writes applied since the last commit), makes it durable, and
// tells whoever waits for those writes (Durability::WhenDurable). One
// commit and one sync cover every write that arrived while the previous one
// ran. Thread-safe (one mutex, a leaf: it is never held while calling the
// store or a waiter, and the store may call in holding its own lock).
//
// The store applies each write at once and calls Applied(); when its open
// group is lost (rolled back) it calls Lost(). The committer thread then
// calls `commit` (which commits or reports the group under the store's
// lock) and, after a commit, `sync`; it answers the waiters of that group
// with the outcome, after running the lost handler if the group was lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "storage/durability.h"

namespace dial::storage {

// What became of the writes applied so far, as `commit` reports it.
struct CommittedGroup {
  // The last write the report covers (WrittenSeq() under the store's lock).
  uint64_t seq = 0;
  // A commit was made (it still needs `sync`).
  bool committed = false;
  // Not OK: the group is lost, for this reason.
  absl::Status lost;
};

struct GroupCommitterOptions {
  // Commits the open group, if any, under the lock the writes take, or
  // reports it lost. Called on the committer thread.
  std::function<CommittedGroup()> commit;
  // Makes a commit durable (syncs the log). Not OK: the group is not
  // acknowledged. Called on the committer thread, after `commit`.
  std::function<absl::Status()> sync;
  // Timings of each commit and sync, and each group's size in writes;
  // null: not measured. Not owned.
  metrics::Histogram* commit_seconds = nullptr;
  metrics::Histogram* sync_seconds = nullptr;
  metrics::Histogram* group_writes = nullptr;
};

// Adds the timings of the commits (dial_db_commit_seconds,
// dial_db_fsync_seconds with the help texts given, dial_db_group_writes)
// to `registry` and has `options` measure into them.
void MeasureCommits(metrics::Registry& registry, const std::string& commit_help,
                    const std::string& sync_help,
                    GroupCommitterOptions& options);

class GroupCommitter : public Durability {
 public:
  // Starts the committer thread.
  static std::unique_ptr<GroupCommitter> Create(
      const GroupCommitterOptions& options);
  ~GroupCommitter() override { Stop(); }
  // Commits what was applied, answers its waiters and stops the thread.
  // After Stop the store must apply no more writes. Idempotent.
  void Stop();

  // A write joined the open group: numbers it and wakes the committer.
  void Applied();
  // The open group was rolled back: the committer reports it lost.
  void Lost();
  // Commits made so far.
  uint64_t commits() const { return commits_.load(); }

  // Durability. Recover is the store's (it refuses the writes); this one
  // does nothing.
  uint64_t WrittenSeq() const override { return written_seq_.load(); }
  void WhenDurable(uint64_t seq,
                   std::function<void(absl::Status)> done) override;
  void SetLostHandler(std::function<void()> handler) override;
  void Recover() override {}

  // For tests: while held, the committer commits nothing (writes still
  // apply and join the open group). Hold returns once the committer waits.
  void HoldForTesting(bool hold);

 private:
  explicit GroupCommitter(const GroupCommitterOptions& options)
      : options_(options) {}
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || (pending_ && !held_);
  }
  // Answers the waiters up to `seq` with `status`.
  void Answer(uint64_t seq, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);

  const GroupCommitterOptions options_;
  std::atomic<uint64_t> written_seq_{0};
  uint64_t last_committed_seq_ = 0;  // the committer thread's own
  std::atomic<uint64_t> commits_{0};
  mutable absl::Mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;  // a group to commit or report
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = false;  // waiting for work
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Every write up to durable_seq_ is answered; the lost ranges, (first,
  // last] sequence numbers, were answered with lost_status_.
  uint64_t durable_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<uint64_t, uint64_t>> lost_ranges_ ABSL_GUARDED_BY(mu_);
  absl::Status lost_status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, std::function<void(absl::Status)>>> waiters_
      ABSL_GUARDED_BY(mu_);
  std::function<void()> lost_handler_ ABSL_GUARDED_BY(mu_);
  bool handler_running_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dial::storage
