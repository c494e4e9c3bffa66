#include "scheduler/core.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "scheduler/access_checks.h"
#include "scheduler/request_checks.h"
#include "scheduler/usage.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {
namespace {

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
                  checkpoints_ ? &quota_ : nullptr, checkpoints_, &outbox_,
                  &preemptions_, options.on_usage}),
      placer_({&studies_, &workers_, options.quotas, clock_,
               options.fair_share_half_life, &preemptions_,
               options.preempt_grace, options.preempt_min_run,
               options.fair_share_preempt}),
      study_lifecycle_({store_, &studies_, &lifecycle_, &maker_, &outbox_,
                        &loader_, &options_.limits, checkpoints_, &retention_,
                        &quota_, options.quotas}),
      backups_(store_, options.backup_dir,
               [this](const auth::Principal& who, const std::string& detail) {
                 Lock lock(this);
                 study_lifecycle_.Audit(who, "BackupDatabase", "", detail);
               }),
      maker_(
          {store_, checkpoints_, &quota_, &lifecycle_, &outbox_, &loader_,
           &options_.limits, options.fit_seconds,
           [this](WriteTicket* ticket, const std::function<void()>& body) {
             Lock lock(this, ticket);
             body();
           },
           [this](WriteTicket ticket, std::function<void(absl::Status)> done) {
             WhenDurable(ticket, std::move(done));
           },
           options.suggestion_threads}) {}

SchedulerCore::~SchedulerCore() {
  if (durability_) durability_->SetLostHandler(nullptr);
  StopWaiting();
  if (ticker_.joinable()) ticker_.join();
  backups_.Stop();
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
      for (const auto& name : fills) maker_.Fill(studies_.Shared(name));
    } else if (!outbox_.doomed.empty()) {
      std::vector<DoomedCheckpoint> doomed;
      doomed.swap(outbox_.doomed);
      maker_.DeleteWhenDurable(std::move(doomed), Written());
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
            return AssignTo(worker_id, free_gpus);
          },
      outbox_, placer_.ShapesDecide());
}

void SchedulerCore::StopWaiting() {
  {
    Lock lock(this);
    stopping_ = true;
    // Parked long polls end empty rather than dangle.
    dispatcher_.EndAll(outbox_);
  }
  backups_.Stop();
  maker_.Stop();
}

void SchedulerCore::WaitIdle() { maker_.WaitIdle(); }

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
  maker_.PurgeLater(nullptr);
  for (auto& study : studies) {
    DIAL_ASSIGN_OR_RETURN(std::shared_ptr<StudyEntry> entry,
                          loader_.Load(std::move(study)));
    // Trials running on workers stay theirs: workers outlive a scheduler
    // restart and come back with the same id, so each such worker gets a
    // fresh lease. One that does not come back within it loses its trials
    // to the queue (Tick); one that comes back without a trial loses that
    // trial a lease later (Heartbeat).
    for (const auto& [number, trial] : entry->trials()) {
      if (trial.state() != v1::RUNNING || trial.worker_id().empty()) continue;
      workers_.Adopt(trial.worker_id(), {trial.study(), trial.number()});
      // For --preempt-min-run-s its attempt counts from now.
      preemptions_.StartedAt({trial.study(), trial.number()}, clock_->Now());
    }
    if (checkpoints_) {
      // Checkpoints written before the restart are reclaimed too. What a
      // load reads is committed: no write to wait for (after a lost commit,
      // the latest ticket is a lost one).
      DIAL_ASSIGN_OR_RETURN(auto records,
                            store_->ListCheckpoints(entry->name()));
      for (const auto& r : records) {
        quota_.Set(entry->study().owner(), entry->name(), r.id, r.size_bytes);
      }
      maker_.DeleteWhenDurable(
          retention_.Restore(entry->study(), records, entry->trials()),
          WriteTicket{});
    }
    outbox_.fills.insert(entry->name());
    studies_.Add(std::move(entry));
  }
  // Fair share's recent usage, from the records of the last ten
  // half-lives (older ones add under 0.1 %).
  DIAL_ASSIGN_OR_RETURN(
      auto usage, store_->ListUsage(absl::ToUnixMillis(
                      clock_->Now() - 10 * options_.fair_share_half_life)));
  placer_.RestoreUsage(usage);
  return absl::OkStatus();
}

Reply<v1::GetUsageResponse> SchedulerCore::GetUsage(
    const std::string& by, absl::Time since, const auth::Principal& who) {
  if (who.role == auth::Role::kWorker) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker '", who.name, "' may not read usage"));
  }
  std::optional<std::string> owner;
  if (!who.can_read_all()) owner = who.name;
  // The store is read without the core's lock: records are only appended.
  DIAL_ASSIGN_OR_RETURN(
      auto records, store_->ListUsage(since == absl::InfinitePast()
                                          ? std::numeric_limits<int64_t>::min()
                                          : absl::ToUnixMillis(since)));
  return SumUsage(records, by, owner);
}

absl::StatusOr<StudyEntry*> SchedulerCore::FindFor(const auth::Principal& who,
                                                   const std::string& name,
                                                   Access access) {
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, studies_.Find(name));
  const std::string& owner = entry->study().owner();
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

Reply<v1::Study> SchedulerCore::CreateStudy(v1::StudySpec spec,
                                            const auth::Principal& who) {
  auto draft = study_lifecycle_.Prepare(std::move(spec), who);
  if (!draft.ok()) return draft.status();
  return Locked<v1::Study>([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return study_lifecycle_.Create(
        std::move(*draft), who,
        [&](const std::string& source) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
            mu_) -> absl::StatusOr<const StudyEntry*> {
          return FindFor(who, source, Access::kRead);
        });
  });
}

Reply<v1::Study> SchedulerCore::GetStudy(const std::string& name,
                                         const auth::Principal& who) {
  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kRead));
    v1::Study study = entry->WithCounts();
    study.set_waiting(placer_.WhyWaiting(*entry));
    return study;
  });
}

Reply<StudyPage> SchedulerCore::ListStudies(const auth::Principal& who,
                                            int32_t page_size,
                                            const std::string& page_token) {
  return Locked<StudyPage>([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<StudyPage> page = PageStudies(
        studies_, who, page_size, page_token, options_.limits.max_page_bytes);
    if (page.ok()) {
      for (v1::Study& study : page->studies) {
        if (auto entry = studies_.Shared(study.name())) {
          study.set_waiting(placer_.WhyWaiting(*entry));
        }
      }
    }
    return page;
  });
}

Reply<v1::Study> SchedulerCore::UpdateStudy(const std::string& name,
                                            int32_t max_trials,
                                            int32_t max_parallel_trials,
                                            const auth::Principal& who) {
  return UpdateStudy(name, StudyChange{max_trials, max_parallel_trials, {}},
                     who);
}

Reply<v1::Study> SchedulerCore::UpdateStudy(const std::string& name,
                                            const StudyChange& change,
                                            const auth::Principal& who) {
  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    return study_lifecycle_.Update(*entry, change, who);
  });
}

Reply<v1::SetNoteResponse> SchedulerCore::SetNote(const std::string& name,
                                                  std::optional<int64_t> trial,
                                                  const std::string& note,
                                                  const auth::Principal& who) {
  return Locked<v1::SetNoteResponse>(
      [&]() -> absl::StatusOr<v1::SetNoteResponse> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kWrite));
        return study_lifecycle_.SetNote(*entry, trial, note, who);
      });
}

Reply<v1::Study> SchedulerCore::StopStudy(const std::string& name,
                                          const auth::Principal& who) {
  return Locked<v1::Study>([&]() -> absl::StatusOr<v1::Study> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    return study_lifecycle_.Stop(*entry, who);
  });
}

StatusReply SchedulerCore::DeleteStudy(const std::string& name,
                                       const auth::Principal& who) {
  Reply<bool> reply = Locked<bool>([&]() -> absl::StatusOr<bool> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kWrite));
    DIAL_RETURN_IF_ERROR(study_lifecycle_.Delete(*entry, who));
    return true;
  });
  return StatusReply(reply.status(), reply.ticket());
}

Reply<TrialPage> SchedulerCore::ListTrials(
    const std::string& name, const std::vector<v1::TrialState>& states,
    int32_t page_size, const std::string& page_token,
    const auth::Principal& who) {
  DIAL_RETURN_IF_ERROR(CheckPageSize(page_size));
  auto after = ParseTrialToken(page_token);
  if (!after.ok()) return after.status();
  return Locked<TrialPage>([&]() -> absl::StatusOr<TrialPage> {
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                          FindFor(who, name, Access::kRead));
    return PageTrials(*entry, states, page_size, *after,
                      options_.limits.max_page_bytes);
  });
}

Reply<v1::Trial> SchedulerCore::GetTrial(const std::string& name,
                                         int64_t number,
                                         const auth::Principal& who,
                                         int32_t history_page_size,
                                         const std::string& history_page_token,
                                         std::string* next_history_page_token) {
  int64_t after_step = -1;
  DIAL_RETURN_IF_ERROR(CheckHistoryPage(options_.limits, history_page_size,
                                        history_page_token, after_step));
  Reply<v1::Trial> trial =
      Locked<v1::Trial>([&]() -> absl::StatusOr<v1::Trial> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kRead));
        DIAL_ASSIGN_OR_RETURN(const v1::Trial* stored,
                              FindTrial(*entry, number));
        return *stored;
      });
  if (!trial.ok()) return trial;
  // The history is read without the core's lock (the store has its own).
  v1::Trial out = *std::move(trial);
  absl::Status read =
      AddHistoryPage(*store_, options_.limits, history_page_size, after_step,
                     out, next_history_page_token);
  if (!read.ok()) return Reply<v1::Trial>(read, trial.ticket());
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
          out.push_back(entry->trials().at(number));
          bytes += out.back().ByteSizeLong();
          return true;
        };
        if (searchers::IsMultiObjective(entry->study().spec())) {
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
        for (const auto& [value, number] : entry->ranked()) {
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
    if (entry->deleted()) continue;
    ++g.studies[entry->study().state()];
    for (const auto& [state, count] : entry->state_counts()) {
      g.trials[name][state] = count;
    }
  }
  g.workers = workers_.size();
  for (const auto& [name, entry] : studies_.all()) {
    if (!entry->deleted()) g.pending += entry->pending().size();
  }
  g.watchers = events_.watchers();
  g.events_queued = events_.queued();
  g.suggestions_queued = maker_.queued();
  return g;
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
        return study_lifecycle_.Enqueue(*entry, std::move(trials), who,
                                        waiting);
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
        return study_lifecycle_.Reevaluate(*entry, top, seeds, who, max_trials);
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
    if (entry->deleted()) continue;
    for (int64_t number : entry->open()) {
      const v1::Trial& t = entry->trials().at(number);
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
  // estimate runs outside it, over the study's own search space (the
  // shared entry keeps it alive).
  std::shared_ptr<StudyEntry> shared;
  std::optional<searchers::ImportanceInput> input;
  absl::Status read =
      Locked<bool>([&]() -> absl::StatusOr<bool> {
        DIAL_ASSIGN_OR_RETURN(StudyEntry * entry,
                              FindFor(who, name, Access::kRead));
        DIAL_ASSIGN_OR_RETURN(const searchers::SearchSpace* space,
                              entry->space());
        shared = studies_.Shared(name);
        input.emplace(*space);
        // `ranked` holds the loss: lower is better.
        for (const auto& [loss, number] : entry->ranked()) {
          input->Add(entry->trials().at(number).params(), loss);
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
  std::function<void()> now;  // a cheap ask, run here without the lock
  {
    Lock lock(this, &ticket);
    auto found = FindFor(who, name, Access::kWrite);
    if (!found.ok()) {
      refused = found.status();
    } else if (stopping_) {
      refused = absl::UnavailableError("the scheduler is shutting down");
    } else {
      now = maker_.Suggest(studies_.Shared(name), count, client_id, done);
    }
  }
  if (!refused.ok()) done(Reply<Suggestion>(refused, ticket));
  if (now) now();
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
    DIAL_ASSIGN_OR_RETURN(const v1::Trial* stored, FindTrial(*entry, number));
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
    DIAL_ASSIGN_OR_RETURN(const v1::Trial* stored, FindTrial(*entry, number));
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
    const std::string& metric = entry->study().spec().objective().metric();
    v1::Trial trial = *stored;
    *trial.mutable_final_metrics() = final_metrics;
    if (!error.empty()) {
      trial.set_error(error.substr(0, 16384));
      if (trial.state() == v1::RUNNING) trial.set_state(v1::FAILED);
    } else {
      if (auto missing =
              searchers::SetObjectiveValues(entry->study().spec(), trial)) {
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
    study_lifecycle_.Audit(who, "CompleteTrial", name, audit);
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

void SchedulerCore::BackupDatabaseAsync(
    const std::string& name,
    std::function<void(absl::StatusOr<std::pair<std::string, int64_t>>)> done,
    const auth::Principal& who) {
  backups_.Start(name, who, std::move(done));
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
  // The store has its own lock; the core's is not needed.
  return PageAudit(*store_, study, page_size, page_token);
}

}  // namespace dial::scheduler
