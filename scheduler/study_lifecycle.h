// StudyLifecycle: what is done to a study as a whole: create (with warm
// start), update its budget, stop, delete, enqueue configurations,
// re-evaluate the best ones, and the audit log of all of these. Beside
// TrialLifecycle, which owns the trials.
//
// Every change is written through the store first; the entry then applies
// the Stored result (StudyEntry::Apply), so a failed write changes nothing
// in memory. Effects on other parts go to the outbox (top-ups), the event
// hub (through the trial lifecycle) or the trial maker (searcher rebuilds,
// purges). The core finds the study, checks the caller's access and holds
// its lock around every call. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auth/principal.h"
#include "dial/v1/service.pb.h"
#include "scheduler/checkpoint_quota.h"
#include "scheduler/limits.h"
#include "scheduler/outbox.h"
#include "scheduler/quotas.h"
#include "scheduler/retention.h"
#include "scheduler/study_entry.h"
#include "scheduler/study_loader.h"
#include "scheduler/study_registry.h"
#include "scheduler/trial_lifecycle.h"
#include "scheduler/trial_maker.h"
#include "storage/checkpoint_store.h"
#include "storage/study_store.h"

namespace dial::scheduler {

// What UpdateStudy changes: budgets (0: unchanged) and the priority.
struct StudyChange {
  int32_t max_trials = 0;
  int32_t max_parallel_trials = 0;
  std::optional<int32_t> priority;
};

class StudyLifecycle {
 public:
  static constexpr int64_t kMaxQueuedTrials = 1000;

  struct Parts {
    storage::StudyStore* store = nullptr;
    StudyRegistry* studies = nullptr;
    TrialLifecycle* trials = nullptr;
    TrialMaker* maker = nullptr;
    Outbox* outbox = nullptr;
    const StudyLoader* loader = nullptr;
    const Limits* limits = nullptr;
    // Null: no checkpoints (nothing to retire or forget).
    storage::CheckpointStore* checkpoints = nullptr;
    CheckpointRetention* retention = nullptr;
    CheckpointQuota* quota = nullptr;
    const Quotas* quotas = nullptr;  // null: everyone gets the default
  };
  explicit StudyLifecycle(const Parts& parts) : p_(parts) {}

  // A study not yet created: its validated spec (defaults filled) with the
  // searcher and trial scheduler made for it. Made without the lock.
  struct Draft {
    v1::Study study;
    std::unique_ptr<searchers::Searcher> searcher;
    std::unique_ptr<searchers::TrialScheduler> trial_scheduler;
  };
  // INVALID_ARGUMENT for a bad spec (field and reason), UNIMPLEMENTED for
  // searchers not built yet, PERMISSION_DENIED for a role that may not
  // create studies.
  absl::StatusOr<Draft> Prepare(v1::StudySpec spec,
                                const auth::Principal& who) const;
  // Finds the warm-start sources that `who` may read.
  using SourceFinder =
      std::function<absl::StatusOr<const StudyEntry*>(const std::string&)>;
  // ALREADY_EXISTS for a taken name, RESOURCE_EXHAUSTED past the studies
  // an owner may have; warm start's errors as PlanWarmStart's.
  absl::StatusOr<v1::Study> Create(Draft draft, const auth::Principal& who,
                                   const SourceFinder& sources);
  // Changes budgets and the priority. See SchedulerCore::UpdateStudy.
  absl::StatusOr<v1::Study> Update(StudyEntry& entry, const StudyChange& change,
                                   const auth::Principal& who);
  // PERMISSION_DENIED when `who` may not give a study `priority` (above
  // their quota's max_priority, unless an admin).
  absl::Status CheckPriority(int32_t priority,
                             const auth::Principal& who) const;
  absl::StatusOr<v1::Study> Stop(StudyEntry& entry, const auth::Principal& who);
  // One small write; the rows and the entry's memory go later, off the
  // lock (TrialMaker::PurgeLater).
  absl::Status Delete(StudyEntry& entry, const auth::Principal& who);
  // Queues configurations (checked against the space); `waiting` gets the
  // queue's length.
  absl::StatusOr<std::vector<v1::QueuedTrial>> Enqueue(
      StudyEntry& entry, std::vector<v1::QueuedTrial> trials,
      const auth::Principal& who, int32_t* waiting);
  // Queues the best `top` trials again with `seeds` new seeds each; see
  // SchedulerCore::ReevaluateTrials.
  absl::StatusOr<std::vector<v1::QueuedTrial>> Reevaluate(
      StudyEntry& entry, int32_t top, int32_t seeds, const auth::Principal& who,
      int32_t* max_trials);

  // Sets (an empty note clears) the study's note, or trial `trial`'s.
  // INVALID_ARGUMENT for a note CheckNote refuses, NOT_FOUND for no such
  // trial. Answers the study or the trial.
  absl::StatusOr<v1::SetNoteResponse> SetNote(StudyEntry& entry,
                                              std::optional<int64_t> trial,
                                              const std::string& note,
                                              const auth::Principal& who);

  // Records an action in the audit log; a failure to write it is logged.
  void Audit(const auth::Principal& who, const std::string& action,
             const std::string& study, const std::string& detail);

 private:
  // Appends `items` (ids set) to the queue of `updated` (the entry's study
  // with any other change the caller makes), saves it, and only then
  // applies it to the entry and audits it.
  absl::Status SaveQueue(StudyEntry& entry, v1::Study updated,
                         std::vector<v1::QueuedTrial>& items,
                         const auth::Principal& who, const std::string& action);

  Parts p_;
};

}  // namespace dial::scheduler
