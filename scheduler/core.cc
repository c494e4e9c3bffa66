#include "scheduler/core.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {
namespace {

// The store's sequence number when this thread last released the core's
// lock, or answered a parked call under it: what the answer it is about to
// send waits for (see WhenDurable).
thread_local uint64_t t_written_seq = 0;

constexpr int32_t kMaxPageSize = 1000;
constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxSuggest = 1000;
constexpr size_t kMaxCheckpointId = 1024;
constexpr size_t kMaxClientId = 256;

absl::Status NotRunning(const v1::Trial& trial, const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat("trial ", trial.number(), " of study '", trial.study(),
                   "' is ", v1::TrialState_Name(trial.state()), "; ", what));
}

absl::Status CheckMetrics(const searchers::Metrics& metrics,
                          const char* field) {
  for (const auto& [name, value] : metrics) {
    if (name.empty() || name.size() > 128) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": metric names must be 1-128 characters"));
    }
  }
  return absl::OkStatus();
}

// The checks every report shares, ask/tell or from a worker.
absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint) {
  if (step < 0) return absl::InvalidArgumentError("step: must be >= 0");
  if (metrics.empty()) {
    return absl::InvalidArgumentError("metrics: must hold at least one value");
  }
  DIAL_RETURN_IF_ERROR(CheckMetrics(metrics, "metrics"));
  if (checkpoint.size() > kMaxCheckpointId) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: at most ", kMaxCheckpointId, " characters"));
  }
  return absl::OkStatus();
}

int64_t EndMs(const v1::Trial& t) {
  return google::protobuf::util::TimeUtil::TimestampToMilliseconds(
      t.end_time());
}

// Finished trials in the order they finished.
std::vector<v1::Trial> ByEndTime(std::vector<v1::Trial> trials) {
  std::stable_sort(
      trials.begin(), trials.end(), [](const v1::Trial& a, const v1::Trial& b) {
        return google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                   a.end_time()) <
               google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                   b.end_time());
      });
  return trials;
}

}  // namespace

bool IsOpen(v1::TrialState state) {
  return state == v1::PENDING || state == v1::RUNNING || state == v1::PAUSED;
}

bool IsFinal(v1::TrialState state) {
  return state == v1::COMPLETED || state == v1::STOPPED || state == v1::FAILED;
}

SchedulerCore::SchedulerCore(const SchedulerCoreOptions& options)
    : store_(options.store),
      checkpoints_(options.checkpoints),
      searcher_factory_(
          options.searcher_factory
              ? options.searcher_factory
              : [](const v1::StudySpec&
                       spec) { return searchers::CreateSearcher(spec); }),
      trial_scheduler_factory_(
          options.trial_scheduler_factory
              ? options.trial_scheduler_factory
              : [](const v1::StudySpec&
                       spec) { return searchers::CreateTrialScheduler(spec); }),
      clock_(options.clock ? options.clock : &real_clock_),
      worker_lease_(options.worker_lease) {}

SchedulerCore::~SchedulerCore() {
  store_->SetLostHandler(nullptr);
  StopWaiting();
  if (ticker_.joinable()) ticker_.join();
  if (suggester_.joinable()) suggester_.join();
  std::thread backup;
  {
    Lock lock(this);
    backup = std::move(backup_thread_);
  }
  if (backup.joinable()) backup.join();
}

void SchedulerCore::Enqueue(Task task) { tasks_.push_back(std::move(task)); }

void SchedulerCore::RunTasks() {
  while (true) {
    Task task;
    std::deque<Task> cancelled;
    {
      Lock lock(this);
      executing_ = false;
      mu_.Await(absl::Condition(this, &SchedulerCore::HasWork));
      if (stopping_) {
        cancelled.swap(tasks_);
      } else {
        task = std::move(tasks_.front());
        tasks_.pop_front();
        executing_ = true;
      }
    }
    if (!task.run) {
      for (auto& t : cancelled) {
        if (t.cancel) t.cancel();
      }
      return;
    }
    task.run();
  }
}

void SchedulerCore::WaitIdle() {
  Lock lock(this);
  mu_.Await(absl::Condition(this, &SchedulerCore::Idle));
}

void SchedulerCore::ScheduleFill(const std::string& name) {
  auto it = studies_.find(name);
  if (it == studies_.end()) return;
  std::shared_ptr<StudyEntry> entry = it->second;
  if (entry->fill_queued || entry->study.spec().trial().run_case() ==
                                v1::TrialTemplate::RUN_NOT_SET) {
    return;
  }
  entry->fill_queued = true;
  Enqueue({[this, entry] { FillPending(entry); }, nullptr});
}

void SchedulerCore::StopWaiting() {
  Lock lock(this);
  stopping_ = true;
  // Parked long polls end empty rather than dangle.
  for (auto& w : waiters_) Answer(w.done, std::optional<Assignment>());
  waiters_.clear();
}

absl::StatusOr<std::unique_ptr<SchedulerCore>> SchedulerCore::Create(
    const SchedulerCoreOptions& options) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError("SchedulerCore needs a StudyStore");
  }
  std::unique_ptr<SchedulerCore> core(new SchedulerCore(options));
  {
    absl::MutexLock lock(&core->mu_);
    DIAL_RETURN_IF_ERROR(core->Load());
  }
  core->store_->SetLostHandler([self = core.get()] {
    Lock lock(self);
    self->Reload();
  });
  core->suggester_ = std::thread([self = core.get()] { self->RunTasks(); });
  if (options.tick > absl::ZeroDuration()) {
    SchedulerCore* self = core.get();
    const absl::Duration tick = options.tick;
    core->ticker_ = std::thread([self, tick] {
      while (true) {
        {
          Lock lock(self);
          self->mu_.AwaitWithTimeout(absl::Condition(&self->stopping_), tick);
          if (self->stopping_) return;
        }
        self->Tick();
      }
    });
  }
  return core;
}

void SchedulerCore::NoteWritten() { t_written_seq = store_->WrittenSeq(); }

void SchedulerCore::ForgetWritten() { t_written_seq = 0; }

void SchedulerCore::WhenDurable(std::function<void(absl::Status)> done) {
  // Read under the lock, not now: by now a lost write of this call may have
  // been reloaded away and followed by other calls' writes that will be
  // durable.
  store_->WhenDurable(std::exchange(t_written_seq, 0), std::move(done));
}

void SchedulerCore::Answer(const AcquireCallback& done,
                           absl::StatusOr<std::optional<Assignment>> result) {
  NoteWritten();
  done(std::move(result));
}

void SchedulerCore::Reload() {
  // Memory ran ahead of the store by the lost writes: start again from
  // what the store holds, as a restarted scheduler would.
  spdlog::error("a database commit failed; reloading every study from it");
  for (auto& [name, entry] : studies_) {
    entry->deleted = true;  // queued work for the old entries does nothing
    entry->stale = true;
  }
  studies_.clear();
  dispatched_.clear();
  store_->Recover();
  absl::Status status = Load();
  reload_needed_ = !status.ok();
  if (reload_needed_) {
    spdlog::error("reload failed, retrying: {}", status.ToString());
    // The studies loaded before the failure have work queued (ScheduleFill)
    // that must not run on entries about to be dropped.
    for (auto& [name, entry] : studies_) {
      entry->deleted = true;
      entry->stale = true;
    }
    studies_.clear();
    dispatched_.clear();
  }
}

google::protobuf::Timestamp SchedulerCore::Now() const {
  return google::protobuf::util::TimeUtil::MillisecondsToTimestamp(
      absl::ToUnixMillis(clock_->Now()));
}

absl::Status SchedulerCore::Load() {
  DIAL_ASSIGN_OR_RETURN(auto studies, store_->ListStudies());
  for (auto& study : studies) {
    const absl::Time start = absl::Now();
    int64_t replayed = 0;
    auto entry = std::make_shared<StudyEntry>();
    entry->study = std::move(study);
    DIAL_ASSIGN_OR_RETURN(entry->searcher,
                          searcher_factory_(entry->study.spec()));
    DIAL_ASSIGN_OR_RETURN(entry->trial_scheduler,
                          trial_scheduler_factory_(entry->study.spec()));
    DIAL_ASSIGN_OR_RETURN(auto trials,
                          store_->ListTrials(entry->study.name(), {}));
    for (auto& trial : trials) Mirror(*entry, std::move(trial));
    trials.clear();
    // Finished trials reach the searcher and the trial scheduler in the
    // order they finished. Reports do not: they are replayed trial by trial
    // below, to trial schedulers and to searchers that fit on rung results
    // (TPE, BOHB) alike, which is why neither may depend on the order of
    // reports across trials.
    std::vector<const v1::Trial*> finished;
    for (const auto& [number, trial] : entry->trials) {
      if (IsFinal(trial.state())) finished.push_back(&trial);
    }
    std::stable_sort(finished.begin(), finished.end(),
                     [](const v1::Trial* a, const v1::Trial* b) {
                       return EndMs(*a) < EndMs(*b);
                     });
    if (entry->trial_scheduler->NeedsHistory() ||
        entry->searcher->WantsReports()) {
      // Replay every stored report, trial by trial, streamed from the store
      // (a study of 100,000 trials has millions). The trial schedulers'
      // state depends on each trial's own reports only, so this rebuilds
      // it as it was (see TrialScheduler::Replay).
      const bool schedule = entry->trial_scheduler->NeedsHistory();
      const bool search = entry->searcher->WantsReports();
      // Schedulers that read a few reports per trial get only those.
      const std::vector<int64_t> steps =
          search ? std::vector<int64_t>()
                 : entry->trial_scheduler->ReplaySteps();
      auto replay = [&, it = entry->trials.end()](
                        int64_t number, const v1::MetricPoint& point) mutable {
        ++replayed;
        // Rows come trial by trial: look each trial up once.
        if (it == entry->trials.end() || it->first != number) {
          it = entry->trials.find(number);
          if (it == entry->trials.end()) return;
        }
        if (schedule) {
          entry->trial_scheduler->Replay(it->second, point.step(),
                                         point.metrics());
        }
        if (search) {
          entry->searcher->ObserveReport(it->second, point.step(),
                                         point.metrics());
        }
      };
      DIAL_RETURN_IF_ERROR(store_->ForEachReport(
          entry->study.name(), steps, entry->study.spec().objective().metric(),
          replay));
    }
    for (const v1::Trial* trial : finished) {
      entry->searcher->Observe(*trial);
      entry->trial_scheduler->OnTrialFinished(*trial);
    }
    entry->wants_reports = entry->searcher->WantsReports();
    spdlog::info("study {}: {} trials, {} reports replayed, loaded in {:.2f} s",
                 entry->study.name(), entry->trials.size(), replayed,
                 absl::ToDoubleSeconds(absl::Now() - start));
    const std::string name = entry->study.name();
    StudyEntry& e = *entry;
    studies_[name] = std::move(entry);
    // Trials running on workers stay theirs: workers outlive a scheduler
    // restart and come back with the same id, so each such worker gets a
    // fresh lease. One that does not come back within it loses its trials
    // to the queue (Tick); one that comes back without a trial loses that
    // trial a lease later (Heartbeat, through dispatched_).
    for (const auto& [number, trial] : e.trials) {
      if (trial.state() != v1::RUNNING || trial.worker_id().empty()) continue;
      WorkerEntry& w = workers_[trial.worker_id()];
      w.worker.set_id(trial.worker_id());
      // Time to notice the restart and reconnect: at least 30 s (a gRPC
      // channel can take ~10 s to reconnect), or two leases.
      w.last_seen = clock_->Now() +
                    std::max(worker_lease_, absl::Seconds(30) - worker_lease_);
      dispatched_[{trial.study(), trial.number()}] = clock_->Now();
    }
    ScheduleFill(name);
  }
  return absl::OkStatus();
}

absl::StatusOr<SchedulerCore::StudyEntry*> SchedulerCore::Find(
    const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("study: is required");
  if (reload_needed_) {
    return absl::UnavailableError(
        "the scheduler is reloading its state after a failed database "
        "commit; retry");
  }
  auto it = studies_.find(name);
  if (it == studies_.end()) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return it->second.get();
}

absl::StatusOr<v1::Trial*> SchedulerCore::FindTrial(StudyEntry& entry,
                                                    int64_t number) {
  auto it = entry.trials.find(number);
  if (it == entry.trials.end()) {
    return absl::NotFoundError(absl::StrCat("trial ", number, " of study '",
                                            entry.study.name(), "' not found"));
  }
  return &it->second;
}

void SchedulerCore::Mirror(StudyEntry& entry, v1::Trial trial) {
  auto active = [](v1::TrialState s) {
    return s == v1::PENDING || s == v1::RUNNING;
  };
  const bool maximize = entry.study.spec().objective().goal() == v1::MAXIMIZE;
  // Best first: the highest value when maximising, the lowest otherwise;
  // the lower trial number on ties.
  auto rank_key = [maximize](const v1::Trial& t) {
    return std::make_pair(maximize ? -t.objective_value() : t.objective_value(),
                          t.number());
  };
  auto ranked = [](const v1::Trial& t) {
    return t.state() == v1::COMPLETED && t.has_objective_value();
  };
  const int64_t number = trial.number();
  auto it = entry.trials.find(number);
  if (it != entry.trials.end()) {
    const v1::Trial& old = it->second;
    if (active(old.state())) --entry.active_trials;
    if (IsOpen(old.state())) {
      --entry.open_trials;
      entry.open.erase(number);
      if (!old.client_id().empty()) {
        entry.open_by_client[old.client_id()].erase(number);
      }
    }
    if (old.state() == v1::PENDING) entry.pending.erase(number);
    if (ranked(old)) entry.ranked.erase(rank_key(old));
    --entry.state_counts[old.state()];
  }
  v1::Trial& stored = entry.trials[number];
  stored = std::move(trial);
  stored.clear_metric_history();
  const v1::Trial& now = stored;
  if (active(now.state())) ++entry.active_trials;
  if (IsOpen(now.state())) {
    ++entry.open_trials;
    entry.open.insert(number);
    if (!now.client_id().empty()) {
      entry.open_by_client[now.client_id()].insert(number);
    }
  }
  if (now.state() == v1::PENDING) entry.pending.insert(number);
  if (ranked(now)) entry.ranked.insert(rank_key(now));
  ++entry.state_counts[now.state()];
}

absl::Status SchedulerCore::SaveTrial(StudyEntry& entry,
                                      const v1::Trial& trial) {
  DIAL_RETURN_IF_ERROR(store_->PutTrial(trial));
  Mirror(entry, trial);
  return absl::OkStatus();
}

absl::Status SchedulerCore::SaveStudyState(StudyEntry& entry,
                                           v1::StudyState state) {
  v1::Study updated = entry.study;
  updated.set_state(state);
  *updated.mutable_update_time() = Now();
  DIAL_RETURN_IF_ERROR(store_->UpdateStudy(updated));
  entry.study = std::move(updated);
  return absl::OkStatus();
}

v1::Study SchedulerCore::WithCounts(const StudyEntry& entry) const {
  v1::Study study = entry.study;
  auto& counts = *study.mutable_trial_counts();
  for (const auto& [state, n] : entry.state_counts) {
    if (n > 0) counts[v1::TrialState_Name(state)] = n;
  }
  study.set_trials_created(static_cast<int32_t>(entry.trials.size()));
  return study;
}

const v1::Trial* SchedulerCore::Best(const StudyEntry& entry) const {
  if (entry.ranked.empty()) return nullptr;
  return &entry.trials.at(entry.ranked.begin()->second);
}

void SchedulerCore::Emit(const StudyEntry& entry, v1::StudyEvent::Kind kind,
                         const v1::Trial* trial) {
  bool any = false;
  for (const auto& [id, watcher] : watchers_) {
    any |= watcher.study == entry.study.name();
  }
  if (!any) return;
  v1::StudyEvent event;
  event.set_kind(kind);
  *event.mutable_study() = WithCounts(entry);
  if (trial) *event.mutable_trial() = *trial;
  if (const v1::Trial* best = Best(entry)) *event.mutable_best_trial() = *best;
  for (const auto& [id, watcher] : watchers_) {
    if (watcher.study == entry.study.name()) watcher.callback(event);
  }
}

absl::Status SchedulerCore::MaybeFinish(StudyEntry& entry) {
  if (entry.study.state() != v1::STUDY_ACTIVE || entry.active_trials > 0) {
    return absl::OkStatus();
  }
  const int64_t max_trials = entry.study.spec().budget().max_trials();
  if (int64_t(entry.trials.size()) < max_trials && !entry.exhausted) {
    return absl::OkStatus();
  }
  if (entry.open_trials > 0) {
    // Only PAUSED trials are left. Worker-run ones may still be promoted:
    // that is the suggestion thread's call; once nothing is promotable they
    // are over. Ask/tell clients finish their own.
    if (entry.study.spec().trial().run_case() ==
        v1::TrialTemplate::RUN_NOT_SET) {
      return absl::OkStatus();
    }
    if (entry.trial_scheduler->HasPromotion()) {
      ScheduleFill(entry.study.name());
      return absl::OkStatus();
    }
    std::vector<v1::Trial> paused;
    for (const auto& [n, t] : entry.trials) {
      if (t.state() == v1::PAUSED) paused.push_back(t);
    }
    for (auto& t : paused) {
      t.set_state(v1::STOPPED);
      t.set_error("");
      *t.mutable_end_time() = Now();
      DIAL_RETURN_IF_ERROR(SaveTrial(entry, t));
      entry.unobserved.push_back(t);
      Emit(entry, v1::StudyEvent::TRIAL_FINISHED, &t);
    }
  }
  DIAL_RETURN_IF_ERROR(SaveStudyState(entry, v1::STUDY_COMPLETED));
  Emit(entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
  return absl::OkStatus();
}

void SchedulerCore::FinishIfDone(StudyEntry& entry) {
  absl::Status status = MaybeFinish(entry);
  if (status.ok()) return;
  // Worker-run studies retry on the next AcquireTrial; ask/tell studies on
  // the next SuggestTrials, which checks again anyway.
  spdlog::error("study {}: cannot record its end yet: {}", entry.study.name(),
                status.ToString());
  entry.fill_failed = true;
}

absl::StatusOr<v1::Study> SchedulerCore::CreateStudy(v1::StudySpec spec) {
  DIAL_RETURN_IF_ERROR(ValidateStudySpec(spec));
  std::random_device rd;
  FillSpecDefaults((uint64_t{rd()} << 32) | rd(), spec);
  auto entry = std::make_shared<StudyEntry>();
  DIAL_ASSIGN_OR_RETURN(entry->searcher, searcher_factory_(spec));
  entry->wants_reports = entry->searcher->WantsReports();
  DIAL_ASSIGN_OR_RETURN(entry->trial_scheduler, trial_scheduler_factory_(spec));
  entry->study.set_name(spec.name());
  *entry->study.mutable_spec() = std::move(spec);
  entry->study.set_state(v1::STUDY_ACTIVE);
  *entry->study.mutable_create_time() = Now();
  *entry->study.mutable_update_time() = entry->study.create_time();

  Lock lock(this);
  if (studies_.count(entry->study.name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("study '", entry->study.name(), "' already exists"));
  }
  DIAL_RETURN_IF_ERROR(store_->CreateStudy(entry->study));
  StudyEntry& e = *entry;
  studies_[entry->study.name()] = std::move(entry);
  ScheduleFill(e.study.name());
  return WithCounts(e);
}

absl::StatusOr<v1::Study> SchedulerCore::GetStudy(const std::string& name) {
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  return WithCounts(*entry);
}

absl::StatusOr<std::vector<v1::Study>> SchedulerCore::ListStudies() {
  Lock lock(this);
  std::vector<v1::Study> out;
  for (const auto& [name, entry] : studies_) out.push_back(WithCounts(*entry));
  std::sort(out.begin(), out.end(), [](const v1::Study& a, const v1::Study& b) {
    return google::protobuf::util::TimeUtil::TimestampToMilliseconds(
               a.create_time()) <
           google::protobuf::util::TimeUtil::TimestampToMilliseconds(
               b.create_time());
  });
  return out;
}

absl::StatusOr<v1::Study> SchedulerCore::UpdateStudy(
    const std::string& name, int32_t max_trials, int32_t max_parallel_trials) {
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
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
    spec.mutable_budget()->set_max_parallel_trials(spec.budget().max_trials());
  }
  DIAL_RETURN_IF_ERROR(ValidateStudySpec(spec));
  // The searcher may depend on the budget (a grid enumerates max_trials
  // points): build it anew, so an invalid change fails here and not at the
  // next restart, and replay what the old one observed.
  DIAL_RETURN_IF_ERROR(searcher_factory_(spec).status());
  v1::Study updated = entry->study;
  *updated.mutable_spec() = spec;
  *updated.mutable_update_time() = Now();
  const bool reopen =
      updated.state() == v1::STUDY_COMPLETED &&
      int64_t(entry->trials.size()) < spec.budget().max_trials();
  if (reopen) updated.set_state(v1::STUDY_ACTIVE);
  DIAL_RETURN_IF_ERROR(store_->UpdateStudy(updated));
  entry->study = std::move(updated);
  entry->exhausted = false;  // rediscovered on the next suggestion
  std::shared_ptr<StudyEntry> shared = studies_[name];
  Enqueue(
      {[this, shared, spec] {
         auto searcher = searcher_factory_(spec);
         if (!searcher.ok()) return;  // checked above
         std::vector<v1::Trial> finished, all;
         {
           Lock lock(this);
           for (const auto& [number, trial] : shared->trials) {
             if (IsFinal(trial.state())) finished.push_back(trial);
             all.push_back(trial);
           }
           shared->unobserved.clear();
           shared->unobserved_reports.clear();
         }
         if ((*searcher)->WantsReports()) {
           // Rung results come from the stored reports, in time order.
           std::vector<std::pair<int64_t, StudyEntry::Report>> replay;
           for (const auto& t : all) {
             auto history = store_->GetMetricHistory(t.study(), t.number());
             if (!history.ok()) continue;
             for (const auto& p : *history) {
               replay.push_back(
                   {google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                        p.time()),
                    {t, p.step(), p.metrics()}});
             }
           }
           std::stable_sort(
               replay.begin(), replay.end(),
               [](const auto& a, const auto& b) { return a.first < b.first; });
           for (const auto& [ms, r] : replay) {
             (*searcher)->ObserveReport(r.trial, r.step, r.metrics);
           }
         }
         for (const auto& t : ByEndTime(std::move(finished))) {
           (*searcher)->Observe(t);
         }
         shared->searcher = std::move(*searcher);
       },
       nullptr});
  ScheduleFill(name);
  DIAL_RETURN_IF_ERROR(MaybeFinish(*entry));
  return WithCounts(*entry);
}

absl::StatusOr<v1::Study> SchedulerCore::StopStudy(const std::string& name) {
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  if (entry->study.state() != v1::STUDY_ACTIVE) return WithCounts(*entry);
  for (auto& [number, trial] : entry->trials) {
    if (trial.state() == v1::PENDING || trial.state() == v1::PAUSED) {
      v1::Trial stopped = trial;
      stopped.set_state(v1::STOPPED);
      *stopped.mutable_end_time() = Now();
      DIAL_RETURN_IF_ERROR(SaveTrial(*entry, stopped));
    }
  }
  DIAL_RETURN_IF_ERROR(SaveStudyState(*entry, v1::STUDY_STOPPED));
  Emit(*entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
  return WithCounts(*entry);
}

absl::Status SchedulerCore::DeleteStudy(const std::string& name) {
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  DIAL_RETURN_IF_ERROR(store_->DeleteStudy(name));
  Emit(*entry, v1::StudyEvent::STUDY_FINISHED, nullptr);
  entry->deleted = true;
  studies_.erase(name);
  return absl::OkStatus();
}

absl::StatusOr<TrialPage> SchedulerCore::ListTrials(
    const std::string& name, const std::vector<v1::TrialState>& states,
    int32_t page_size, const std::string& page_token) {
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
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  TrialPage page;
  for (auto it = entry->trials.upper_bound(after); it != entry->trials.end();
       ++it) {
    if (!states.empty() && std::find(states.begin(), states.end(),
                                     it->second.state()) == states.end()) {
      continue;
    }
    if (int32_t(page.trials.size()) == page_size) {
      page.next_page_token = std::to_string(page.trials.back().number());
      break;
    }
    page.trials.push_back(it->second);
  }
  return page;
}

absl::StatusOr<v1::Trial> SchedulerCore::GetTrial(const std::string& name,
                                                  int64_t number) {
  v1::Trial trial;
  {
    Lock lock(this);
    DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
    DIAL_ASSIGN_OR_RETURN(v1::Trial * stored, FindTrial(*entry, number));
    trial = *stored;
  }
  // The history is read without the core's lock (the store has its own),
  // so a long one does not hold up reports. It may hold a report newer
  // than `trial`; that report is on record either way.
  DIAL_ASSIGN_OR_RETURN(auto history, store_->GetMetricHistory(name, number));
  for (auto& point : history) *trial.add_metric_history() = std::move(point);
  return trial;
}

absl::StatusOr<std::vector<v1::Trial>> SchedulerCore::GetBestTrials(
    const std::string& name, int32_t count) {
  if (count < 0 || count > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: must be between 0 (= 1) and ", kMaxPageSize));
  }
  if (count == 0) count = 1;
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  std::vector<v1::Trial> out;
  for (auto it = entry->ranked.begin();
       it != entry->ranked.end() && int32_t(out.size()) < count; ++it) {
    out.push_back(entry->trials.at(it->second));
  }
  return out;
}

absl::StatusOr<Suggestion> SchedulerCore::SuggestTrials(
    const std::string& name, int32_t count, const std::string& client_id) {
  absl::Notification ready;
  absl::StatusOr<Suggestion> result;
  uint64_t seq = 0;
  SuggestTrialsAsync(name, count, client_id, [&](absl::StatusOr<Suggestion> r) {
    result = std::move(r);
    seq = t_written_seq;  // the suggestion thread's, for WhenDurable here
    ready.Notify();
  });
  ready.WaitForNotification();
  t_written_seq = seq;
  return result;
}

absl::Status SchedulerCore::Gone(const StudyEntry& entry) {
  if (entry.stale) {
    return absl::UnavailableError("the scheduler reloaded its state; retry");
  }
  if (entry.deleted) return absl::NotFoundError("the study was deleted");
  return absl::OkStatus();
}

void SchedulerCore::SuggestTrialsAsync(
    const std::string& name, int32_t count, const std::string& client_id,
    std::function<void(absl::StatusOr<Suggestion>)> done) {
  if (count < 0 || count > kMaxSuggest) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("count: must be between 0 (= 1) and ", kMaxSuggest)));
  }
  if (client_id.size() > kMaxClientId) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("client_id: at most ", kMaxClientId, " characters")));
  }
  if (count == 0) count = 1;
  absl::Status refused;
  {
    Lock lock(this);
    auto found = Find(name);
    if (!found.ok()) {
      refused = found.status();
    } else if (stopping_) {
      refused = absl::UnavailableError("the scheduler is shutting down");
    } else {
      Enqueue(
          {[this, entry = studies_[name], count, client_id, done] {
             Suggestion result;
             absl::Status gone;
             bool reuse = false;
             {
               Lock lock(this);
               gone = Gone(*entry);
               // A client with open trials gets those back, not new
               // ones.
               auto it = entry->open_by_client.find(client_id);
               if (gone.ok() && !client_id.empty() &&
                   it != entry->open_by_client.end() && !it->second.empty()) {
                 for (int64_t number : it->second) {
                   result.trials.push_back(entry->trials.at(number));
                 }
                 result.study_state = entry->study.state();
                 reuse = true;
               }
             }
             // `done` runs without the lock, as promised.
             if (!gone.ok()) return done(gone);
             if (reuse) return done(std::move(result));
             while (int32_t(result.trials.size()) < count) {
               auto trial = NewTrial(entry, v1::RUNNING, client_id);
               if (!trial.ok() && result.trials.empty()) {
                 return done(trial.status());
               }
               // The trials created before a store error are this
               // client's: hand them over rather than orphan them.
               if (!trial.ok() || !trial->has_value()) break;
               result.trials.push_back(std::move(**trial));
             }
             absl::Status status;
             {
               Lock lock(this);
               // A Reload meanwhile dropped this entry (and maybe the
               // trials just created): it must not write any more.
               status = Gone(*entry);
               if (status.ok()) status = MaybeFinish(*entry);
               result.study_state = entry->study.state();
               result.done = entry->study.state() != v1::STUDY_ACTIVE ||
                             (result.trials.empty() && entry->open_trials == 0);
             }
             if (!status.ok()) return done(status);
             done(std::move(result));
           },
           [done] {
             done(absl::UnavailableError("the scheduler is shutting down"));
           }});
    }
  }
  if (!refused.ok()) done(refused);
}

absl::StatusOr<v1::Decision> SchedulerCore::ReportIntermediate(
    const std::string& name, int64_t number, int64_t step,
    const searchers::Metrics& metrics, const std::string& checkpoint) {
  DIAL_RETURN_IF_ERROR(CheckReport(step, metrics, checkpoint));
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  DIAL_ASSIGN_OR_RETURN(v1::Trial * stored, FindTrial(*entry, number));
  if (stored->state() != v1::RUNNING) {
    return NotRunning(*stored, "reports are taken only while RUNNING");
  }
  DIAL_ASSIGN_OR_RETURN(std::optional<v1::Decision> retried,
                        SaveUnsavedDecision(*entry, number, step));
  if (retried) return *retried;
  if (step <= stored->last_step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", step, " is not after the last reported step ",
                     stored->last_step()));
  }
  return RecordReport(*entry, *stored, step, metrics, checkpoint);
}

void SchedulerCore::Retain(StudyEntry& entry, int64_t trial) {
  const int keep_best = entry.study.spec().checkpoints().keep_best() == 0
                            ? 2
                            : entry.study.spec().checkpoints().keep_best();
  auto it = entry.checkpoint_scores.find(trial);
  if (checkpoints_ == nullptr || keep_best < 0 ||
      it == entry.checkpoint_scores.end() || it->second.empty()) {
    return;
  }
  auto& scores = it->second;
  std::set<int64_t> keep = {scores.rbegin()->first};  // the latest
  std::vector<std::pair<double, int64_t>> ranked;
  for (const auto& [step, score] : scores) ranked.push_back({score, -step});
  std::sort(ranked.rbegin(), ranked.rend());  // best first, earlier on ties
  for (int i = 0; i < keep_best && i < static_cast<int>(ranked.size()); ++i) {
    keep.insert(-ranked[i].second);
  }
  std::vector<std::string> doomed;
  for (auto s = scores.begin(); s != scores.end();) {
    const std::string id =
        storage::CheckpointStore::MakeId(entry.study.name(), trial, s->first);
    if (keep.count(s->first) || entry.pins.count(id)) {
      ++s;
      continue;
    }
    doomed.push_back(id);
    s = scores.erase(s);
  }
  if (doomed.empty()) return;
  // Deleted only once the write that made them obsolete (the caller's,
  // just made) is durable: were it lost, the reloaded study would still
  // name them. The wait is one commit, on the suggestion thread.
  Enqueue({[this, doomed, seq = store_->WrittenSeq()] {
             absl::Notification answered;
             absl::Status durable;
             store_->WhenDurable(seq, [&](absl::Status s) {
               durable = s;
               answered.Notify();
             });
             answered.WaitForNotification();
             if (!durable.ok()) return;
             for (const auto& id : doomed) {
               absl::Status status = checkpoints_->Delete(id);
               if (!status.ok() && !absl::IsNotFound(status)) {
                 spdlog::warn("retention: {}", status.ToString());
               }
             }
           },
           nullptr});
}

absl::StatusOr<v1::Decision> SchedulerCore::RecordReport(
    StudyEntry& study, v1::Trial trial, int64_t step,
    const searchers::Metrics& metrics, const std::string& checkpoint) {
  StudyEntry* entry = &study;
  trial.set_last_step(step);
  if (!checkpoint.empty()) {
    trial.set_checkpoint(checkpoint);
    trial.set_checkpoint_step(step);
  }
  v1::MetricPoint point;
  point.set_step(step);
  *point.mutable_metrics() = metrics;
  *point.mutable_time() = Now();
  DIAL_RETURN_IF_ERROR(store_->RecordReport(trial, point));
  Mirror(*entry, trial);
  entry->unsaved_decisions.erase(trial.number());
  if (entry->wants_reports) {
    entry->unobserved_reports.push_back({trial, step, metrics});
  }
  // Pins taken for this trial's exploit are released: reporting again means
  // its worker finished copying.
  for (auto pin = entry->pins.begin(); pin != entry->pins.end();) {
    if (!pin->second.erase(trial.number()) || !pin->second.empty()) {
      ++pin;
      continue;
    }
    std::vector<std::string> parts = absl::StrSplit(pin->first, '/');
    pin = entry->pins.erase(pin);
    int64_t source;
    if (parts.size() == 3 && absl::SimpleAtoi(parts[1], &source)) {
      Retain(*entry, source);
    }
  }
  if (!checkpoint.empty() && entry->study.spec().trial().has_trainer() &&
      checkpoint == storage::CheckpointStore::MakeId(entry->study.name(),
                                                     trial.number(), step)) {
    const auto& objective = entry->study.spec().objective();
    auto value = metrics.find(objective.metric());
    double score = -std::numeric_limits<double>::infinity();
    if (value != metrics.end() && std::isfinite(value->second)) {
      score = objective.goal() == v1::MAXIMIZE ? value->second : -value->second;
    }
    entry->checkpoint_scores[trial.number()][step] = score;
    Retain(*entry, trial.number());
  }

  v1::Decision decision;
  if (entry->study.state() == v1::STUDY_STOPPED) {
    decision.set_action(v1::Decision::STOP);
    decision.set_reason("study stopped");
  } else {
    decision = entry->trial_scheduler->OnReport(trial, step, metrics);
  }
  entry->last_decision[trial.number()] = {step, decision};
  absl::Status applied = ApplyDecision(*entry, trial, step, decision);
  if (!applied.ok()) {
    // The report is on disk (the trial scheduler has seen it and a restart
    // replays it); the decision's effect is not. A retry of this report
    // saves it instead of recording the report twice.
    entry->unsaved_decisions[trial.number()] = {step, decision};
    return applied;
  }
  return decision;
}

absl::Status SchedulerCore::ApplyDecision(StudyEntry& entry, v1::Trial trial,
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
    dispatched_.erase({trial.study(), trial.number()});
    Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
    ScheduleFill(entry.study.name());
    FinishIfDone(entry);
    return absl::OkStatus();
  }
  if (decision.action() == v1::Decision::EXPLOIT) {
    // Keep the source checkpoint until this trial's worker has copied it.
    entry.pins[decision.source_checkpoint()].insert(trial.number());
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

absl::StatusOr<std::optional<v1::Decision>> SchedulerCore::SaveUnsavedDecision(
    StudyEntry& entry, int64_t number, int64_t step) {
  auto unsaved = entry.unsaved_decisions.find(number);
  auto trial = entry.trials.find(number);
  if (unsaved == entry.unsaved_decisions.end() ||
      unsaved->second.first != step || trial == entry.trials.end() ||
      trial->second.state() != v1::RUNNING ||
      trial->second.last_step() != step) {
    return std::optional<v1::Decision>();
  }
  const v1::Decision decision = unsaved->second.second;
  DIAL_RETURN_IF_ERROR(ApplyDecision(entry, trial->second, step, decision));
  entry.unsaved_decisions.erase(number);
  return std::optional<v1::Decision>(decision);
}

absl::Status SchedulerCore::Finalize(StudyEntry& entry, v1::Trial trial) {
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  dispatched_.erase({trial.study(), trial.number()});
  entry.unobserved.push_back(trial);  // for the searcher, off this thread
  entry.trial_scheduler->OnTrialFinished(trial);
  Emit(entry, v1::StudyEvent::TRIAL_FINISHED, &trial);
  // The trial's end is on disk: acknowledge it even if the study's cannot
  // be saved yet.
  FinishIfDone(entry);
  ScheduleFill(entry.study.name());
  Dispatch();
  return absl::OkStatus();
}

absl::StatusOr<v1::Trial> SchedulerCore::CompleteTrial(
    const std::string& name, int64_t number,
    const searchers::Metrics& final_metrics, const std::string& error) {
  DIAL_RETURN_IF_ERROR(CheckMetrics(final_metrics, "final_metrics"));
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  DIAL_ASSIGN_OR_RETURN(v1::Trial * stored, FindTrial(*entry, number));
  const bool stopped_open = stored->state() == v1::STOPPED &&
                            stored->final_metrics().empty() &&
                            stored->error().empty();
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
    auto it = final_metrics.find(metric);
    if (it == final_metrics.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("final_metrics: must hold the objective metric '",
                       metric, "' (or set error if the evaluation failed)"));
    }
    if (!std::isfinite(it->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "final_metrics.", metric,
          ": must be a finite number; set error for a diverged trial"));
    }
    trial.set_objective_value(it->second);
    if (trial.state() == v1::RUNNING) trial.set_state(v1::COMPLETED);
  }
  if (stopped_open) {
    // Already final (stopped early): record the values, change nothing else.
    DIAL_RETURN_IF_ERROR(SaveTrial(*entry, trial));
    return trial;
  }
  *trial.mutable_end_time() = Now();
  DIAL_RETURN_IF_ERROR(Finalize(*entry, trial));
  return trial;
}

absl::StatusOr<v1::StudyEvent> SchedulerCore::Watch(const std::string& name,
                                                    WatchCallback callback,
                                                    int64_t* watch_id) {
  Lock lock(this);
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(name));
  v1::StudyEvent event;
  event.set_kind(v1::StudyEvent::SNAPSHOT);
  *event.mutable_study() = WithCounts(*entry);
  if (const v1::Trial* best = Best(*entry)) *event.mutable_best_trial() = *best;
  *watch_id = next_watch_id_++;
  watchers_[*watch_id] = Watcher{name, std::move(callback)};
  return event;
}

void SchedulerCore::Unwatch(int64_t watch_id) {
  Lock lock(this);
  watchers_.erase(watch_id);
}

bool SchedulerCore::CanCreate(const StudyEntry& entry) const {
  const auto& budget = entry.study.spec().budget();
  return !entry.deleted && entry.study.state() == v1::STUDY_ACTIVE &&
         !entry.exhausted &&
         int64_t(entry.trials.size()) < budget.max_trials() &&
         entry.active_trials < budget.max_parallel_trials();
}

absl::StatusOr<std::optional<v1::Trial>> SchedulerCore::NewTrial(
    const std::shared_ptr<StudyEntry>& entry, v1::TrialState state,
    const std::string& client_id) {
  int64_t number;
  std::vector<searchers::Params> pending;
  std::vector<v1::Trial> observe;
  std::vector<StudyEntry::Report> reports;
  {
    Lock lock(this);
    if (!CanCreate(*entry)) return std::optional<v1::Trial>();
    reports.swap(entry->unobserved_reports);
    number = static_cast<int64_t>(entry->trials.size());
    if (entry->searcher->UsesPending()) {
      for (int64_t n : entry->open) {
        pending.push_back(entry->trials.at(n).params());
      }
    }
    observe.swap(entry->unobserved);
  }
  // Only this thread creates trials, so `number` stays free meanwhile.
  for (const auto& r : reports) {
    entry->searcher->ObserveReport(r.trial, r.step, r.metrics);
  }
  for (const auto& t : observe) entry->searcher->Observe(t);
  auto params = entry->searcher->Suggest(number, pending);
  Lock lock(this);
  if (absl::IsOutOfRange(params.status())) {
    entry->exhausted = true;
    return std::optional<v1::Trial>();
  }
  if (!params.ok()) return params.status();
  // The study may have been stopped, deleted or shrunk while we searched.
  if (!CanCreate(*entry)) return std::optional<v1::Trial>();
  v1::Trial trial;
  trial.set_study(entry->study.name());
  trial.set_number(number);
  trial.set_state(state);
  *trial.mutable_params() = std::move(*params);
  trial.set_client_id(client_id);
  trial.set_last_step(-1);
  *trial.mutable_create_time() = Now();
  if (state == v1::RUNNING) {
    trial.set_attempt(1);
    *trial.mutable_start_time() = trial.create_time();
  }
  DIAL_RETURN_IF_ERROR(SaveTrial(*entry, trial));
  Emit(*entry, v1::StudyEvent::TRIAL_CREATED, &trial);
  return std::optional<v1::Trial>(std::move(trial));
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
            absl::Status status = Requeue(*entry, it->second);
            if (!status.ok()) spdlog::error("{}", status.ToString());
            Dispatch();
            continue;
          }
        }
      }
    }
    auto trial = NewTrial(entry, v1::PENDING, "");
    Lock lock(this);
    if (!trial.ok()) {
      // E.g. the disk is full: the next AcquireTrial asks again.
      spdlog::error("study {}: cannot queue a trial: {}", entry->study.name(),
                    trial.status().ToString());
      entry->fill_failed = true;
      return;
    }
    Dispatch();
    if (!trial->has_value()) {
      // Not for an entry that DeleteStudy or a Reload dropped meanwhile.
      if (!entry->deleted) FinishIfDone(*entry);
      return;
    }
  }
}

absl::Status SchedulerCore::Requeue(StudyEntry& entry, v1::Trial trial) {
  if (entry.study.state() != v1::STUDY_ACTIVE) {
    // Nobody will run it again: it ends where it is.
    trial.set_state(v1::STOPPED);
    trial.set_worker_id("");
    *trial.mutable_end_time() = Now();
    return Finalize(entry, trial);
  }
  trial.set_state(v1::PENDING);
  trial.set_worker_id("");
  DIAL_RETURN_IF_ERROR(SaveTrial(entry, trial));
  dispatched_.erase({trial.study(), trial.number()});
  Emit(entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
  return absl::OkStatus();
}

absl::Status SchedulerCore::Touch(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker '", worker_id,
                     "' is not registered (or its lease expired); "
                     "register again"));
  }
  it->second.last_seen = clock_->Now();
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterWorkerResponse> SchedulerCore::RegisterWorker(
    const std::string& host, const v1::WorkerResources& resources) {
  if (host.empty() || host.size() > 255) {
    return absl::InvalidArgumentError("host: must be 1-255 characters");
  }
  if (resources.slots() < 1 || resources.slots() > 1024) {
    return absl::InvalidArgumentError(
        "resources.slots: must be between 1 and 1024");
  }
  Lock lock(this);
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof(suffix), "%08x", rd());
  WorkerEntry entry;
  entry.worker.set_id(absl::StrCat(host, "-", suffix));
  entry.worker.set_host(host);
  *entry.worker.mutable_resources() = resources;
  *entry.worker.mutable_last_seen() = Now();
  entry.last_seen = clock_->Now();
  DIAL_RETURN_IF_ERROR(store_->PutWorker(entry.worker));
  v1::RegisterWorkerResponse response;
  response.set_worker_id(entry.worker.id());
  response.set_lease_ms(absl::ToInt64Milliseconds(worker_lease_));
  workers_[entry.worker.id()] = std::move(entry);
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> SchedulerCore::Heartbeat(
    const v1::HeartbeatRequest& request) {
  Lock lock(this);
  DIAL_RETURN_IF_ERROR(Touch(request.worker_id()));
  std::set<std::pair<std::string, int64_t>> running;
  for (const auto& r : request.running())
    running.insert({r.study(), r.trial()});
  // Trials handed to this worker that it does not run (e.g. the reply to its
  // long poll was lost) go back to the queue after a lease of grace.
  const absl::Time now = clock_->Now();
  std::vector<std::pair<StudyEntry*, v1::Trial>> lost;
  for (const auto& [key, when] : dispatched_) {
    if (running.count(key) || now - when < worker_lease_) continue;
    auto study = studies_.find(key.first);
    if (study == studies_.end()) continue;
    auto trial = study->second->trials.find(key.second);
    if (trial != study->second->trials.end() &&
        trial->second.state() == v1::RUNNING &&
        trial->second.worker_id() == request.worker_id()) {
      lost.push_back({study->second.get(), trial->second});
    }
  }
  for (auto& [entry, trial] : lost)
    DIAL_RETURN_IF_ERROR(Requeue(*entry, trial));
  if (!lost.empty()) Dispatch();
  v1::HeartbeatResponse response;
  response.set_lease_ms(absl::ToInt64Milliseconds(worker_lease_));
  return response;
}

absl::StatusOr<std::optional<Assignment>> SchedulerCore::Assign(
    const std::string& worker_id, int32_t free_gpus) {
  StudyEntry* best_entry = nullptr;
  const v1::Trial* best = nullptr;
  int64_t best_ms = 0;
  for (auto& [name, entry] : studies_) {
    if (entry->study.state() != v1::STUDY_ACTIVE ||
        entry->study.spec().trial().run_case() ==
            v1::TrialTemplate::RUN_NOT_SET ||
        entry->study.spec().trial().resources().gpus() > free_gpus) {
      continue;
    }
    // Trials are in number order: the first PENDING is the oldest.
    if (entry->pending.empty()) continue;
    const v1::Trial& trial = entry->trials.at(*entry->pending.begin());
    const int64_t ms =
        google::protobuf::util::TimeUtil::TimestampToMilliseconds(
            trial.create_time());
    if (best == nullptr || ms < best_ms) {
      best = &trial;
      best_entry = entry.get();
      best_ms = ms;
    }
  }
  if (best == nullptr) return std::optional<Assignment>();
  v1::Trial trial = *best;
  trial.set_state(v1::RUNNING);
  trial.set_attempt(trial.attempt() + 1);
  trial.set_worker_id(worker_id);
  if (!trial.has_start_time()) *trial.mutable_start_time() = Now();
  DIAL_RETURN_IF_ERROR(SaveTrial(*best_entry, trial));
  dispatched_[{trial.study(), trial.number()}] = clock_->Now();
  Emit(*best_entry, v1::StudyEvent::TRIAL_REPORTED, &trial);
  Assignment a;
  a.run = best_entry->study.spec().trial();
  a.restore_checkpoint = trial.checkpoint();
  a.start_step = trial.checkpoint().empty() ? 0 : trial.checkpoint_step();
  a.attempt = trial.attempt();
  a.trial = std::move(trial);
  return std::optional<Assignment>(std::move(a));
}

void SchedulerCore::Dispatch() {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!it->alive()) {
      Answer(it->done, std::optional<Assignment>());
      it = waiters_.erase(it);
      continue;
    }
    auto assignment = Assign(it->worker_id, it->free_gpus);
    if (assignment.ok() && !assignment->has_value()) {
      ++it;
      continue;
    }
    Answer(it->done, std::move(assignment));
    it = waiters_.erase(it);
  }
}

void SchedulerCore::AcquireTrial(const std::string& worker_id,
                                 int32_t free_gpus, absl::Duration wait,
                                 std::function<bool()> alive,
                                 AcquireCallback done) {
  Lock lock(this);
  absl::Status touched = Touch(worker_id);
  if (!touched.ok()) return Answer(done, touched);
  // Top-ups that failed on the store (a full disk) are retried while
  // workers ask for work, so the studies move again once the store heals.
  for (auto& [name, entry] : studies_) {
    if (entry->fill_failed) {
      entry->fill_failed = false;
      ScheduleFill(name);
    }
  }
  auto assignment = Assign(worker_id, free_gpus);
  if (!assignment.ok() || assignment->has_value() ||
      wait <= absl::ZeroDuration() || stopping_) {
    return Answer(done, std::move(assignment));
  }
  waiters_.push_back({worker_id, free_gpus,
                      clock_->Now() + std::min(wait, absl::Seconds(30)),
                      std::move(alive), std::move(done)});
}

absl::StatusOr<v1::Trial*> SchedulerCore::Fence(StudyEntry& entry,
                                                const std::string& worker_id,
                                                int64_t number,
                                                int32_t attempt) {
  DIAL_ASSIGN_OR_RETURN(v1::Trial * trial, FindTrial(entry, number));
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

absl::StatusOr<v1::Decision> SchedulerCore::ReportProgress(
    const v1::ReportProgressRequest& request) {
  DIAL_RETURN_IF_ERROR(
      CheckReport(request.step(), request.metrics(), request.checkpoint()));
  Lock lock(this);
  DIAL_RETURN_IF_ERROR(Touch(request.worker_id()));
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(request.study()));
  DIAL_ASSIGN_OR_RETURN(
      v1::Trial * stored,
      Fence(*entry, request.worker_id(), request.trial(), request.attempt()));
  // A retry of the report just answered (its reply was lost) gets the same
  // decision, even if that decision ended or paused the trial.
  auto last = entry->last_decision.find(request.trial());
  if (last != entry->last_decision.end() &&
      last->second.first == request.step() &&
      request.step() == stored->last_step()) {
    return last->second.second;
  }
  if (stored->state() != v1::RUNNING) {
    return NotRunning(*stored, "reports are taken only while RUNNING");
  }
  if (request.step() <= stored->last_step()) {
    // A resumed attempt replays steps after its checkpoint that an earlier
    // attempt already reported: they are on record once already.
    v1::Decision decision;
    decision.set_action(entry->study.state() == v1::STUDY_STOPPED
                            ? v1::Decision::STOP
                            : v1::Decision::CONTINUE);
    decision.set_reason("step already recorded");
    return decision;
  }
  return RecordReport(*entry, *stored, request.step(), request.metrics(),
                      request.checkpoint());
}

absl::Status SchedulerCore::FinishTrial(const v1::FinishTrialRequest& request) {
  DIAL_RETURN_IF_ERROR(CheckMetrics(request.final_metrics(), "final_metrics"));
  Lock lock(this);
  DIAL_RETURN_IF_ERROR(Touch(request.worker_id()));
  DIAL_ASSIGN_OR_RETURN(StudyEntry * entry, Find(request.study()));
  DIAL_ASSIGN_OR_RETURN(
      v1::Trial * stored,
      Fence(*entry, request.worker_id(), request.trial(), request.attempt()));
  if (stored->state() == v1::STOPPED || stored->state() == v1::PAUSED) {
    // Stopped or paused by a decision; the process has now exited.
    v1::Trial trial = *stored;
    *trial.mutable_final_metrics() = request.final_metrics();
    dispatched_.erase({trial.study(), trial.number()});
    return SaveTrial(*entry, trial);
  }
  if (stored->state() != v1::RUNNING) {
    return NotRunning(*stored, "it cannot be finished again");
  }
  v1::Trial trial = *stored;
  if (request.requeue()) {
    DIAL_RETURN_IF_ERROR(Requeue(*entry, trial));
    Dispatch();
    return absl::OkStatus();
  }
  std::string error = request.error();
  const std::string& metric = entry->study.spec().objective().metric();
  auto objective = request.final_metrics().find(metric);
  if (error.empty() && (objective == request.final_metrics().end() ||
                        !std::isfinite(objective->second))) {
    error = absl::StrCat(
        "the trial finished without a finite value of the "
        "objective metric '",
        metric, "'");
  }
  *trial.mutable_final_metrics() = request.final_metrics();
  if (error.empty()) {
    trial.set_objective_value(objective->second);
    trial.set_state(v1::COMPLETED);
    trial.clear_error();  // an earlier attempt's failure is history now
    *trial.mutable_end_time() = Now();
    return Finalize(*entry, trial);
  }
  if (!request.stderr_tail().empty()) {
    absl::StrAppend(&error, "\n--- last lines of stderr ---\n",
                    request.stderr_tail());
  }
  trial.set_error(error.substr(0, 16384));
  trial.set_failures(trial.failures() + 1);
  if (trial.failures() <=
      entry->study.spec().budget().max_failures_per_trial()) {
    DIAL_RETURN_IF_ERROR(Requeue(*entry, trial));
    Dispatch();
    return absl::OkStatus();
  }
  trial.set_state(v1::FAILED);
  *trial.mutable_end_time() = Now();
  return Finalize(*entry, trial);
}

absl::Status SchedulerCore::LoseWorker(const std::string& worker_id) {
  std::vector<std::pair<StudyEntry*, v1::Trial>> lost;
  for (auto& [name, entry] : studies_) {
    for (const auto& [number, trial] : entry->trials) {
      if (trial.state() == v1::RUNNING && trial.worker_id() == worker_id) {
        lost.push_back({entry.get(), trial});
      }
    }
  }
  for (auto& [entry, trial] : lost)
    DIAL_RETURN_IF_ERROR(Requeue(*entry, trial));
  workers_.erase(worker_id);
  // Its parked long polls must not be handed the trials just requeued.
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->worker_id == worker_id) {
      Answer(it->done,
             absl::NotFoundError("worker lease expired; register again"));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

void SchedulerCore::BackupDatabaseAsync(
    const std::string& path,
    std::function<void(absl::StatusOr<int64_t>)> done) {
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
      backup_thread_ = std::thread([this, path, done = std::move(done)] {
        absl::StatusOr<int64_t> bytes = store_->Backup(path);
        if (bytes.ok()) {
          spdlog::info("database backed up to {} ({} bytes)", path, *bytes);
        } else if (!absl::IsInvalidArgument(bytes.status())) {
          spdlog::warn("backup to {} failed: {}", path,
                       bytes.status().ToString());
        }
        {
          Lock lock(this);
          backup_running_ = false;
        }
        done(std::move(bytes));
      });
    }
  }
  if (previous.joinable()) previous.join();
  if (!refused.ok()) done(refused);
}

absl::StatusOr<int64_t> SchedulerCore::BackupDatabase(const std::string& path) {
  absl::Notification ready;
  absl::StatusOr<int64_t> result;
  BackupDatabaseAsync(path, [&](absl::StatusOr<int64_t> r) {
    result = std::move(r);
    ready.Notify();
  });
  ready.WaitForNotification();
  return result;
}

void SchedulerCore::Tick() {
  Lock lock(this);
  if (reload_needed_) Reload();
  const absl::Time now = clock_->Now();
  std::vector<std::string> expired;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen > worker_lease_) expired.push_back(id);
  }
  for (const auto& id : expired) {
    spdlog::warn("worker {} missed its lease; requeueing its trials", id);
    absl::Status status = LoseWorker(id);
    if (!status.ok()) spdlog::error("requeue failed: {}", status.ToString());
  }
  Dispatch();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline <= now || !it->alive()) {
      Answer(it->done, std::optional<Assignment>());
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace dial::scheduler
