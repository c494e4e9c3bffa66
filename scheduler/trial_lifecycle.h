// TrialLifecycle: the trial state machine (DESIGN.md "The trial
// lifecycle"): starting, recording reports and applying decisions,
// finishing, requeueing, fencing stale attempts, and ending studies whose
// budget is spent. Every change is written through the store before memory
// mirrors it, so a store error leaves memory as it was. Effects on other
// parts (events, dispatch, top-ups, checkpoints to delete) go to the
// outbox or the event hub; nothing here calls back into the core. Not
// thread-safe: the core's lock guards it and everything it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "dial/v1/service.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "scheduler/checkpoint_quota.h"
#include "scheduler/dispatcher.h"
#include "scheduler/event_hub.h"
#include "scheduler/outbox.h"
#include "scheduler/placer.h"
#include "scheduler/retention.h"
#include "scheduler/study_entry.h"
#include "scheduler/study_registry.h"
#include "scheduler/worker_registry.h"
#include "searchers/searcher.h"
#include "storage/checkpoint_store.h"
#include "storage/study_store.h"

namespace dial::scheduler {

class TrialLifecycle {
 public:
  struct Parts {
    storage::StudyStore* store = nullptr;
    const Clock* clock = nullptr;
    EventHub* events = nullptr;
    WorkerRegistry* workers = nullptr;
    // Null: worker trials' checkpoints are all kept.
    CheckpointRetention* retention = nullptr;
    // Per-owner checkpoint bytes, and where to measure them; null: no quota.
    CheckpointQuota* quota = nullptr;
    const storage::CheckpointStore* checkpoints = nullptr;
    Outbox* outbox = nullptr;  // the core's, for the call under way
    // Trials being preempted: their next report answers PAUSE. Null: none.
    Preemptions* preemptions = nullptr;
    // Told of each usage record once it is written (the /metrics counters);
    // null: nobody. Called under the core's lock.
    std::function<void(const v1::UsageRecord&)> on_usage;
  };
  explicit TrialLifecycle(const Parts& parts) : p_(parts) {}

  google::protobuf::Timestamp Now() const;
  // Persists `trial` and mirrors it in memory. A worker trial's attempt
  // that ends here (RUNNING to anything else) gets its usage record.
  absl::Status SaveTrial(StudyEntry& entry, const v1::Trial& trial);
  absl::Status SaveStudyState(StudyEntry& entry, v1::StudyState state);
  // Publishes an event of `entry` (with `trial`, if any) to its watchers.
  void Emit(const StudyEntry& entry, v1::StudyEvent::Kind kind,
            const v1::Trial* trial);

  // Records a report of RUNNING `trial` (as stored) and returns the trial
  // scheduler's decision, with its effect saved. If the report is saved but
  // its effect is not, the error is returned and a retry of that report
  // saves the effect (SaveUnsavedDecision). A checkpoint still
  // `uploading` is remembered, not yet the trial's restore point
  // (CheckpointUploaded makes it one).
  absl::StatusOr<v1::Decision> RecordReport(StudyEntry& entry, v1::Trial trial,
                                            int64_t step,
                                            const searchers::Metrics& metrics,
                                            const std::string& checkpoint,
                                            bool uploading = false);
  // Checkpoint `id` of `trial` (as stored), reported at `step`, is now
  // durable in the store: it becomes the restore point (and is indexed for
  // retention) unless the trial already restores from a later step.
  // Returns whether it did. UNAVAILABLE if `step` is not reported yet.
  absl::StatusOr<bool> CheckpointUploaded(StudyEntry& entry, v1::Trial trial,
                                          int64_t step, const std::string& id);
  // A report of a step already on record (one rule for workers and
  // ask/tell clients): the decision the trial's last step got when it is
  // that step again (whatever it did to the trial since: a retry whose
  // answer was lost); CONTINUE (STOP once the study is stopped), reason
  // "step already recorded", for an older step of a RUNNING trial (a
  // resumed run replaying what an earlier one reported). nullopt for a new
  // step, or an older one of a trial that no longer runs.
  std::optional<v1::Decision> RepeatedStep(const StudyEntry& entry,
                                           const v1::Trial& trial,
                                           int64_t step) const;
  // For a retried report: if the effect of the decision given to trial
  // `number`'s report at `step` could not be saved, saves it now and returns
  // that decision; nullopt if there is none.
  absl::StatusOr<std::optional<v1::Decision>> SaveUnsavedDecision(
      StudyEntry& entry, int64_t number, int64_t step);
  // Saves a trial that reached a final state and tells whoever must know.
  absl::Status Finalize(StudyEntry& entry, v1::Trial trial);
  // Back to PENDING (or STOPPED if the study no longer runs trials).
  absl::Status Requeue(StudyEntry& entry, v1::Trial trial);
  // A PAUSED trial the trial scheduler promotes: like Requeue, but the
  // upload of the checkpoint it paused with is still awaited.
  absl::Status Promote(StudyEntry& entry, v1::Trial trial);
  // RUNNING `trial` gives its slot to study `by`: back to PENDING, to
  // resume from its latest checkpoint, with the preemption recorded (not a
  // failure). `forced`: its worker did not pause it in time, so the
  // attempt is fenced (the worker kills it at its next call).
  absl::Status Preempt(StudyEntry& entry, v1::Trial trial,
                       const std::string& by, bool forced);
  // The trial of a worker call, if `attempt` of `worker_id` still owns it
  // and `lease_token` is the one that attempt was given;
  // FAILED_PRECONDITION when the attempt is stale or the token wrong.
  absl::StatusOr<const v1::Trial*> Fence(StudyEntry& entry,
                                         const std::string& worker_id,
                                         int64_t number, int32_t attempt,
                                         const std::string& lease_token);
  // Fence for checkpoint uploads: also accepts the attempt of a trial that
  // was paused (or promoted since, with no worker yet) while its last
  // checkpoint uploads, as long as no other attempt has started.
  absl::StatusOr<const v1::Trial*> FenceUpload(StudyEntry& entry,
                                               const std::string& worker_id,
                                               int64_t number, int32_t attempt,
                                               const std::string& lease_token);
  // Ends the study (COMPLETED) once its budget is spent and nothing runs.
  absl::Status MaybeFinish(StudyEntry& entry);
  // MaybeFinish after a change that is already durable: a store error is
  // logged and the check retried later instead of failing that change.
  void FinishIfDone(StudyEntry& entry);
  // Starts `entry`'s PENDING trial `pending` on `worker_id` (the Placer
  // chose it).
  absl::StatusOr<Assignment> Start(StudyEntry& entry, const v1::Trial& pending,
                                   const std::string& worker_id);

 private:
  absl::Status BackToPending(StudyEntry& entry, v1::Trial trial);
  // The usage record of `trial`'s attempt, ending now in `trial`'s state.
  v1::UsageRecord UsageOf(const StudyEntry& entry,
                          const v1::Trial& trial) const;
  absl::Status ApplyDecision(StudyEntry& entry, v1::Trial trial, int64_t step,
                             const v1::Decision& decision);
  void Doom(std::vector<DoomedCheckpoint> doomed);
  // Retention's score of a trainer checkpoint `checkpoint` reported with
  // `metrics` at `step`; nullopt for any other checkpoint (command
  // trials') or without retention.
  std::optional<double> RetentionScore(const StudyEntry& entry,
                                       const v1::Trial& trial, int64_t step,
                                       const searchers::Metrics& metrics,
                                       const std::string& checkpoint) const;
  // The size of `checkpoint` when its study's owner may hold it (0 without
  // a quota or when it is not on this root); RESOURCE_EXHAUSTED naming the
  // quota otherwise.
  absl::StatusOr<int64_t> CheckQuota(const StudyEntry& entry,
                                     const std::string& checkpoint) const;
  // Indexes a checkpoint with its score and size in the store and in the
  // quota; RESOURCE_EXHAUSTED (nothing written) when it does not fit.
  absl::Status IndexCheckpoint(StudyEntry& entry, const v1::Trial& trial,
                               int64_t step, const std::string& checkpoint,
                               double score);

  Parts p_;
};

// FindTrial: NOT_FOUND for a trial number the study does not have.
absl::StatusOr<const v1::Trial*> FindTrial(const StudyEntry& entry,
                                           int64_t number);
// FAILED_PRECONDITION: `trial` is not RUNNING; `what` says what failed.
absl::Status NotRunning(const v1::Trial& trial, const char* what);

}  // namespace dial::scheduler
