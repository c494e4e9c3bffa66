#include "scheduler/core.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/random.h"
#include "common/spec.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "scheduler/access_checks.h"
#include "scheduler/request_checks.h"
#include "scheduler/warm_start.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {
namespace {

constexpr int32_t kMaxPageSize = 1000;
constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxSuggest = 1000;
constexpr size_t kMaxClientId = 256;

// Waits for `done`-style answers on this thread.
template <typename T>
T Await(const std::function<void(std::function<void(T)>)>& call) {
  absl::Notification ready;
  std::optional<T> result;
  call([&](T r) {
    result.emplace(std::move(r));
    ready.Notify();
  });
  ready.WaitForNotification();
  return std::move(*result);
}

// Whether a finished trial holds exactly this completion (the values and
// the error as CompleteTrial stores them).
bool SameResult(const v1::Trial& trial, const searchers::Metrics& metrics,
                const std::string& error) {
  if (trial.error() != error.substr(0, 16384) ||
      static_cast<size_t>(trial.final_metrics().size()) != metrics.size()) {
    return false;
  }
  for (const auto& [name, value] : metrics) {
    auto it = trial.final_metrics().find(name);
    if (it == trial.final_metrics().end() || !(it->second == value)) {
      return false;
    }
  }
  return true;
}

}  // namespace

SchedulerCore::Lock::Lock(SchedulerCore* core, WriteTicket* ticket)
    : core_(core), ticket_(ticket) {
  core_->mu_.Lock();
}

SchedulerCore::Lock::~Lock() {
  core_->ApplyEffects();
  const WriteTicket ticket = core_->Written();
  if (ticket_) *ticket_ = ticket;
  std::vector<std::function<void(WriteTicket)>> replies;
  replies.swap(core_->outbox_.replies);
  core_->mu_.Unlock();
  for (auto& reply : replies) reply(ticket);
  core_->events_.Deliver();
}

SchedulerCore::SchedulerCore(const SchedulerCoreOptions& options)
    : store_(options.store),
      durability_(options.store->durability()),
      checkpoints_(options.checkpoints),
      options_(options),
      clock_(options.clock ? options.clock : &real_clock_),
      loader_(
          options.store,
          options.searcher_factory
              ? options.searcher_factory
              : [](const v1::StudySpec&
                       spec) { return searchers::CreateSearcher(spec); },
          options.trial_scheduler_factory
              ? options.trial_scheduler_factory
              : [](const v1::StudySpec&
                       spec) { return searchers::CreateTrialScheduler(spec); }),
      workers_(clock_, options.worker_lease),
      quota_(options.limits.max_checkpoint_bytes_per_owner),
      lifecycle_({store_, clock_, &events_, &workers_,
                  checkpoints_ ? &retention_ : nullptr,
                  checkpoints_ ? &quota_ : nullptr, checkpoints_, &outbox_}),
      suggestions_(options.suggestion_threads > 0
                       ? options.suggestion_threads
                       : static_cast<int>(
                             std::max(1u, std::thread::hardware_concurrency())),
                   /*nice=*/10) {}

SchedulerCore::~SchedulerCore() {
  if (durability_) durability_->SetLostHandler(nullptr);
  StopWaiting();
  if (ticker_.joinable()) ticker_.join();
  std::thread backup;
  {
    Lock lock(this);
    backup = std::move(backup_thread_);
  }
  if (backup.joinable()) backup.join();
}

absl::StatusOr<std::unique_ptr<SchedulerCore>> SchedulerCore::Create(
    const SchedulerCoreOptions& options) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("SchedulerCore needs a StudyStore");
  }
  std::unique_ptr<SchedulerCore> core(new SchedulerCore(options));
  {
    Lock lock(core.get());
    DIAL_RETURN_IF_ERROR(core->Load());
  }
  if (core->durability_) {
    core->durability_->SetLostHandler([self = core.get()] {
      Lock lock(self);
      self->Reload();
    });
  }
  if (options.tick > absl::ZeroDuration()) {
    SchedulerCore* self = core.get();
    const absl::Duration tick = options.tick;
    core->ticker_ = std::thread([self, tick] {
      while (true) {
        {
          absl::MutexLock lock(&self->mu_);
          self->mu_.AwaitWithTimeout(absl::Condition(&self->stopping_), tick);
          if (self->stopping_) return;
        }
        self->Tick();
      }
    });
  }
  return core;
}

WriteTicket SchedulerCore::Written() const {
  return {durability_ ? durability_->WrittenSeq() : 0};
}

void SchedulerCore::WhenDurable(WriteTicket ticket,
                                std::function<void(absl::Status)> done) {
  if (durability_ == nullptr) return done(absl::OkStatus());
  durability_->WhenDurable(ticket.seq, std::move(done));
}

void SchedulerCore::ApplyEffects() {
  // Dispatching can write and so queue more effects: until none are left.
  while (true) {
    if (outbox_.dispatch) {
      DispatchNow();
    } else if (!outbox_.fills.empty()) {
      std::set<std::string> fills;
      fills.swap(outbox_.fills);
      for (const auto& name : fills) ScheduleFill(name);
    } else if (!outbox_.doomed.empty()) {
      std::vector<DoomedCheckpoint> doomed;
      doomed.swap(outbox_.doomed);
      DeleteWhenDurable(std::move(doomed), Written());
    } else {
      return;
    }
  }
}

void SchedulerCore::DispatchNow() {
  outbox_.dispatch = false;
  dispatcher_.Dispatch(
      [this](const std::string& worker_id, int32_t free_gpus)
          ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return lifecycle_.Assign(studies_, worker_id, free_gpus);
          },
      outbox_);
}

void SchedulerCore::ScheduleFill(const std::string& name) {
  std::shared_ptr<StudyEntry> entry = studies_.Shared(name);
  if (!entry || entry->fill_queued || !entry->worker_run()) return;
  entry->fill_queued = true;
  suggestions_.Enqueue(name, {[this, entry] { FillPending(entry); }, nullptr});
}

void SchedulerCore::DeleteWhenDurable(std::vector<DoomedCheckpoint> doomed,
                                      WriteTicket ticket) {
  if (checkpoints_ == nullptr) return;
  // Not on a study's executor: waiting for the commit must not hold up
  // suggestion work.
  housekeeping_.Enqueue("", {[this, doomed = std::move(doomed), ticket] {
                               DeleteCheckpoints(doomed, ticket);
                             },
                             nullptr});
}

void SchedulerCore::DeleteCheckpoints(
    const std::vector<DoomedCheckpoint>& doomed, WriteTicket ticket) {
  absl::Notification answered;
  absl::Status durable;
  WhenDurable(ticket, [&](absl::Status s) {
    durable = s;
    answered.Notify();
  });
  answered.WaitForNotification();
  if (!durable.ok()) return;
  for (const auto& d : doomed) {
    absl::Status status =
        d.remove ? checkpoints_->Delete(d.id) : absl::OkStatus();
    if (!status.ok() && !absl::IsNotFound(status)) {
      spdlog::warn("retention: {}", status.ToString());
      continue;
    }
    if (d.remove) {
      Lock lock(this);
      quota_.Remove(d.study, d.id);
    }
    // Out of the index too (were this write lost, a later restart would
    // only try the deletion again).
    status = store_->DeleteCheckpoint(d.study, d.trial, d.step);
    if (!status.ok() && !absl::IsNotFound(status)) {
      spdlog::warn("retention: {}", status.ToString());
    }
  }
}

void SchedulerCore::StopWaiting() {
  {
    Lock lock(this);
    stopping_ = true;
    // Parked long polls end empty rather than dangle.
    dispatcher_.EndAll(outbox_);
  }
  suggestions_.Stop();
  housekeeping_.Stop();
}

void SchedulerCore::WaitIdle() {
  // Suggestion work may queue deletions: until both are idle at once.
  for (int round = 0; round < 1000; ++round) {
    suggestions_.WaitIdle();
    housekeeping_.WaitIdle();
    if (suggestions_.Idle() && housekeeping_.Idle()) return;
  }
}

void SchedulerCore::Reload() {
  // Memory ran ahead of the store by the lost writes: start again from
  // what the store holds, as a restarted scheduler would.
  spdlog::error("a database commit failed; reloading every study from it");
  studies_.DropAll();
  workers_.ClearDispatched();
  retention_.Clear();
  if (durability_) durability_->Recover();
  absl::Status status = Load();
  studies_.set_reload_needed(!status.ok());
  if (!status.ok()) {
    spdlog::error("reload failed, retrying: {}", status.ToString());
    // The studies loaded before the failure have work queued (ScheduleFill)
    // that must not run on entries about to be dropped.
    studies_.DropAll();
    workers_.ClearDispatched();
  }
}

absl::Status SchedulerCore::Load() {
  DIAL_ASSIGN_OR_RETURN(auto studies, store_->ListStudies());
  // Rows of studies deleted before a crash or restart.
  PurgeLater(nullptr);
  for (auto& study : studies) {
    DIAL_ASSIGN_OR_RETURN(std::shared_ptr<StudyEntry> entry,
                          loader_.Load(std::move(study)));
    // Trials running on workers stay theirs: workers outlive a scheduler
    // restart and come back with the same id, so each such worker gets a
    // fresh lease. One that does not come back within it loses its trials
    // to the queue (Tick); one that comes back without a trial loses that
    // trial a lease later (Heartbeat).
    for (const auto& [number, trial] : entry->trials) {
      if (trial.state() != v1::RUNNING || trial.worker_id().empty()) continue;
      workers_.Adopt(trial.worker_id(), {trial.study(), trial.number()});
    }
    if (checkpoints_) {
      // Checkpoints written before the restart are reclaimed too. What a
      // load reads is committed: no write to wait for (after a lost commit,
      // the latest ticket is a lost one).
      DIAL_ASSIGN_OR_RETURN(auto records,
                            store_->ListCheckpoints(entry->name()));
      for (const auto& r : records) {
        quota_.Set(entry->study.owner(), entry->name(), r.id, r.size_bytes);
      }
      DeleteWhenDurable(
          retention_.Restore(entry->study, records, entry->trials),
          WriteTicket{});
    }
    outbox_.fills.insert(entry->name());
    studies_.Add(std::move(entry));
  }
  return absl::OkStatus();
}

absl::StatusOr<StudyEntry*> SchedulerCore::FindFor(const auth::Principal& who,
                                                   const std::string& name,
                                                   Access access) {
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(name));
  const std::string& owner = entry->study.owner();
  if (access == Access::kRead ? who.can_read(owner) : who.can_write(owner)) {
    return entry;
  }
  // Security round two, finding 11: the refusal named the owner. Whoever
  // may not read a study learns nothing of it, not even that it exists:
  // the answer is the one for a study that is not there.
  if (!who.can_read(owner)) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(auth::RoleName(who.role), " '", who.name,
                   "' may not change study '", name, "'"));
}

void SchedulerCore::Audit(const auth::Principal& who, const std::string& action,
                          const std::string& study, const std::string& detail) {
  v1::AuditEvent event;
  *event.mutable_time() = lifecycle_.Now();
  event.set_principal(who.anonymous ? "(no authentication)" : who.name);
  event.set_role(std::string(auth::RoleName(who.role)));
  event.set_action(action);
  event.set_study(study);
  event.set_detail(detail);
  absl::Status status = store_->AppendAudit(event);
  if (!status.ok()) {
    spdlog::error("audit log: cannot record {} of '{}' by '{}': {}", action,
                  study, who.name, status.ToString());
  }
}

Reply<v1::Study> SchedulerCore::CreateStudy(v1::StudySpec spec,
                                            const auth::Principal& who) {
  if (who.role != auth::Role::kUser && who.role != auth::Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not create studies (users and admins may)"));
  }
  absl::Status valid = ValidateStudySpec(spec, options_.limits.spec);
  if (!valid.ok()) return valid;
  std::random_device rd;
  FillSpecDefaults((uint64_t{rd()} << 32) | rd(), spec, options_.limits.spec);
  auto entry = std::make_shared<StudyEntry>();
  auto searcher = loader_.searchers()(spec);
  if (!searcher.ok()) return searcher.status();
  entry->searcher = std::move(*searcher);
  entry->wants_reports = entry->searcher->WantsReports();
  auto trial_scheduler = loader_.trial_schedulers()(spec);
  if (!trial_scheduler.ok()) return trial_scheduler.status();
  entry->trial_scheduler = std::move(*trial_scheduler);
  entry->study.set_name(spec.name());
  entry->study.set_owner(who.name);
  *entry->study.mutable_spec() = std::move(spec);
  entry->study.set_state(v1::STUDY_ACTIVE);
  *entry->study.mutable_create_time() = lifecycle_.Now();
  *entry->study.mutable_update_time() = entry->study.create_time();

  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    if (studies_.Contains(entry->name())) {
      return absl::AlreadyExistsError(
          absl::StrCat("study '", entry->name(), "' already exists"));
    }
    if (!who.anonymous) {
      int32_t owned = 0;
      for (const auto& [name, other] : studies_.all()) {
        owned += other->study.owner() == who.name;
      }
      if (owned >= options_.limits.max_studies_per_owner) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "'", who.name, "' owns ", owned,
            " studies, the most allowed (--max-studies-per-owner); delete "
            "finished ones first"));
      }
    }
    if (!entry->study.spec().warm_start().studies().empty()) {
      DIAL_ASSIGN_OR_RETURN(
          WarmStartPlan plan,
          PlanWarmStart(entry->study.spec(),
                        [&](const std::string& source)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                mu_) -> absl::StatusOr<const StudyEntry*> {
                              return FindFor(who, source, Access::kRead);
                            }));
      for (auto& q : plan.queue) {
        q.set_id(entry->study.next_queue_id() + 1);
        entry->study.set_next_queue_id(q.id());
        *entry->study.add_queue() = std::move(q);
      }
      for (auto& t : plan.priors) {
        entry->searcher->ObservePrior(t);
        *entry->study.add_prior_trials() = std::move(t);
      }
    }
    DIAL_RETURN_IF_ERROR(store_->CreateStudy(entry->study));
    entry->priors.Swap(entry->study.mutable_prior_trials());
    Audit(who, "CreateStudy", entry->name(),
          entry->study.queue().empty()
              ? ""
              : absl::StrCat("warm start: ", entry->study.queue_size(),
                             " configurations queued, ", entry->priors.size(),
                             " prior trials"));
    outbox_.fills.insert(entry->name());
    v1::Study created = entry->WithCounts();
    studies_.Add(std::move(entry));
    return created;
  });
}

Reply<v1::Study> SchedulerCore::GetStudy(const std::string& name,
                                         const auth::Principal& who) {
  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kRead));
    return entry->WithCounts();
  });
}

Reply<StudyPage> SchedulerCore::ListStudies(const auth::Principal& who,
                                            int32_t page_size,
                                            const std::string& page_token) {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 (default ", kDefaultPageSize,
                     ") and ", kMaxPageSize));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  // Oldest first; the token is the last study's (create time, name).
  using Key = std::pair<int64_t, std::string>;
  auto key_of = [](const v1::Study& s) {
    return Key(google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                   s.create_time()),
               s.name());
  };
  Key after(INT64_MIN, "");
  if (!page_token.empty()) {
    const size_t slash = page_token.find('/');
    if (slash == std::string::npos ||
        !absl::SimpleAtoi(page_token.substr(0, slash), &after.first)) {
      return absl::InvalidArgumentError(
          "page_token: not a token returned by ListStudies");
    }
    after.second = page_token.substr(slash + 1);
  }
  return Locked<StudyPage>([&]() -> absl::StatusOr<StudyPage> {
    std::vector<std::pair<Key, const StudyEntry*>> readable;
    for (const auto& [name, entry] : studies_.all()) {
      if (!who.can_read(entry->study.owner())) continue;
      Key key = key_of(entry->study);
      if (key > after) readable.emplace_back(std::move(key), entry.get());
    }
    std::sort(readable.begin(), readable.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    StudyPage page;
    size_t bytes = 0;
    for (const auto& [key, entry] : readable) {
      if (int32_t(page.studies.size()) == page_size ||
          bytes >= options_.limits.max_page_bytes) {
        const Key& last = key_of(page.studies.back());
        page.next_page_token = absl::StrCat(last.first, "/", last.second);
        break;
      }
      page.studies.push_back(entry->WithCounts());
      bytes += page.studies.back().ByteSizeLong();
    }
    return page;
  });
}

Reply<v1::Study> SchedulerCore::UpdateStudy(const std::string& name,
                                            int32_t max_trials,
                                            int32_t max_parallel_trials,
                                            const auth::Principal& who) {
  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    if (entry->study.state() == v1::STUDY_STOPPED) {
      return absl::FailedPreconditionError(
          absl::StrCat("study '", name, "' is stopped"));
    }
    v1::StudySpec spec = entry->study.spec();
    if (max_trials != 0) {
      if (max_trials < int64_t(entry->trials.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("max_trials: ", max_trials, " is below the ",
                         entry->trials.size(), " trials already created"));
      }
      spec.mutable_budget()->set_max_trials(max_trials);
    }
    if (max_parallel_trials != 0) {
      spec.mutable_budget()->set_max_parallel_trials(max_parallel_trials);
    }
    if (spec.budget().max_parallel_trials() > spec.budget().max_trials()) {
      spec.mutable_budget()->set_max_parallel_trials(
          spec.budget().max_trials());
    }
    DIAL_RETURN_IF_ERROR(ValidateStudySpec(spec, options_.limits.spec));
    // The searcher may depend on the budget (a grid enumerates max_trials
    // points): build it anew, so an invalid change fails here and not at
    // the next restart, and replay what the old one observed.
    DIAL_RETURN_IF_ERROR(loader_.searchers()(spec).status());
    v1::Study updated = entry->study;
    *updated.mutable_spec() = spec;
    *updated.mutable_update_time() = lifecycle_.Now();
    const bool reopen =
        updated.state() == v1::STUDY_COMPLETED &&
        int64_t(entry->trials.size()) < spec.budget().max_trials();
    if (reopen) updated.set_state(v1::STUDY_ACTIVE);
    DIAL_RETURN_IF_ERROR(store_->UpdateStudy(updated));
    Audit(who, "UpdateStudy", name,
          absl::StrCat(
              "max_trials=", spec.budget().max_trials(),
              " max_parallel_trials=", spec.budget().max_parallel_trials()));
    entry->study = std::move(updated);
    entry->exhausted = false;  // rediscovered on the next suggestion
    suggestions_.Enqueue(
        name, {[this, shared = studies_.Shared(name), spec] {
                 std::map<int64_t, v1::Trial> trials;
                 google::protobuf::RepeatedPtrField<v1::Trial> priors;
                 {
                   Lock lock(this);
                   if (!StudyRegistry::Gone(*shared).ok()) return;
                   trials = shared->trials;
                   priors = shared->priors;
                   shared->unobserved.clear();
                   shared->unobserved_reports.clear();
                 }
                 // The store is read without the core's lock; reports that
                 // arrive meanwhile are handed over as unobserved ones.
                 const absl::Time fit_start = absl::Now();
                 auto searcher = loader_.RebuildSearcher(spec, trials, priors);
                 if (options_.fit_seconds != nullptr) {
                   options_.fit_seconds->Observe(
                       absl::ToDoubleSeconds(absl::Now() - fit_start));
                 }
                 if (!searcher.ok()) {
                   spdlog::error("study {}: cannot rebuild its searcher: {}",
                                 spec.name(), searcher.status().ToString());
                   return;
                 }
                 shared->searcher = std::move(*searcher);
               },
               nullptr});
    outbox_.fills.insert(name);
    DIAL_RETURN_IF_ERROR(lifecycle_.MaybeFinish(*entry));
    return entry->WithCounts();
  });
}

Reply<v1::Study> SchedulerCore::StopStudy(const std::string& name,
                                          const auth::Principal& who) {
  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    if (entry->study.state() != v1::STUDY_ACTIVE) return entry->WithCounts();
    std::vector<v1::Trial> stopped;
    for (const auto& [number, trial] : entry->trials) {
      if (trial.state() == v1::PENDING || trial.state() == v1::PAUSED) {
        stopped.push_back(trial);
      }
    }
    for (auto& trial : stopped) {
      trial.set_state(v1::STOPPED);
      *trial.mutable_end_time() = lifecycle_.Now();
      DIAL_RETURN_IF_ERROR(lifecycle_.SaveTrial(*entry, trial));
    }
    DIAL_RETURN_IF_ERROR(lifecycle_.SaveStudyState(*entry, v1::STUDY_STOPPED));
    Audit(who, "StopStudy", name, "");
    lifecycle_.Emit(*entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
    return entry->WithCounts();
  });
}

StatusReply SchedulerCore::DeleteStudy(const std::string& name,
                                       const auth::Principal& who) {
  Reply<bool> reply = Locked<bool>([&]() -> absl::StatusOr<bool> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    // One small write: the store purges the rows later (PurgeDeleted), and
    // the entry's memory is freed with the task below, off the lock.
    DIAL_RETURN_IF_ERROR(store_->DeleteStudy(name));
    // Security round two, M2: the next study of this name downloaded the
    // deleted one's checkpoints. They leave the name now (a rename) and
    // are removed off the lock.
    if (checkpoints_ != nullptr) {
      absl::Status retired = checkpoints_->RetireStudy(name);
      if (!retired.ok()) spdlog::warn("DeleteStudy: {}", retired.ToString());
    }
    Audit(who, "DeleteStudy", name, "");
    lifecycle_.Emit(*entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
    retention_.Forget(name);
    quota_.ForgetStudy(name);
    PurgeLater(studies_.Shared(name));
    studies_.Remove(name);
    return true;
  });
  return StatusReply(reply.status(), reply.ticket());
}

Reply<TrialPage> SchedulerCore::ListTrials(
    const std::string& name, const std::vector<v1::TrialState>& states,
    int32_t page_size, const std::string& page_token,
    const auth::Principal& who) {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 (default ", kDefaultPageSize,
                     ") and ", kMaxPageSize));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  int64_t after = -1;
  if (!page_token.empty() &&
      (!absl::SimpleAtoi(page_token, &after) || after < 0)) {
    return absl::InvalidArgumentError(
        "page_token: not a token returned by ListTrials");
  }
  return Locked<TrialPage>([&]() -> absl::StatusOr<TrialPage> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kRead));
    TrialPage page;
    size_t bytes = 0;
    for (auto it = entry->trials.upper_bound(after); it != entry->trials.end();
         ++it) {
      if (!states.empty() && std::find(states.begin(), states.end(),
                                       it->second.state()) == states.end()) {
        continue;
      }
      if (int32_t(page.trials.size()) == page_size ||
          bytes >= options_.limits.max_page_bytes) {
        page.next_page_token = std::to_string(page.trials.back().number());
        break;
      }
      bytes += it->second.ByteSizeLong();
      page.trials.push_back(it->second);
    }
    return page;
  });
}

Reply<v1::Trial> SchedulerCore::GetTrial(const std::string& name,
                                         int64_t number,
                                         const auth::Principal& who,
                                         int32_t history_page_size,
                                         const std::string& history_page_token,
                                         std::string* next_history_page_token) {
  const Limits& limits = options_.limits;
  if (history_page_size < 0 || history_page_size > limits.max_history_page) {
    return absl::InvalidArgumentError(absl::StrCat(
        "history_page_size: must be between 0 (default ",
        limits.default_history_page, ") and ", limits.max_history_page));
  }
  if (history_page_size == 0) history_page_size = limits.default_history_page;
  int64_t after_step = -1;
  if (!history_page_token.empty() &&
      (!absl::SimpleAtoi(history_page_token, &after_step) || after_step < 0)) {
    return absl::InvalidArgumentError(
        "history_page_token: not a token returned by GetTrial");
  }
  Reply<v1::Trial> trial =
      Locked<v1::Trial>([&]() -> absl::StatusOr<v1::Trial> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kRead));
        DIAL_ASSIGN_OR_RETURN(v1::Trial * stored, FindTrial(*entry, number));
        return *stored;
      });
  if (!trial.ok()) return trial;
  // The history is read without the core's lock (the store has its own),
  // so a long one does not hold up reports. It may hold a report newer
  // than `trial`; that report is on record either way.
  // One point more than the page tells whether another page follows.
  storage::HistoryQuery query;
  query.after_step = after_step;
  query.limit = history_page_size + 1;
  query.max_bytes = limits.max_history_page_bytes;
  auto history = store_->GetMetricHistory(name, number, query);
  if (!history.ok()) return Reply<v1::Trial>(history.status(), trial.ticket());
  v1::Trial out = *std::move(trial);
  size_t bytes = 0;
  for (auto& point : *history) {
    if (out.metric_history_size() == history_page_size ||
        (out.metric_history_size() > 0 &&
         bytes >= limits.max_history_page_bytes)) {
      if (next_history_page_token) {
        *next_history_page_token = std::to_string(
            out.metric_history(out.metric_history_size() - 1).step());
      }
      break;
    }
    bytes += point.ByteSizeLong();
    *out.add_metric_history() = std::move(point);
  }
  // The store may have ended the page at its byte bound: more may follow.
  if (next_history_page_token && next_history_page_token->empty() &&
      bytes >= limits.max_history_page_bytes &&
      out.metric_history_size() == int(history->size())) {
    *next_history_page_token = std::to_string(
        out.metric_history(out.metric_history_size() - 1).step());
  }
  return Reply<v1::Trial>(std::move(out), trial.ticket());
}

Reply<std::vector<v1::Trial>> SchedulerCore::GetBestTrials(
    const std::string& name, int32_t count, const auth::Principal& who,
    v1::GetBestTrialsResponse* front) {
  if (count < 0 || count > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: must be between 0 (= 1) and ", kMaxPageSize));
  }
  if (count == 0) count = 1;
  return Locked<std::vector<v1::Trial>>(
      [&]() -> absl::StatusOr<std::vector<v1::Trial>> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kRead));
        std::vector<v1::Trial> out;
        size_t bytes = 0;
        auto add = [&](int64_t number) {
          if (int32_t(out.size()) >= count ||
              bytes >= options_.limits.max_page_bytes) {
            return false;
          }
          out.push_back(entry->trials.at(number));
          bytes += out.back().ByteSizeLong();
          return true;
        };
        if (searchers::IsMultiObjective(entry->study.spec())) {
          const StudyEntry::Front& pareto = entry->ParetoFront();
          for (int64_t number : pareto.trials) {
            if (!add(number)) break;
          }
          if (front) {
            front->set_hypervolume(pareto.hypervolume);
            front->mutable_reference_point()->Assign(pareto.reference.begin(),
                                                     pareto.reference.end());
            front->set_front_size(static_cast<int32_t>(pareto.trials.size()));
          }
          return out;
        }
        for (const auto& [value, number] : entry->ranked) {
          if (!add(number)) break;
          if (auto runs = entry->Runs(number); runs && front) {
            *front->add_seed_runs() = *runs;
          }
        }
        return out;
      });
}

SchedulerCore::Gauges SchedulerCore::ReadGauges() {
  Gauges g;
  Lock lock(this);
  for (const auto& [name, entry] : studies_.all()) {
    if (entry->deleted) continue;
    ++g.studies[entry->study.state()];
    for (const auto& [state, count] : entry->state_counts) {
      g.trials[name][state] = count;
    }
  }
  g.workers = workers_.size();
  for (const auto& [name, entry] : studies_.all()) {
    if (!entry->deleted) g.pending += entry->pending.size();
  }
  g.watchers = events_.watchers();
  g.events_queued = events_.queued();
  g.suggestions_queued = suggestions_.size();
  return g;
}

absl::Status SchedulerCore::Enqueue(StudyEntry& entry, v1::Study updated,
                                    std::vector<v1::QueuedTrial>& items,
                                    const auth::Principal& who,
                                    const std::string& action) {
  if (entry.study.queue_size() + int64_t(items.size()) > kMaxQueuedTrials) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "study '", entry.name(), "' would have more than ", kMaxQueuedTrials,
        " queued configurations; wait for some to run"));
  }
  for (auto& q : items) {
    q.set_id(updated.next_queue_id() + 1);
    updated.set_next_queue_id(q.id());
    *updated.add_queue() = q;
  }
  *updated.mutable_update_time() = lifecycle_.Now();
  DIAL_RETURN_IF_ERROR(store_->UpdateStudy(updated));
  entry.study = std::move(updated);
  Audit(who, action, entry.name(),
        absl::StrCat(items.size(), " configurations queued"));
  outbox_.fills.insert(entry.name());
  return absl::OkStatus();
}

Reply<std::vector<v1::QueuedTrial>> SchedulerCore::EnqueueTrials(
    const std::string& name, std::vector<v1::QueuedTrial> trials,
    const auth::Principal& who, int32_t* waiting) {
  if (trials.empty() || int64_t(trials.size()) > kMaxQueuedTrials) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trials: give between 1 and ", kMaxQueuedTrials, " configurations"));
  }
  return Locked<std::vector<v1::QueuedTrial>>(
      [&]() -> absl::StatusOr<std::vector<v1::QueuedTrial>> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kWrite));
        if (entry->study.state() != v1::STUDY_ACTIVE) {
          return absl::FailedPreconditionError(absl::StrCat(
              "study '", name, "' is ",
              v1::StudyState_Name(entry->study.state()),
              "; raise budget.max_trials with UpdateStudy to reopen it"));
        }
        DIAL_ASSIGN_OR_RETURN(
            auto space, searchers::SearchSpace::Create(entry->study.spec()));
        for (size_t i = 0; i < trials.size(); ++i) {
          const std::string where = absl::StrCat("trials[", i, "]");
          DIAL_RETURN_IF_ERROR(
              space.Check(trials[i].params(), where + ".params"));
          if (trials[i].has_origin() || trials[i].id() != 0) {
            return absl::InvalidArgumentError(
                where + ": origin and id are the scheduler's to set");
          }
        }
        DIAL_RETURN_IF_ERROR(
            Enqueue(*entry, entry->study, trials, who, "EnqueueTrials"));
        if (waiting) *waiting = entry->study.queue_size();
        return trials;
      });
}

Reply<std::vector<v1::QueuedTrial>> SchedulerCore::ReevaluateTrials(
    const std::string& name, int32_t top, int32_t seeds,
    const auth::Principal& who, int32_t* max_trials) {
  if (top < 1 || top > 100 || seeds < 1 || seeds > 100) {
    return absl::InvalidArgumentError(
        "top and seeds: each must be between 1 and 100");
  }
  return Locked<std::vector<v1::QueuedTrial>>(
      [&]() -> absl::StatusOr<std::vector<v1::QueuedTrial>> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kWrite));
        if (entry->study.state() == v1::STUDY_STOPPED) {
          return absl::FailedPreconditionError(
              absl::StrCat("study '", name, "' was stopped"));
        }
        std::vector<int64_t> best;
        if (searchers::IsMultiObjective(entry->study.spec())) {
          best = entry->ParetoFront().trials;
        } else {
          for (const auto& [value, number] : entry->ranked) {
            best.push_back(number);
          }
        }
        if (best.size() > size_t(top)) best.resize(top);
        if (best.empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("study '", name, "' has no COMPLETED trial yet"));
        }
        std::vector<v1::QueuedTrial> items;
        const uint64_t base = searchers::SearcherSeed(entry->study.spec());
        for (int64_t origin : best) {
          const int64_t done = entry->reruns.count(origin)
                                   ? int64_t(entry->reruns.at(origin).size())
                                   : 0;
          for (int s = 0; s < seeds; ++s) {
            v1::QueuedTrial& q = items.emplace_back();
            *q.mutable_params() = entry->trials.at(origin).params();
            q.set_origin(origin);
            // New seeds, below the trainer knob's limit (1e15).
            q.set_seed(SplitMix64(SplitMix64(base ^ uint64_t(origin)) +
                                  uint64_t(done + s + 1)) %
                       uint64_t{1000000000000000});
          }
        }
        if (entry->study.queue_size() + int64_t(items.size()) >
            kMaxQueuedTrials) {
          return absl::ResourceExhaustedError(
              absl::StrCat("more than ", kMaxQueuedTrials,
                           " configurations would be queued; ask for fewer"));
        }
        // The budget grows to fit, and a finished study opens again: in a
        // copy, which becomes the study once it is written (issue 33: the
        // memory was changed first, and stayed ahead of a failed write).
        v1::Study study = entry->study;
        const int64_t needed = int64_t(entry->trials.size()) +
                               study.queue_size() + int64_t(items.size());
        if (needed > study.spec().budget().max_trials()) {
          if (needed > 1000000) {
            return absl::InvalidArgumentError(
                "budget.max_trials would pass 1000000");
          }
          study.mutable_spec()->mutable_budget()->set_max_trials(
              static_cast<int32_t>(needed));
        }
        if (study.state() == v1::STUDY_COMPLETED) {
          study.set_state(v1::STUDY_ACTIVE);
        }
        DIAL_RETURN_IF_ERROR(
            Enqueue(*entry, std::move(study), items, who, "ReevaluateTrials"));
        entry->exhausted = false;
        if (max_trials) {
          *max_trials = entry->study.spec().budget().max_trials();
        }
        return items;
      });
}

Reply<std::vector<v1::Worker>> SchedulerCore::ListWorkers(
    const auth::Principal& who) {
  if (!who.can_read_all()) {
    return absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not list workers (admins and viewers may)"));
  }
  Lock lock(this);
  std::vector<v1::Worker> out = workers_.List();
  std::map<std::string, v1::Worker*> by_id;
  for (v1::Worker& w : out) by_id[w.id()] = &w;
  // Open trials only: bounded by the studies' parallelism, not their size.
  for (const auto& [name, entry] : studies_.all()) {
    if (entry->deleted) continue;
    for (int64_t number : entry->open) {
      const v1::Trial& t = entry->trials.at(number);
      auto it = by_id.find(t.worker_id());
      if (t.state() != v1::RUNNING || it == by_id.end()) continue;
      v1::TrialRef* ref = it->second->add_running();
      ref->set_study(name);
      ref->set_number(number);
    }
  }
  return out;
}

Reply<searchers::ImportanceResult> SchedulerCore::GetParameterImportance(
    const std::string& name, double top_quantile, const auth::Principal& who) {
  if (top_quantile == 0) top_quantile = 0.1;
  // Under the lock only the bins are taken (no copies of the params); the
  // estimate runs outside it.
  std::optional<searchers::SearchSpace> space;
  std::optional<searchers::ImportanceInput> input;
  absl::Status read =
      Locked<bool>([&]() -> absl::StatusOr<bool> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kRead));
        DIAL_ASSIGN_OR_RETURN(
            space, searchers::SearchSpace::Create(entry->study.spec()));
        input.emplace(*space);
        // `ranked` holds the loss: lower is better.
        for (const auto& [loss, number] : entry->ranked) {
          input->Add(entry->trials.at(number).params(), loss);
        }
        return true;
      }).status();
  DIAL_RETURN_IF_ERROR(read);
  return searchers::PedAnovaImportance(*input, top_quantile);
}

Reply<Suggestion> SchedulerCore::SuggestTrials(const std::string& name,
                                               int32_t count,
                                               const std::string& client_id,
                                               const auth::Principal& who) {
  return Await<Reply<Suggestion>>([&](SuggestCallback done) {
    SuggestTrialsAsync(name, count, client_id, std::move(done), who);
  });
}

void SchedulerCore::SuggestTrialsAsync(const std::string& name, int32_t count,
                                       const std::string& client_id,
                                       SuggestCallback done,
                                       const auth::Principal& who) {
  if (count < 0 || count > kMaxSuggest) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("count: must be between 0 (= 1) and ", kMaxSuggest)));
  }
  if (client_id.size() > kMaxClientId) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("client_id: at most ", kMaxClientId, " characters")));
  }
  if (count == 0) count = 1;
  WriteTicket ticket;
  absl::Status refused;
  {
    Lock lock(this, &ticket);
    auto found = FindFor(who, name, Access::kWrite);
    if (!found.ok()) {
      refused = found.status();
    } else if (stopping_) {
      refused = absl::UnavailableError("the scheduler is shutting down");
    } else {
      suggestions_.Enqueue(
          name,
          {[this, entry = studies_.Shared(name), count, client_id, done] {
             Suggest(entry, count, client_id, done);
           },
           [done] {
             done(absl::UnavailableError("the scheduler is shutting down"));
           }});
    }
  }
  if (!refused.ok()) done(Reply<Suggestion>(refused, ticket));
}

void SchedulerCore::Suggest(const std::shared_ptr<StudyEntry>& entry,
                            int32_t count, const std::string& client_id,
                            const SuggestCallback& done) {
  Suggestion result;
  absl::Status gone;
  bool reuse = false;
  WriteTicket ticket;
  {
    Lock lock(this, &ticket);
    gone = StudyRegistry::Gone(*entry);
    // A client with open trials gets those back, not new ones.
    auto it = entry->open_by_client.find(client_id);
    if (gone.ok() && !client_id.empty() && it != entry->open_by_client.end() &&
        !it->second.empty()) {
      for (int64_t number : it->second) {
        result.trials.push_back(entry->trials.at(number));
      }
      result.study_state = entry->study.state();
      reuse = true;
    }
  }
  if (!gone.ok()) return done(Reply<Suggestion>(gone, ticket));
  if (reuse) return done(Reply<Suggestion>(std::move(result), ticket));
  size_t bytes = 0;  // an answer stays under Limits::max_page_bytes
  while (int32_t(result.trials.size()) < count &&
         bytes < options_.limits.max_page_bytes) {
    auto trial = NewTrial(entry, v1::RUNNING, client_id, &ticket);
    if (!trial.ok() && result.trials.empty()) {
      return done(Reply<Suggestion>(trial.status(), ticket));
    }
    // The trials created before a store error are this client's: hand
    // them over rather than orphan them.
    if (!trial.ok() || !trial->has_value()) break;
    bytes += (*trial)->ByteSizeLong();
    result.trials.push_back(std::move(**trial));
  }
  absl::Status status;
  {
    Lock lock(this, &ticket);
    // A reload meanwhile dropped this entry (and maybe the trials just
    // created): it must not write any more.
    status = StudyRegistry::Gone(*entry);
    if (status.ok()) status = lifecycle_.MaybeFinish(*entry);
    result.study_state = entry->study.state();
    result.done = entry->study.state() != v1::STUDY_ACTIVE ||
                  (result.trials.empty() && entry->open_trials == 0);
  }
  if (!status.ok()) return done(Reply<Suggestion>(status, ticket));
  done(Reply<Suggestion>(std::move(result), ticket));
}

Reply<v1::Decision> SchedulerCore::ReportIntermediate(
    const std::string& name, int64_t number, int64_t step,
    const searchers::Metrics& metrics, const std::string& checkpoint,
    const auth::Principal& who) {
  absl::Status valid = CheckReport(step, metrics, checkpoint, options_.limits);
  if (!valid.ok()) return valid;
  return Locked<v1::Decision>([&]() -> absl::StatusOr<v1::Decision> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    DIAL_RETURN_IF_ERROR(CheckAskTell(*entry, number));
    DIAL_RETURN_IF_ERROR(CheckCheckpointId(checkpoint, name, number));
    DIAL_ASSIGN_OR_RETURN(v1::Trial * stored, FindTrial(*entry, number));
    DIAL_ASSIGN_OR_RETURN(std::optional<v1::Decision> retried,
                          lifecycle_.SaveUnsavedDecision(*entry, number, step));
    if (retried) return *retried;
    // The same rule as a worker's ReportProgress: a step on record gets
    // its decision again, so a client may retry a report whose answer it
    // lost.
    if (std::optional<v1::Decision> repeated =
            lifecycle_.RepeatedStep(*entry, *stored, step)) {
      return *repeated;
    }
    if (stored->state() != v1::RUNNING) {
      return NotRunning(*stored, "reports are taken only while RUNNING");
    }
    return lifecycle_.RecordReport(*entry, *stored, step, metrics, checkpoint);
  });
}

Reply<v1::Trial> SchedulerCore::CompleteTrial(
    const std::string& name, int64_t number,
    const searchers::Metrics& final_metrics, const std::string& error,
    const auth::Principal& who) {
  absl::Status valid =
      CheckMetrics(final_metrics, "final_metrics", options_.limits);
  if (!valid.ok()) return valid;
  return Locked<v1::Trial>([&]() -> absl::StatusOr<v1::Trial> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    DIAL_RETURN_IF_ERROR(CheckAskTell(*entry, number));
    DIAL_ASSIGN_OR_RETURN(v1::Trial * stored, FindTrial(*entry, number));
    const bool stopped_open = stored->state() == v1::STOPPED &&
                              stored->final_metrics().empty() &&
                              stored->error().empty();
    // A repeat of the completion on record (its answer was lost) gets the
    // stored result; other values for a finished trial are refused.
    if (stored->state() != v1::RUNNING && !stopped_open &&
        SameResult(*stored, final_metrics, error)) {
      return *stored;
    }
    if (stored->state() != v1::RUNNING && !stopped_open) {
      return NotRunning(*stored, "it cannot be completed again");
    }
    const std::string& metric = entry->study.spec().objective().metric();
    v1::Trial trial = *stored;
    *trial.mutable_final_metrics() = final_metrics;
    if (!error.empty()) {
      trial.set_error(error.substr(0, 16384));
      if (trial.state() == v1::RUNNING) trial.set_state(v1::FAILED);
    } else {
      if (auto missing =
              searchers::SetObjectiveValues(entry->study.spec(), trial)) {
        if (!missing->present) {
          return absl::InvalidArgumentError(absl::StrCat(
              "final_metrics: must hold the objective metric '",
              missing->metric, "' (or set error if the evaluation failed)"));
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "final_metrics.", missing->metric,
            ": must be a finite number; set error for a diverged trial"));
      }
      if (trial.state() == v1::RUNNING) trial.set_state(v1::COMPLETED);
    }
    if (stopped_open) {
      // Already final (stopped early): record the values, change nothing
      // else.
      DIAL_RETURN_IF_ERROR(lifecycle_.SaveTrial(*entry, trial));
      return trial;
    }
    *trial.mutable_end_time() = lifecycle_.Now();
    // Before Finalize, which may replace the study that `metric` is in.
    const std::string audit = absl::StrCat(
        "trial ", number, " ", v1::TrialState_Name(trial.state()),
        trial.has_objective_value()
            ? absl::StrCat(" ", metric, "=", trial.objective_value())
            : "");
    DIAL_RETURN_IF_ERROR(lifecycle_.Finalize(*entry, trial));
    Audit(who, "CompleteTrial", name, audit);
    return trial;
  });
}

Reply<int64_t> SchedulerCore::Watch(const std::string& name,
                                    WatchCallback callback,
                                    const auth::Principal& who) {
  return Locked<int64_t>([&]() -> absl::StatusOr<int64_t> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kRead));
    v1::StudyEvent snapshot;
    snapshot.set_kind(v1::StudyEvent::SNAPSHOT);
    *snapshot.mutable_study() = entry->WithCounts();
    if (const v1::Trial* best = entry->Best()) {
      *snapshot.mutable_best_trial() = *best;
    }
    // Queued under the lock: no later change can overtake the snapshot.
    const bool over = snapshot.study().state() != v1::STUDY_ACTIVE;
    v1::StudyEvent last = snapshot;
    const int64_t id = events_.Add(name, std::move(callback), snapshot);
    if (over) {
      last.set_kind(v1::StudyEvent::STUDY_FINISHED);
      events_.Publish(name, std::move(last));
    }
    return id;
  });
}

void SchedulerCore::Unwatch(int64_t watch_id) { events_.Remove(watch_id); }

absl::StatusOr<std::optional<v1::Trial>> SchedulerCore::NewTrial(
    const std::shared_ptr<StudyEntry>& entry, v1::TrialState state,
    const std::string& client_id, WriteTicket* ticket) {
  int64_t number;
  std::vector<searchers::Params> pending;
  std::vector<v1::Trial> observe;
  std::vector<StudyEntry::Report> reports;
  // A queued configuration goes before the searcher's own.
  std::optional<v1::QueuedTrial> queued;
  // Worker-run studies queue only a few PENDING trials ahead of demand.
  auto queue_full = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state == v1::PENDING &&
           int64_t(entry->pending.size()) >= options_.limits.max_pending_ahead;
  };
  {
    Lock lock(this, ticket);
    if (!entry->CanCreate() || queue_full()) return std::optional<v1::Trial>();
    reports.swap(entry->unobserved_reports);
    number = static_cast<int64_t>(entry->trials.size());
    if (entry->searcher->UsesPending()) {
      for (int64_t n : entry->open) {
        pending.push_back(entry->trials.at(n).params());
      }
    }
    observe.swap(entry->unobserved);
    if (!entry->study.queue().empty()) queued = entry->study.queue(0);
  }
  // Only this study's executor creates its trials, so `number` stays free
  // meanwhile.
  const absl::Time fit_start = absl::Now();
  for (const auto& r : reports) {
    entry->searcher->ObserveReport(r.trial, r.step, r.metrics);
  }
  for (const auto& t : observe) entry->searcher->Observe(t);
  auto params = queued ? absl::StatusOr<searchers::Params>(queued->params())
                       : entry->searcher->Suggest(number, pending);
  if (options_.fit_seconds != nullptr && !queued) {
    options_.fit_seconds->Observe(
        absl::ToDoubleSeconds(absl::Now() - fit_start));
  }
  Lock lock(this, ticket);
  if (absl::IsOutOfRange(params.status())) {
    entry->exhausted = true;
    return std::optional<v1::Trial>();
  }
  if (!params.ok()) return params.status();
  // The study may have been stopped, deleted or shrunk while we searched.
  if (!entry->CanCreate() || queue_full()) return std::optional<v1::Trial>();
  v1::Trial trial;
  trial.set_study(entry->name());
  trial.set_number(number);
  trial.set_state(state);
  *trial.mutable_params() = std::move(*params);
  trial.set_client_id(client_id);
  trial.set_last_step(-1);
  *trial.mutable_create_time() = lifecycle_.Now();
  if (state == v1::RUNNING) {
    trial.set_attempt(1);
    *trial.mutable_start_time() = trial.create_time();
  }
  if (queued) {
    trial.set_queue_id(queued->id());
    if (queued->has_origin()) trial.set_origin(queued->origin());
    if (queued->has_seed()) trial.set_seed(queued->seed());
  }
  DIAL_RETURN_IF_ERROR(lifecycle_.SaveTrial(*entry, trial));
  // Off the in-memory queue only: the stored one keeps it until the study
  // is next written, and a restart drops what a trial's queue_id covers.
  auto* queue = entry->study.mutable_queue();
  if (queued && !queue->empty() && queue->begin()->id() == queued->id()) {
    queue->erase(queue->begin());
  }
  lifecycle_.Emit(*entry, v1::StudyEvent::TRIAL_CREATED, &trial);
  if (state == v1::PENDING) outbox_.dispatch = true;
  return std::optional<v1::Trial>(std::move(trial));
}

void SchedulerCore::PurgeLater(std::shared_ptr<StudyEntry> entry) {
  housekeeping_.Enqueue("",
                        {[this, entry = std::move(entry)]() mutable {
                           entry.reset();
                           if (checkpoints_) checkpoints_->PurgeRetired();
                           absl::Status status = store_->PurgeDeleted();
                           if (!status.ok()) {
                             spdlog::warn(
                                 "deleted studies' rows stay until the next "
                                 "delete or restart: {}",
                                 status.ToString());
                           }
                         },
                         nullptr});
}

void SchedulerCore::FillPending(const std::shared_ptr<StudyEntry>& entry) {
  {
    Lock lock(this);
    entry->fill_queued = false;
  }
  while (true) {
    {
      // Paused trials the trial scheduler promotes go first (ASHA).
      Lock lock(this);
      if (!entry->deleted && entry->study.state() == v1::STUDY_ACTIVE &&
          entry->active_trials <
              entry->study.spec().budget().max_parallel_trials()) {
        if (auto number = entry->trial_scheduler->NextPromotion()) {
          auto it = entry->trials.find(*number);
          if (it != entry->trials.end() && it->second.state() == v1::PAUSED) {
            absl::Status status = lifecycle_.Requeue(*entry, it->second);
            if (!status.ok()) spdlog::error("{}", status.ToString());
            continue;
          }
        }
      }
    }
    auto trial = NewTrial(entry, v1::PENDING, "", nullptr);
    Lock lock(this);
    if (!trial.ok()) {
      // E.g. the disk is full: the next AcquireTrial asks again.
      spdlog::error("study {}: cannot queue a trial: {}", entry->name(),
                    trial.status().ToString());
      entry->fill_failed = true;
      return;
    }
    if (!trial->has_value()) {
      // Not for an entry that DeleteStudy or a reload dropped meanwhile.
      if (!entry->deleted) lifecycle_.FinishIfDone(*entry);
      return;
    }
  }
}

void SchedulerCore::BackupDatabaseAsync(
    const std::string& name,
    std::function<void(absl::StatusOr<std::pair<std::string, int64_t>>)> done,
    const auth::Principal& who) {
  if (!who.is_admin()) {
    return done(absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not back up the database (admins may)")));
  }
  if (options_.backup_dir.empty()) {
    return done(absl::FailedPreconditionError(
        "backups are off: start the scheduler with --backup-dir=DIR"));
  }
  const bool plain_name =
      !name.empty() && name.size() <= 255 && name[0] != '.' &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '_';
      });
  if (!plain_name) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "path: '", name.substr(0, 256),
        "' must be a file name in the scheduler's --backup-dir (letters, "
        "digits, '.', '-', '_'; not starting with '.')")));
  }
  const std::string path = absl::StrCat(options_.backup_dir, "/", name);
  absl::Status refused;
  std::thread previous;
  {
    Lock lock(this);
    if (stopping_) {
      refused = absl::UnavailableError("the scheduler is shutting down");
    } else if (backup_running_) {
      refused = absl::AbortedError(
          "another backup is in progress; retry when it has finished");
    } else {
      backup_running_ = true;
      previous = std::move(backup_thread_);  // finished: joined below
      // Its own thread: a copy takes as long as the database is large, and
      // the store's backup needs neither the core's lock nor the store's.
      backup_thread_ = std::thread([this, path, who, done = std::move(done)] {
        absl::StatusOr<int64_t> bytes = store_->Backup(path);
        if (bytes.ok()) {
          spdlog::info("database backed up to {} ({} bytes)", path, *bytes);
        } else if (!absl::IsInvalidArgument(bytes.status()) &&
                   !absl::IsAlreadyExists(bytes.status())) {
          spdlog::warn("backup to {} failed: {}", path,
                       bytes.status().ToString());
        }
        {
          Lock lock(this);
          backup_running_ = false;
          Audit(who, "BackupDatabase", "",
                bytes.ok()
                    ? absl::StrCat(path, " (", *bytes, " bytes)")
                    : absl::StrCat(path, ": ", bytes.status().ToString()));
        }
        if (!bytes.ok()) return done(bytes.status());
        done(std::make_pair(path, *bytes));
      });
    }
  }
  if (previous.joinable()) previous.join();
  if (!refused.ok()) done(refused);
}

absl::StatusOr<std::pair<std::string, int64_t>> SchedulerCore::BackupDatabase(
    const std::string& name, const auth::Principal& who) {
  using Result = absl::StatusOr<std::pair<std::string, int64_t>>;
  return Await<Result>([&](std::function<void(Result)> done) {
    BackupDatabaseAsync(name, std::move(done), who);
  });
}

Reply<AuditPage> SchedulerCore::ListAuditEvents(const std::string& study,
                                                int32_t page_size,
                                                const std::string& page_token,
                                                const auth::Principal& who) {
  if (!who.is_admin()) {
    return absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not read the audit log (admins may)"));
  }
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 (default ", kDefaultPageSize,
                     ") and ", kMaxPageSize));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  int64_t before = 0;
  if (!page_token.empty() &&
      (!absl::SimpleAtoi(page_token, &before) || before <= 0)) {
    return absl::InvalidArgumentError(
        "page_token: not a token returned by ListAuditEvents");
  }
  // The store has its own lock; the core's is not needed.
  auto events = store_->ListAudit(study, before, page_size + 1);
  if (!events.ok()) return events.status();
  AuditPage page;
  page.events = std::move(*events);
  if (int32_t(page.events.size()) > page_size) {
    page.events.resize(page_size);
    page.next_page_token = std::to_string(page.events.back().id());
  }
  return page;
}

}  // namespace dial::scheduler
