#include "scheduler/study_lifecycle.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/spec.h"
#include "common/status.h"
#include "scheduler/request_checks.h"
#include "scheduler/warm_start.h"
#include "searchers/pareto.h"
#include "searchers/registry.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {

void StudyLifecycle::Audit(const auth::Principal& who,
                           const std::string& action, const std::string& study,
                           const std::string& detail) {
  v1::AuditEvent event;
  *event.mutable_time() = p_.trials->Now();
  event.set_principal(who.anonymous ? "(no authentication)" : who.name);
  event.set_role(std::string(auth::RoleName(who.role)));
  event.set_action(action);
  event.set_study(study);
  event.set_detail(detail);
  absl::Status status = p_.store->AppendAudit(event);
  if (!status.ok()) {
    spdlog::error("audit log: cannot record {} of '{}' by '{}': {}", action,
                  study, who.name, status.ToString());
  }
}

absl::StatusOr<StudyLifecycle::Draft> StudyLifecycle::Prepare(
    v1::StudySpec spec, const auth::Principal& who) const {
  if (who.role != auth::Role::kUser && who.role != auth::Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not create studies (users and admins may)"));
  }
  DIAL_RETURN_IF_ERROR(searchers::ValidateSpec(spec, p_.limits->spec));
  DIAL_RETURN_IF_ERROR(CheckPriority(spec.priority(), who));
  std::random_device rd;
  searchers::FillDefaults((uint64_t{rd()} << 32) | rd(), spec, p_.limits->spec);
  Draft draft;
  DIAL_ASSIGN_OR_RETURN(draft.searcher, p_.loader->searchers()(spec));
  DIAL_ASSIGN_OR_RETURN(draft.trial_scheduler,
                        p_.loader->trial_schedulers()(spec));
  draft.study.set_name(spec.name());
  draft.study.set_owner(who.name);
  *draft.study.mutable_spec() = std::move(spec);
  draft.study.set_state(v1::STUDY_ACTIVE);
  *draft.study.mutable_create_time() = p_.trials->Now();
  *draft.study.mutable_update_time() = draft.study.create_time();
  return draft;
}

absl::StatusOr<v1::Study> StudyLifecycle::Create(Draft draft,
                                                 const auth::Principal& who,
                                                 const SourceFinder& sources) {
  v1::Study& study = draft.study;
  const std::string name = study.name();
  if (p_.studies->Contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("study '", name, "' already exists"));
  }
  if (!who.anonymous) {
    int32_t owned = 0;
    for (const auto& [other_name, other] : p_.studies->all()) {
      owned += other->study().owner() == who.name;
    }
    if (owned >= p_.limits->max_studies_per_owner) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "'", who.name, "' owns ", owned,
          " studies, the most allowed (--max-studies-per-owner); delete "
          "finished ones first"));
    }
  }
  if (!study.spec().warm_start().studies().empty()) {
    DIAL_ASSIGN_OR_RETURN(WarmStartPlan plan,
                          PlanWarmStart(study.spec(), sources));
    for (auto& q : plan.queue) {
      q.set_id(study.next_queue_id() + 1);
      study.set_next_queue_id(q.id());
      *study.add_queue() = std::move(q);
    }
    for (auto& t : plan.priors) *study.add_prior_trials() = std::move(t);
  }
  DIAL_ASSIGN_OR_RETURN(Stored<v1::Study> stored,
                        Save::NewStudy(*p_.store, std::move(study)));
  auto entry =
      std::make_shared<StudyEntry>(std::move(stored), std::move(draft.searcher),
                                   std::move(draft.trial_scheduler));
  for (const auto& t : entry->priors()) entry->searcher().ObservePrior(t);
  Audit(who, "CreateStudy", name,
        entry->study().queue().empty()
            ? ""
            : absl::StrCat("warm start: ", entry->study().queue_size(),
                           " configurations queued, ", entry->priors().size(),
                           " prior trials"));
  p_.outbox->fills.insert(name);
  v1::Study created = entry->WithCounts();
  p_.studies->Add(std::move(entry));
  return created;
}

absl::Status StudyLifecycle::CheckPriority(int32_t priority,
                                           const auth::Principal& who) const {
  if (who.is_admin()) return absl::OkStatus();
  const int32_t most = TableOf(p_.quotas)->For(who.name).max_priority;
  if (priority <= most) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("priority: '", who.name, "' may set at most ", most,
                   " (their quota's max_priority), not ", priority));
}

absl::StatusOr<v1::Study> StudyLifecycle::Update(StudyEntry& entry,
                                                 const StudyChange& change,
                                                 const auth::Principal& who) {
  const int32_t max_trials = change.max_trials;
  const int32_t max_parallel_trials = change.max_parallel_trials;
  const std::string name = entry.name();
  if (entry.study().state() == v1::STUDY_STOPPED) {
    return absl::FailedPreconditionError(
        absl::StrCat("study '", name, "' is stopped"));
  }
  v1::StudySpec spec = entry.study().spec();
  if (max_trials != 0) {
    if (max_trials < int64_t(entry.trials().size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_trials: ", max_trials, " is below the ",
                       entry.trials().size(), " trials already created"));
    }
    spec.mutable_budget()->set_max_trials(max_trials);
  }
  if (max_parallel_trials != 0) {
    spec.mutable_budget()->set_max_parallel_trials(max_parallel_trials);
  }
  if (spec.budget().max_parallel_trials() > spec.budget().max_trials()) {
    spec.mutable_budget()->set_max_parallel_trials(spec.budget().max_trials());
  }
  if (change.priority) {
    DIAL_RETURN_IF_ERROR(CheckPriority(*change.priority, who));
    spec.set_priority(*change.priority);
  }
  DIAL_RETURN_IF_ERROR(searchers::ValidateSpec(spec, p_.limits->spec));
  // The searcher may depend on the budget (a grid enumerates max_trials
  // points): build it anew, so an invalid change fails here and not at
  // the next restart, and replay what the old one observed.
  DIAL_RETURN_IF_ERROR(p_.loader->searchers()(spec).status());
  v1::Study updated = entry.study();
  *updated.mutable_spec() = spec;
  *updated.mutable_update_time() = p_.trials->Now();
  if (updated.state() == v1::STUDY_COMPLETED &&
      int64_t(entry.trials().size()) < spec.budget().max_trials()) {
    updated.set_state(v1::STUDY_ACTIVE);  // reopened
  }
  DIAL_ASSIGN_OR_RETURN(Stored<v1::Study> stored,
                        Save::Study(*p_.store, std::move(updated)));
  entry.Apply(std::move(stored));
  Audit(
      who, "UpdateStudy", name,
      absl::StrCat("max_trials=", spec.budget().max_trials(),
                   " max_parallel_trials=", spec.budget().max_parallel_trials(),
                   " priority=", spec.priority()));
  p_.maker->RebuildSearcher(p_.studies->Shared(name), spec);
  p_.outbox->fills.insert(name);
  p_.outbox->dispatch = true;  // a new priority may change who goes first
  DIAL_RETURN_IF_ERROR(p_.trials->MaybeFinish(entry));
  return entry.WithCounts();
}

absl::StatusOr<v1::SetNoteResponse> StudyLifecycle::SetNote(
    StudyEntry& entry, std::optional<int64_t> trial, const std::string& note,
    const auth::Principal& who) {
  DIAL_RETURN_IF_ERROR(CheckNote(note));
  v1::SetNoteResponse out;
  if (trial) {
    auto it = entry.trials().find(*trial);
    if (it == entry.trials().end()) {
      return absl::NotFoundError(absl::StrCat("trial: study '", entry.name(),
                                              "' has no trial ", *trial));
    }
    v1::Trial updated = it->second;
    updated.set_note(note);
    // The note alone: no state change, so none of SaveTrial's effects.
    DIAL_ASSIGN_OR_RETURN(Stored<v1::Trial> stored,
                          Save::Trial(*p_.store, std::move(updated)));
    entry.Mirror(std::move(stored));
    *out.mutable_trial() = entry.trials().at(*trial);
  } else {
    v1::Study updated = entry.study();
    updated.set_note(note);
    *updated.mutable_update_time() = p_.trials->Now();
    DIAL_ASSIGN_OR_RETURN(Stored<v1::Study> stored,
                          Save::Study(*p_.store, std::move(updated)));
    entry.Apply(std::move(stored));
    *out.mutable_study() = entry.WithCounts();
  }
  // The audit log says who changed which note, not what it says.
  Audit(who, "SetNote", entry.name(),
        absl::StrCat(trial ? absl::StrCat("trial ", *trial) : "study", ", ",
                     note.size(), " bytes"));
  return out;
}

absl::StatusOr<v1::Study> StudyLifecycle::Stop(StudyEntry& entry,
                                               const auth::Principal& who) {
  if (entry.study().state() != v1::STUDY_ACTIVE) return entry.WithCounts();
  std::vector<v1::Trial> stopped;
  for (const auto& [number, trial] : entry.trials()) {
    if (trial.state() == v1::PENDING || trial.state() == v1::PAUSED) {
      stopped.push_back(trial);
    }
  }
  for (auto& trial : stopped) {
    trial.set_state(v1::STOPPED);
    *trial.mutable_end_time() = p_.trials->Now();
    DIAL_RETURN_IF_ERROR(p_.trials->SaveTrial(entry, trial));
  }
  DIAL_RETURN_IF_ERROR(p_.trials->SaveStudyState(entry, v1::STUDY_STOPPED));
  Audit(who, "StopStudy", entry.name(), "");
  p_.trials->Emit(entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
  return entry.WithCounts();
}

absl::Status StudyLifecycle::Delete(StudyEntry& entry,
                                    const auth::Principal& who) {
  const std::string name = entry.name();
  DIAL_RETURN_IF_ERROR(p_.store->DeleteStudy(name));
  // Security round two, M2: the next study of this name downloaded the
  // deleted one's checkpoints. They leave the name now (a rename) and are
  // removed off the lock.
  if (p_.checkpoints != nullptr) {
    absl::Status retired = p_.checkpoints->RetireStudy(name);
    if (!retired.ok()) spdlog::warn("DeleteStudy: {}", retired.ToString());
  }
  Audit(who, "DeleteStudy", name, "");
  p_.trials->Emit(entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
  p_.retention->Forget(name);
  p_.quota->ForgetStudy(name);
  p_.maker->PurgeLater(p_.studies->Shared(name));
  p_.studies->Remove(name);
  return absl::OkStatus();
}

absl::Status StudyLifecycle::SaveQueue(StudyEntry& entry, v1::Study updated,
                                       std::vector<v1::QueuedTrial>& items,
                                       const auth::Principal& who,
                                       const std::string& action) {
  if (entry.study().queue_size() + int64_t(items.size()) > kMaxQueuedTrials) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "study '", entry.name(), "' would have more than ", kMaxQueuedTrials,
        " queued configurations; wait for some to run"));
  }
  for (auto& q : items) {
    q.set_id(updated.next_queue_id() + 1);
    updated.set_next_queue_id(q.id());
    *updated.add_queue() = q;
  }
  *updated.mutable_update_time() = p_.trials->Now();
  DIAL_ASSIGN_OR_RETURN(Stored<v1::Study> stored,
                        Save::Study(*p_.store, std::move(updated)));
  entry.Apply(std::move(stored));
  Audit(who, action, entry.name(),
        absl::StrCat(items.size(), " configurations queued"));
  p_.outbox->fills.insert(entry.name());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::QueuedTrial>> StudyLifecycle::Enqueue(
    StudyEntry& entry, std::vector<v1::QueuedTrial> trials,
    const auth::Principal& who, int32_t* waiting) {
  if (entry.study().state() != v1::STUDY_ACTIVE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "study '", entry.name(), "' is ",
        v1::StudyState_Name(entry.study().state()),
        "; raise budget.max_trials with UpdateStudy to reopen it"));
  }
  DIAL_ASSIGN_OR_RETURN(const searchers::SearchSpace* space, entry.space());
  for (size_t i = 0; i < trials.size(); ++i) {
    const std::string where = absl::StrCat("trials[", i, "]");
    DIAL_RETURN_IF_ERROR(space->Check(trials[i].params(), where + ".params"));
    if (trials[i].has_origin() || trials[i].id() != 0) {
      return absl::InvalidArgumentError(
          where + ": origin and id are the scheduler's to set");
    }
  }
  DIAL_RETURN_IF_ERROR(
      SaveQueue(entry, entry.study(), trials, who, "EnqueueTrials"));
  if (waiting) *waiting = entry.study().queue_size();
  return trials;
}

absl::StatusOr<std::vector<v1::QueuedTrial>> StudyLifecycle::Reevaluate(
    StudyEntry& entry, int32_t top, int32_t seeds, const auth::Principal& who,
    int32_t* max_trials) {
  const std::string name = entry.name();
  if (entry.study().state() == v1::STUDY_STOPPED) {
    return absl::FailedPreconditionError(
        absl::StrCat("study '", name, "' was stopped"));
  }
  std::vector<int64_t> best;
  if (searchers::IsMultiObjective(entry.study().spec())) {
    best = entry.ParetoFront().trials;
  } else {
    for (const auto& [value, number] : entry.ranked()) best.push_back(number);
  }
  if (best.size() > size_t(top)) best.resize(top);
  if (best.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("study '", name, "' has no COMPLETED trial yet"));
  }
  std::vector<v1::QueuedTrial> items;
  const uint64_t base = searchers::SearcherSeed(entry.study().spec());
  for (int64_t origin : best) {
    auto runs = entry.reruns().find(origin);
    const int64_t done =
        runs == entry.reruns().end() ? 0 : int64_t(runs->second.size());
    for (int s = 0; s < seeds; ++s) {
      v1::QueuedTrial& q = items.emplace_back();
      *q.mutable_params() = entry.trials().at(origin).params();
      q.set_origin(origin);
      // New seeds, below the trainer knob's limit (1e15).
      q.set_seed(SplitMix64(SplitMix64(base ^ uint64_t(origin)) +
                            uint64_t(done + s + 1)) %
                 uint64_t{1000000000000000});
    }
  }
  if (entry.study().queue_size() + int64_t(items.size()) > kMaxQueuedTrials) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than ", kMaxQueuedTrials,
                     " configurations would be queued; ask for fewer"));
  }
  // The budget grows to fit, and a finished study opens again: in a copy,
  // which becomes the study once it is written (issue 33: the memory was
  // changed first, and stayed ahead of a failed write).
  v1::Study study = entry.study();
  const int64_t needed = int64_t(entry.trials().size()) + study.queue_size() +
                         int64_t(items.size());
  if (needed > study.spec().budget().max_trials()) {
    if (needed > 1000000) {
      return absl::InvalidArgumentError("budget.max_trials would pass 1000000");
    }
    study.mutable_spec()->mutable_budget()->set_max_trials(
        static_cast<int32_t>(needed));
  }
  if (study.state() == v1::STUDY_COMPLETED) study.set_state(v1::STUDY_ACTIVE);
  DIAL_RETURN_IF_ERROR(
      SaveQueue(entry, std::move(study), items, who, "ReevaluateTrials"));
  if (max_trials) *max_trials = entry.study().spec().budget().max_trials();
  return items;
}

}  // namespace dial::scheduler
