#include "storage/sqlite_group_committer.h"

#include "absl/time/clock.h"

namespace dial::storage {

void MeasureCommits(metrics::Registry& registry, const std::string& commit_help,
                    const std::string& sync_help,
                    GroupCommitterOptions& options) {
  options.commit_seconds =
      registry
          .AddHistogram("dial_db_commit_seconds", commit_help, {},
                        metrics::LatencyBuckets())
          ->With({});
  options.sync_seconds = registry
                             .AddHistogram("dial_db_fsync_seconds", sync_help,
                                           {}, metrics::LatencyBuckets())
                             ->With({});
  options.group_writes =
      registry
          .AddHistogram("dial_db_group_writes",
                        "Writes covered by one commit and fsync", {},
                        {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096})
          ->With({});
}

std::unique_ptr<GroupCommitter> GroupCommitter::Create(
    const GroupCommitterOptions& options) {
  std::unique_ptr<GroupCommitter> committer(new GroupCommitter(options));
  committer->thread_ = std::thread([c = committer.get()] { c->Loop(); });
  return committer;
}

void GroupCommitter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();  // commits what was applied first
}

void GroupCommitter::Applied() {
  written_seq_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  pending_ = true;
}

void GroupCommitter::Lost() {
  absl::MutexLock lock(&mu_);
  pending_ = true;
}

void GroupCommitter::HoldForTesting(bool hold) {
  absl::MutexLock lock(&mu_);
  held_ = hold;
  if (hold) {
    mu_.Await(absl::Condition(
        +[](GroupCommitter* c)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->idle_ || c->stop_; },
        this));
  }
}

void GroupCommitter::Loop() {
  while (true) {
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      idle_ = true;
      mu_.Await(absl::Condition(this, &GroupCommitter::HasWork));
      idle_ = false;
      pending_ = false;
      stop = stop_;
    }
    const absl::Time started = absl::Now();
    const CommittedGroup group = options_.commit();
    absl::Status status = group.lost;
    if (group.committed) {
      commits_.fetch_add(1);
      const absl::Time committed = absl::Now();
      // The commit wrote the group's frames to the write-ahead log; the
      // sync, outside the store's lock, lets the next group's writes go on
      // meanwhile. An acknowledged write is in the synced log.
      status = options_.sync();
      if (options_.commit_seconds) {
        options_.commit_seconds->Observe(
            absl::ToDoubleSeconds(committed - started));
        options_.sync_seconds->Observe(
            absl::ToDoubleSeconds(absl::Now() - committed));
        options_.group_writes->Observe(
            static_cast<double>(group.seq - last_committed_seq_));
      }
      last_committed_seq_ = group.seq;
    }
    // The owner reloads before anyone can hear of the loss (durable_seq_
    // has not moved, so WhenDurable still queues), and a retry meets the
    // reloaded state.
    if (!group.lost.ok()) {
      std::function<void()> handler;
      {
        absl::MutexLock lock(&mu_);
        handler = lost_handler_;
        handler_running_ = true;
      }
      if (handler) handler();
      absl::MutexLock lock(&mu_);
      handler_running_ = false;
    }
    Answer(group.seq, status);
    if (stop) return;
  }
}

void GroupCommitter::Answer(uint64_t seq, const absl::Status& status) {
  std::vector<std::function<void(absl::Status)>> answered;
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      // Lost, or committed but maybe not on disk (the sync failed): not
      // acknowledged either way.
      lost_ranges_.push_back({durable_seq_, seq});
      lost_status_ = status;
    }
    durable_seq_ = seq;  // answered, one way or the other
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->first > seq) {
        ++it;
        continue;
      }
      answered.push_back(std::move(it->second));
      it = waiters_.erase(it);
    }
  }
  for (auto& done : answered) done(status);
}

void GroupCommitter::WhenDurable(uint64_t seq,
                                 std::function<void(absl::Status)> done) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (seq > durable_seq_) {
      waiters_.push_back({seq, std::move(done)});
      return;
    }
    for (const auto& [first, last] : lost_ranges_) {
      if (seq > first && seq <= last) status = lost_status_;
    }
  }
  done(status);
}

void GroupCommitter::SetLostHandler(std::function<void()> handler) {
  absl::MutexLock lock(&mu_);
  // A running handler may use what the caller is about to destroy: wait for
  // it to return, unless this is the handler itself (it runs on the
  // committer thread).
  if (std::this_thread::get_id() != thread_.get_id()) {
    mu_.Await(absl::Condition(
        +[](bool* running) { return !*running; }, &handler_running_));
  }
  lost_handler_ = std::move(handler);
}

}  // namespace dial::storage
