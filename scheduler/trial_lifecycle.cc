#include "scheduler/trial_lifecycle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"
#include "storage/checkpoint_store.h"

namespace dial::scheduler {
namespace {

// 128 random bits, hex: an attempt's lease token.
std::string NewLeaseToken() {
  std::random_device rd;
  char text[33];
  std::snprintf(text, sizeof(text), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return text;
}

}  // namespace

absl::StatusOr<const v1::Trial*> FindTrial(const StudyEntry& entry,
                                           int64_t number) {
  auto it = entry.trials().find(number);
  if (it == entry.trials().end()) {
    return absl::NotFoundError(absl::StrCat("trial ", number, " of study '",
                                            entry.name(), "' not found"));
  }
  return &it->second;
}

absl::Status NotRunning(const v1::Trial& trial, const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("trial ", trial.number(), " of study '", trial.study(),
                   "' is ", v1::TrialState_Name(trial.state()), "; ", what));
}

google::protobuf::Timestamp TrialLifecycle::Now() const {
  return google::protobuf::util::TimeUtil::MillisecondsToTimestamp(
      absl::ToUnixMillis(p_.clock->Now()));
}

v1::UsageRecord TrialLifecycle::UsageOf(const StudyEntry& entry,
                                        const v1::Trial& trial) const {
  v1::UsageRecord r;
  r.set_study(entry.name());
  r.set_owner(entry.study().owner());
  r.set_trial(trial.number());
  r.set_attempt(trial.attempt());
  r.set_worker_id(trial.worker_id());
  *r.mutable_start_time() = trial.has_attempt_start_time()
                                ? trial.attempt_start_time()
                                : trial.start_time();
  *r.mutable_end_time() = Now();
  using google::protobuf::util::TimeUtil;
  const double wall =
      std::max<double>(0, (TimeUtil::TimestampToMilliseconds(r.end_time()) -
                           TimeUtil::TimestampToMilliseconds(r.start_time())) /
                              1000.0);
  r.set_slot_seconds(wall);
  r.set_gpu_seconds(wall * entry.study().spec().trial().resources().gpus());
  r.set_cpu_seconds(trial.attempt_cpu_seconds());
  const bool preempted =
      trial.state() == v1::PENDING && trial.preemptions_size() > 0 &&
      trial.preemptions().rbegin()->attempt() == trial.attempt();
  r.set_outcome(preempted ? "PREEMPTED"
                : trial.state() == v1::PENDING
                    ? "REQUEUED"
                    : v1::TrialState_Name(trial.state()));
  return r;
}

absl::Status TrialLifecycle::SaveTrial(StudyEntry& entry,
                                       const v1::Trial& trial) {
  auto before = entry.trials().find(trial.number());
  std::optional<v1::UsageRecord> usage;
  if (entry.worker_run() && before != entry.trials().end() &&
      before->second.state() == v1::RUNNING && trial.state() != v1::RUNNING) {
    usage = UsageOf(entry, trial);
  }
  DIAL_ASSIGN_OR_RETURN(Stored<v1::Trial> stored,
                        Save::Trial(*p_.store, trial));
  entry.Mirror(std::move(stored));
  if (usage) {
    // In the same commit as the trial's change. A record that cannot be
    // written is logged, not retried: the change it describes stands.
    absl::Status written = p_.store->AppendUsage(*usage);
    if (!written.ok()) {
      spdlog::error("study {}: trial {}: usage not recorded: {}", entry.name(),
                    trial.number(), written.ToString());
    } else if (p_.on_usage) {
      p_.on_usage(*usage);
    }
  }
  if (p_.preemptions && trial.state() != v1::RUNNING) {
    p_.preemptions->Ended({trial.study(), trial.number()});
  }
  return absl::OkStatus();
}

absl::Status TrialLifecycle::SaveStudyState(StudyEntry& entry,
                                            v1::StudyState state) {
  v1::Study updated = entry.study();
  updated.set_state(state);
  *updated.mutable_update_time() = Now();
  DIAL_ASSIGN_OR_RETURN(Stored<v1::Study> stored,
                        Save::Study(*p_.store, std::move(updated)));
  entry.Apply(std::move(stored));
  return absl::OkStatus();
}

void TrialLifecycle::Emit(const StudyEntry& entry, v1::StudyEvent::Kind kind,
                          const v1::Trial* trial) {
  if (!p_.events->Watched(entry.name())) return;
  v1::StudyEvent event;
  event.set_kind(kind);
  *event.mutable_study() = entry.WithCounts();
  if (trial) *event.mutable_trial() = *trial;
  if (const v1::Trial* best = entry.Best()) *event.mutable_best_trial() = *best;
  p_.events->Publish(entry.name(), std::move(event));
}

void TrialLifecycle::Doom(std::vector<DoomedCheckpoint> doomed) {
  for (auto& d : doomed) p_.outbox->doomed.push_back(std::move(d));
}

std::optional<double> TrialLifecycle::RetentionScore(
    const StudyEntry& entry, const v1::Trial& trial, int64_t step,
    const searchers::Metrics& metrics, const std::string& checkpoint) const {
  // Security round two, M3: only the trainer's <study>/<trial>/<step> ids
  // were subject to retention; every path a command trial reported was
  // kept. Any checkpoint of the trial's own directory is now.
  if (!p_.retention || checkpoint.empty() ||
      !storage::CheckpointStore::CheckOwnId(checkpoint, entry.name(),
                                            trial.number())
           .ok()) {
    return std::nullopt;
  }
  const auto& objective = entry.study().spec().objective();
  auto value = metrics.find(objective.metric());
  double score = -std::numeric_limits<double>::infinity();
  if (value != metrics.end() && std::isfinite(value->second)) {
    score = objective.goal() == v1::MAXIMIZE ? value->second : -value->second;
  }
  return score;
}

absl::StatusOr<int64_t> TrialLifecycle::CheckQuota(
    const StudyEntry& entry, const std::string& checkpoint) const {
  // Without a quota nothing is measured: a report's checkpoint is not
  // walked on every report for a figure no one reads.
  if (p_.quota == nullptr || p_.quota->limit() <= 0 ||
      p_.checkpoints == nullptr) {
    return 0;
  }
  // A checkpoint that is not on this root (an ask/tell client's elsewhere)
  // takes none of its disk.
  absl::StatusOr<int64_t> bytes = p_.checkpoints->SizeOf(checkpoint);
  if (!bytes.ok()) return 0;
  DIAL_RETURN_IF_ERROR(
      p_.quota->Check(entry.study().owner(), entry.name(), checkpoint, *bytes));
  return *bytes;
}

absl::Status TrialLifecycle::IndexCheckpoint(StudyEntry& entry,
                                             const v1::Trial& trial,
                                             int64_t step,
                                             const std::string& checkpoint,
                                             double score) {
  // Security round two, M3: no bound on a user's checkpoint disk. The
  // owner's quota is checked before anything is written.
  DIAL_ASSIGN_OR_RETURN(const int64_t bytes, CheckQuota(entry, checkpoint));
  storage::CheckpointRecord record;
  record.study = entry.name();
  record.trial = trial.number();
  record.step = step;
  record.id = checkpoint;
  record.size_bytes = bytes;
  record.score = score;
  DIAL_RETURN_IF_ERROR(p_.store->PutCheckpoint(record));
  if (p_.quota != nullptr) {
    p_.quota->Set(entry.study().owner(), entry.name(), checkpoint, bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Decision> TrialLifecycle::RecordReport(
    StudyEntry& entry, v1::Trial trial, int64_t step,
    const searchers::Metrics& metrics, const std::string& checkpoint,
    bool uploading) {
  trial.set_last_step(step);
  if (!checkpoint.empty() && !uploading) {
    trial.set_checkpoint(checkpoint);
    trial.set_checkpoint_step(step);
  }
  v1::MetricPoint point;
  point.set_step(step);
  *point.mutable_metrics() = metrics;
  *point.mutable_time() = Now();
  // A trainer checkpoint of this step is indexed (with its score) before
  // the report, so a restarted scheduler finds every checkpoint a recorded
  // report names; a stray index entry (the report then failed) is replaced
  // when the report is retried. One still uploading is indexed when it is
  // durable.
  std::optional<double> score =
      RetentionScore(entry, trial, step, metrics, checkpoint);
  if (score && !uploading) {
    DIAL_RETURN_IF_ERROR(
        IndexCheckpoint(entry, trial, step, checkpoint, *score));
  }
  DIAL_ASSIGN_OR_RETURN(Stored<v1::Trial> stored,
                        Save::Report(*p_.store, trial, point));
  entry.Mirror(std::move(stored));
  entry.ForgetUnsaved(trial.number());
  if (uploading && !checkpoint.empty()) {
    entry.AddUpload(trial.number(), step,
                    {checkpoint, score, trial.worker_id()});
  }
  entry.ObserveReport(trial, step, metrics);
  if (p_.retention) {
    // Pins taken for this trial's exploit are released: reporting again
    // means its worker finished copying.
    Doom(p_.retention->Release(entry.study(), trial.number()));
    if (score && !uploading) {
      Doom(p_.retention->Record(entry.study(), trial.number(), step, *score,
                                checkpoint));
    }
  }

  v1::Decision decision;
  if (entry.study().state() == v1::STUDY_STOPPED) {
    decision.set_action(v1::Decision::STOP);
    decision.set_reason("study stopped");
  } else {
    decision = entry.trial_scheduler().OnReport(trial, step, metrics);
  }
  // A trial being preempted pauses here, unless told to stop or to copy
  // another's weights (then it pauses at its next report).
  std::optional<std::string> preempted_by;
  if (const Preemptions::Mark* mark =
          p_.preemptions ? p_.preemptions->Find({entry.name(), trial.number()},
                                                trial.attempt())
                         : nullptr;
      mark != nullptr && decision.action() != v1::Decision::STOP &&
      decision.action() != v1::Decision::EXPLOIT) {
    preempted_by = mark->by_study;
    decision.set_action(v1::Decision::PAUSE);
    decision.set_reason("preempted by study " + *preempted_by);
  }
  entry.RememberDecision(trial.number(), step, decision);
  absl::Status applied = preempted_by
                             ? Preempt(entry, trial, *preempted_by, false)
                             : ApplyDecision(entry, trial, step, decision);
  if (!applied.ok()) {
    // The report is on disk (the trial scheduler has seen it and a restart
    // replays it); the decision's effect is not. A retry of this report
    // saves it instead of recording the report twice.
    entry.LeaveUnsaved(trial.number(), step, decision);
    return applied;
  }
  return decision;
}

absl::StatusOr<bool> TrialLifecycle::CheckpointUploaded(StudyEntry& entry,
                                                        v1::Trial trial,
                                                        int64_t step,
                                                        const std::string& id) {
  if (step > trial.last_step()) {
    // Its report may still be on its way (buffered through an outage).
    return absl::UnavailableError(absl::StrCat(
        "checkpoint ", id, " of step ", step,
        ": that step is not reported yet; retry after the report"));
  }
  std::optional<double> score;
  if (const auto* upload = entry.FindUpload(trial.number(), step);
      upload != nullptr && upload->id == id) {
    score = upload->score;
  }
  if (entry.Uploading(trial.number())) {
    entry.ForgetUploads(trial.number(), step);
    // A trial held back for this upload may run again.
    if (!entry.Uploading(trial.number())) p_.outbox->dispatch = true;
  }
  if (!trial.checkpoint().empty() && trial.checkpoint_step() > step) {
    return false;  // it restores from later already
  }
  if (!score && p_.retention &&
      storage::CheckpointStore::CheckOwnId(id, entry.name(), trial.number())
          .ok()) {
    // Reported before a scheduler restart: its metrics are on disk, not
    // here; retention keeps it as the latest all the same.
    score = -std::numeric_limits<double>::infinity();
  }
  if (score)
    DIAL_RETURN_IF_ERROR(IndexCheckpoint(entry, trial, step, id, *score));
  trial.set_checkpoint(id);
  trial.set_checkpoint_step(step);
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  // PBT's donors point at restore points, which retention keeps.
  entry.trial_scheduler().OnCheckpoint(trial);
  if (score) {
    Doom(p_.retention->Record(entry.study(), trial.number(), step, *score, id));
  }
  return true;
}

absl::Status TrialLifecycle::ApplyDecision(StudyEntry& entry, v1::Trial trial,
                                           int64_t step,
                                           const v1::Decision& decision) {
  if (decision.action() == v1::Decision::STOP) {
    trial.set_state(v1::STOPPED);
    *trial.mutable_end_time() = Now();
    return Finalize(entry, trial);
  }
  if (decision.action() == v1::Decision::PAUSE) {
    // Frees the worker slot; the trial resumes from this step's checkpoint
    // if the trial scheduler promotes it.
    trial.set_state(v1::PAUSED);
    DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
    p_.workers->Undispatched({trial.study(), trial.number()});
    Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
    p_.outbox->fills.insert(entry.name());
    FinishIfDone(entry);
    return absl::OkStatus();
  }
  if (decision.action() == v1::Decision::EXPLOIT) {
    // Keep the source checkpoint until this trial's worker has copied it.
    if (p_.retention) {
      p_.retention->Pin(entry.name(), decision.source_checkpoint(),
                        trial.number());
    }
    // The trial goes on from the source's weights with new params: record
    // the change so the schedule can be replayed.
    v1::LineageEntry* lineage = trial.add_lineage();
    lineage->set_step(step);
    lineage->set_source_trial(decision.source_trial());
    lineage->set_source_step(decision.source_step());
    *lineage->mutable_old_params() = trial.params();
    *lineage->mutable_new_params() = decision.new_params();
    *trial.mutable_params() = decision.new_params();
    DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  }
  Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
  return absl::OkStatus();
}

std::optional<v1::Decision> TrialLifecycle::RepeatedStep(
    const StudyEntry& entry, const v1::Trial& trial, int64_t step) const {
  const StudyEntry::Decided* last = entry.LastDecision(trial.number());
  if (last != nullptr && last->first == step && step == trial.last_step()) {
    return last->second;
  }
  if (trial.state() != v1::RUNNING || step > trial.last_step()) {
    return std::nullopt;
  }
  v1::Decision decision;
  decision.set_action(entry.study().state() == v1::STUDY_STOPPED
                          ? v1::Decision::STOP
                          : v1::Decision::CONTINUE);
  decision.set_reason("step already recorded");
  return decision;
}

absl::StatusOr<std::optional<v1::Decision>> TrialLifecycle::SaveUnsavedDecision(
    StudyEntry& entry, int64_t number, int64_t step) {
  const StudyEntry::Decided* unsaved = entry.Unsaved(number);
  auto trial = entry.trials().find(number);
  if (unsaved == nullptr || unsaved->first != step ||
      trial == entry.trials().end() || trial->second.state() != v1::RUNNING ||
      trial->second.last_step() != step) {
    return std::optional<v1::Decision>();
  }
  const v1::Decision decision = unsaved->second;
  DIAL_RETURN_IF_ERROR(ApplyDecision(entry, trial->second, step, decision));
  entry.ForgetUnsaved(number);
  return std::optional<v1::Decision>(decision);
}

absl::Status TrialLifecycle::Finalize(StudyEntry& entry, v1::Trial trial) {
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  p_.workers->Undispatched({trial.study(), trial.number()});
  entry.Observe(trial);  // for the searcher, on its executor
  entry.trial_scheduler().OnTrialFinished(trial);
  Emit(entry, v1::StudyEvent::TRIAL_FINISHED, &trial);
  // The trial's end is on disk: acknowledge it even if the study's cannot
  // be saved yet.
  FinishIfDone(entry);
  p_.outbox->fills.insert(entry.name());
  p_.outbox->dispatch = true;
  return absl::OkStatus();
}

absl::Status TrialLifecycle::Requeue(StudyEntry& entry, v1::Trial trial) {
  // Its worker is gone or gives it up: no upload of this attempt will come.
  entry.ForgetUploads(trial.number());
  return BackToPending(entry, std::move(trial));
}

absl::Status TrialLifecycle::Promote(StudyEntry& entry, v1::Trial trial) {
  // The checkpoint it paused with may still be uploading: the placer holds
  // it back until that arrives (or its worker finishes without it).
  return BackToPending(entry, std::move(trial));
}

absl::Status TrialLifecycle::BackToPending(StudyEntry& entry, v1::Trial trial) {
  if (entry.study().state() != v1::STUDY_ACTIVE) {
    // Nobody will run it again: it ends where it is.
    trial.set_state(v1::STOPPED);
    trial.set_worker_id("");
    *trial.mutable_end_time() = Now();
    return Finalize(entry, trial);
  }
  trial.set_state(v1::PENDING);
  trial.set_worker_id("");
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  p_.workers->Undispatched({trial.study(), trial.number()});
  Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
  p_.outbox->dispatch = true;
  return absl::OkStatus();
}

absl::Status TrialLifecycle::Preempt(StudyEntry& entry, v1::Trial trial,
                                     const std::string& by, bool forced) {
  v1::Preemption* p = trial.add_preemptions();
  p->set_by_study(by);
  *p->mutable_time() = Now();
  p->set_attempt(trial.attempt());
  p->set_resume_step(trial.checkpoint().empty() ? 0 : trial.checkpoint_step());
  p->set_forced(forced);
  spdlog::info("study {}: trial {} attempt {} preempted by study {}{}",
               entry.name(), trial.number(), trial.attempt(), by,
               forced ? " (forced: not paused within the grace)" : "");
  if (forced) return Requeue(entry, std::move(trial));
  // Paused by its report's answer: it keeps its worker id, so the worker's
  // FinishTrial for this attempt is taken (and ignored).
  trial.set_state(v1::PENDING);
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  p_.workers->Undispatched({trial.study(), trial.number()});
  Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
  p_.outbox->dispatch = true;
  return absl::OkStatus();
}

absl::StatusOr<const v1::Trial*> TrialLifecycle::Fence(
    StudyEntry& entry, const std::string& worker_id, int64_t number,
    int32_t attempt, const std::string& lease_token) {
  DIAL_ASSIGN_OR_RETURN(const v1::Trial* trial, FindTrial(entry, number));
  // Security round two, finding 12: a trial stored with no lease token
  // (written before tokens existed) took reports with any token. No
  // token matches an attempt that has none.
  if (trial->worker_id() == worker_id && trial->attempt() == attempt &&
      (trial->lease_token().empty() || trial->lease_token() != lease_token)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "attempt ", attempt, " of trial ", number,
        trial->lease_token().empty()
            ? ": the attempt has no lease token (it is from before lease "
              "tokens); it is requeued when its lease ends"
            : ": the lease token does not match the one this attempt was "
              "given"));
  }
  if (trial->worker_id() != worker_id || trial->attempt() != attempt) {
    return absl::FailedPreconditionError(absl::StrCat(
        "attempt ", attempt, " of trial ", number, " on worker '", worker_id,
        "' is stale: the trial now belongs to attempt ", trial->attempt(),
        trial->worker_id().empty()
            ? ""
            : " on worker '" + trial->worker_id() + "'"));
  }
  return trial;
}

absl::StatusOr<const v1::Trial*> TrialLifecycle::FenceUpload(
    StudyEntry& entry, const std::string& worker_id, int64_t number,
    int32_t attempt, const std::string& lease_token) {
  DIAL_ASSIGN_OR_RETURN(const v1::Trial* trial, FindTrial(entry, number));
  // A paused trial may already be promoted (PENDING, no worker) while its
  // last checkpoint uploads: still this attempt's, until another starts.
  if (trial->attempt() == attempt && !trial->lease_token().empty() &&
      trial->lease_token() == lease_token &&
      (trial->worker_id() == worker_id || trial->worker_id().empty())) {
    return trial;
  }
  return Fence(entry, worker_id, number, attempt, lease_token);
}

absl::Status TrialLifecycle::MaybeFinish(StudyEntry& entry) {
  if (entry.study().state() != v1::STUDY_ACTIVE || entry.active_trials() > 0) {
    return absl::OkStatus();
  }
  const int64_t max_trials = entry.study().spec().budget().max_trials();
  if (int64_t(entry.trials().size()) < max_trials &&
      (!entry.exhausted() || !entry.study().queue().empty())) {
    return absl::OkStatus();
  }
  if (entry.open_trials() > 0) {
    // Only PAUSED trials are left. Worker-run ones may still be promoted:
    // that is the suggestion thread's call; once nothing is promotable they
    // are over. Ask/tell clients finish their own.
    if (!entry.worker_run()) return absl::OkStatus();
    if (entry.trial_scheduler().HasPromotion()) {
      p_.outbox->fills.insert(entry.name());
      return absl::OkStatus();
    }
    std::vector<v1::Trial> paused;
    for (const auto& [n, t] : entry.trials()) {
      if (t.state() == v1::PAUSED) paused.push_back(t);
    }
    for (auto& t : paused) {
      t.set_state(v1::STOPPED);
      t.set_error("");
      *t.mutable_end_time() = Now();
      DIAL_RETURN_IF_ERROR(SaveTrial(entry, t));
      entry.Observe(t);
      Emit(entry, v1::StudyEvent::TRIAL_FINISHED, &t);
    }
  }
  DIAL_RETURN_IF_ERROR(SaveStudyState(entry, v1::STUDY_COMPLETED));
  Emit(entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
  return absl::OkStatus();
}

void TrialLifecycle::FinishIfDone(StudyEntry& entry) {
  absl::Status status = MaybeFinish(entry);
  if (status.ok()) return;
  // Worker-run studies retry on the next AcquireTrial; ask/tell studies on
  // the next SuggestTrials, which checks again anyway.
  spdlog::error("study {}: cannot record its end yet: {}", entry.name(),
                status.ToString());
  entry.FillFailed();
}

absl::StatusOr<Assignment> TrialLifecycle::Start(StudyEntry& entry,
                                                 const v1::Trial& pending,
                                                 const std::string& worker_id) {
  v1::Trial trial = pending;
  trial.set_state(v1::RUNNING);
  trial.set_attempt(trial.attempt() + 1);
  trial.set_worker_id(worker_id);
  trial.set_lease_token(NewLeaseToken());
  if (!trial.has_start_time()) *trial.mutable_start_time() = Now();
  *trial.mutable_attempt_start_time() = Now();
  trial.clear_attempt_cpu_seconds();
  // Found by the fairness bench: a trial preempted at step 130 and resumed
  // from its checkpoint at 120 reported 130 again and got the earlier
  // attempt's PAUSE, with nothing applied.
  entry.ForgetDecision(trial.number());
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  p_.workers->Dispatched(worker_id, {trial.study(), trial.number()});
  // The PENDING queue is kept only a few trials deep: top it up.
  p_.outbox->fills.insert(entry.name());
  Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
  Assignment a;
  a.run = entry.study().spec().trial();
  a.restore_checkpoint = trial.checkpoint();
  a.start_step = trial.checkpoint().empty() ? 0 : trial.checkpoint_step();
  a.attempt = trial.attempt();
  a.trial = std::move(trial);
  return a;
}

}  // namespace dial::scheduler
