// TrialMaker: the studies' suggestion work, off the core's lock: asks
// (SuggestTrials), top-ups of worker-run studies' PENDING trials, searcher
// rebuilds after a budget change, and the housekeeping that waits for
// commits (checkpoint deletion, purges of deleted studies).
//
// Suggestion work runs on a StudyExecutor: serial within a study (its
// searcher is never used by two threads, and replay stays deterministic),
// studies taking turns on a small pool, so no study's fit holds up
// another's ask. Housekeeping has an executor of its own, one thread, so
// waiting for a commit never holds up a fit. Work for a study that was
// deleted (or dropped by a reload) meanwhile finds it gone and does
// nothing; a stopped study creates no trials.
//
// It changes the core's state only under the core's lock, taken through
// Parts::lock (which applies the outbox's effects on release), and through
// the trial lifecycle. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "dial/v1/service.pb.h"
#include "scheduler/checkpoint_quota.h"
#include "scheduler/limits.h"
#include "scheduler/outbox.h"
#include "scheduler/reply.h"
#include "scheduler/study_entry.h"
#include "scheduler/study_executor.h"
#include "scheduler/study_loader.h"
#include "scheduler/trial_lifecycle.h"
#include "storage/checkpoint_store.h"
#include "storage/study_store.h"

namespace dial::scheduler {

struct Suggestion {
  std::vector<v1::Trial> trials;
  bool done = false;
  v1::StudyState study_state = v1::STUDY_STATE_UNSPECIFIED;
};
using SuggestCallback = std::function<void(Reply<Suggestion>)>;

class TrialMaker {
 public:
  struct Parts {
    storage::StudyStore* store = nullptr;
    // Null: no checkpoints to delete.
    storage::CheckpointStore* checkpoints = nullptr;
    CheckpointQuota* quota = nullptr;
    TrialLifecycle* lifecycle = nullptr;
    Outbox* outbox = nullptr;
    const StudyLoader* loader = nullptr;
    const Limits* limits = nullptr;
    // Observes each searcher fit's seconds; null: none.
    metrics::Histogram* fit_seconds = nullptr;
    // Runs `body` under the core's lock and notes the write ticket in
    // *ticket (if given) on release.
    std::function<void(WriteTicket* ticket, const std::function<void()>& body)>
        lock;
    // Calls `done` once every write up to the ticket is durable (or lost).
    std::function<void(WriteTicket, std::function<void(absl::Status)>)>
        when_durable;
    int threads = 1;  // the suggestion pool
  };
  explicit TrialMaker(Parts parts);
  ~TrialMaker();  // Stop()

  // --- Under the core's lock.
  // Takes the ask: new RUNNING trials for `client_id` (see
  // SchedulerCore::SuggestTrialsAsync). An ask that fits a model is queued
  // for the suggestion pool. Any other ask, for a study with nothing queued
  // or running, takes the study's turn and is returned, to be run on the
  // caller's thread once it has released the lock: it then waits for no
  // pool thread (and no other study's fit); null when queued. `done` is
  // called once, without the lock; UNAVAILABLE if the maker stops first
  // (then too from the returned work, if it stopped already).
  [[nodiscard]] std::function<void()> Suggest(std::shared_ptr<StudyEntry> entry,
                                              int32_t count,
                                              const std::string& client_id,
                                              SuggestCallback done);
  // Queues a top-up of a worker-run study's PENDING trials, unless one is
  // queued already.
  void Fill(std::shared_ptr<StudyEntry> entry);
  // Queues a new searcher for `spec` (a changed budget), fed with what the
  // study holds.
  void RebuildSearcher(std::shared_ptr<StudyEntry> entry, v1::StudySpec spec);
  // Deletes `doomed` from the checkpoint store and the store's index once
  // `ticket` is durable: were the write that made them obsolete lost, the
  // reloaded study would still name them.
  void DeleteWhenDurable(std::vector<DoomedCheckpoint> doomed,
                         WriteTicket ticket);
  // Frees `entry` (if given) and purges deleted studies' rows from the
  // store: both are O(trials).
  void PurgeLater(std::shared_ptr<StudyEntry> entry);

  // --- Without the core's lock.
  // Blocks until neither executor has anything queued or running.
  void WaitIdle();
  // Cancels queued work (asks answer UNAVAILABLE) and joins the threads.
  void Stop();
  size_t queued() { return suggestions_.size(); }

 private:
  // Runs `body` under the core's lock; returns what it returns.
  template <typename F>
  auto Locked(WriteTicket* ticket, F&& body) -> decltype(body()) {
    std::optional<decltype(body())> out;
    p_.lock(ticket, [&] { out.emplace(body()); });
    return std::move(*out);
  }
  void RunSuggest(const std::shared_ptr<StudyEntry>& entry, int32_t count,
                  const std::string& client_id, const SuggestCallback& done);
  // Worker-run studies keep max_parallel_trials PENDING or running trials.
  void FillPending(const std::shared_ptr<StudyEntry>& entry);
  // A new trial from the searcher (run without the lock), saved; nullopt
  // when the space is exhausted or the budget closed meanwhile. *ticket:
  // the ticket of its last lock.
  absl::StatusOr<std::optional<v1::Trial>> NewTrial(
      const std::shared_ptr<StudyEntry>& entry, v1::TrialState state,
      const std::string& client_id, WriteTicket* ticket);
  void DeleteCheckpoints(const std::vector<DoomedCheckpoint>& doomed,
                         WriteTicket ticket);
  // Observes the seconds since `start` as a fit.
  void Fitted(absl::Time start) const;

  const Parts p_;
  // Last: their threads run tasks that use everything above.
  StudyExecutor housekeeping_{1};
  StudyExecutor suggestions_;
};

}  // namespace dial::scheduler
