// SchedulerCore: studies and the trial lifecycle, independent of gRPC. It
// keeps the public API, validates requests and wires the per-concern parts
// together (docs/architecture.md has the map):
//   StudyRegistry      the studies in memory (StudyEntry: trials + indexes)
//   StudyLoader        rebuilds a study from the store (start-up, reload,
//                      UpdateStudy's new searcher), one replay order
//   TrialLifecycle     the trial state machine, study completion
//   WorkerRegistry     worker leases, trials handed out
//   Dispatcher         parked AcquireTrial long polls
//   CheckpointRetention which worker checkpoints are kept
//   EventHub           watchers and ordered event delivery
//   StudyLifecycle     create, update, stop, delete, enqueue, re-evaluate,
//                      warm start, the audit log
//   TrialMaker         suggestion work on per-study executors (searchers
//                      run there: asks, top-ups, rebuilds), and deleting
//                      checkpoints and purging deleted studies on its own
//   Backups            database copies, one at a time, on their own thread
//   pages.h            the read side's paging (studies, trials, history,
//                      audit)
// Every change is written through the StudyStore before memory mirrors it,
// so a store error (UNAVAILABLE: disk full, I/O error) fails the call with
// nothing changed and the same call succeeds once the store works again;
// background work that failed (topping up a worker-run study, finishing a
// study) is retried later. On Create it rebuilds everything from the
// store, so a restarted scheduler resumes every study where it was.
//
// Thread-safe: one mutex guards the state of every part but the event hub,
// the backups and the trial maker's executors (which have their own). The parts
// never call back into the core: they leave effects in an outbox that the core
// applies before releasing the lock (dispatch, top-ups, deletions) or runs
// after releasing it (answers to parked calls); watchers are called after
// it too. No callback ever runs under the core's lock.
//
// Durability is a value: every call returns a Reply carrying its write
// ticket, the store's write sequence number when the call released the
// lock. Whoever answers a client passes it to WhenDurable first, so nothing
// is acknowledged before its commit (group commit: storage::Durability).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/principal.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "dial/v1/service.pb.h"
#include "scheduler/backups.h"
#include "scheduler/checkpoint_quota.h"
#include "scheduler/dispatcher.h"
#include "scheduler/event_hub.h"
#include "scheduler/limits.h"
#include "scheduler/outbox.h"
#include "scheduler/pages.h"
#include "scheduler/placer.h"
#include "scheduler/quotas.h"
#include "scheduler/reply.h"
#include "scheduler/retention.h"
#include "scheduler/study_entry.h"
#include "scheduler/study_lifecycle.h"
#include "scheduler/study_loader.h"
#include "scheduler/study_registry.h"
#include "scheduler/trial_lifecycle.h"
#include "scheduler/trial_maker.h"
#include "scheduler/worker_registry.h"
#include "searchers/importance.h"
#include "searchers/searcher.h"
#include "storage/checkpoint_store.h"
#include "storage/study_store.h"

namespace dial::scheduler {

struct SchedulerCoreOptions {
  storage::StudyStore* store = nullptr;  // required, not owned
  const Clock* clock = nullptr;          // nullptr: real time
  // A worker silent for longer is lost and its trials are requeued.
  absl::Duration worker_lease = absl::Seconds(10);
  // Period of the background check of leases and long polls; zero starts
  // no thread (tests call Tick themselves).
  absl::Duration tick = absl::Milliseconds(200);
  // Where worker trials' checkpoints live, for retention; null: keep all.
  storage::CheckpointStore* checkpoints = nullptr;
  // Makes a study's searcher; default searchers::CreateSearcher.
  SearcherFactory searcher_factory = nullptr;
  // Makes a study's trial scheduler; default searchers::CreateTrialScheduler.
  TrialSchedulerFactory trial_scheduler_factory = nullptr;
  // BackupDatabase writes only new files in this directory; empty refuses
  // every backup.
  std::string backup_dir = "";
  // Abuse limits (docs/limits.md).
  Limits limits = Limits{};
  // Threads that run studies' suggestion work (fits, new trials); 0: one
  // per core.
  int suggestion_threads = 0;
  // Owners' quotas (docs/scheduling.md); null: everyone gets the default.
  // Not owned; reloaded by its owner.
  const Quotas* quotas = nullptr;
  // Half-life of the owners' recent usage in fair share.
  absl::Duration fair_share_half_life = absl::Hours(24 * 7);
  // Preemption (docs/scheduling.md): how long a preempted trial has to
  // pause at a report before it is fenced, and how long an attempt runs
  // before it may be preempted.
  absl::Duration preempt_grace = absl::Seconds(30);
  absl::Duration preempt_min_run = absl::Seconds(60);
  // Whether an owner below its fair share may preempt trials of an owner
  // above it (equal priorities); otherwise fair share only orders dispatch.
  bool fair_share_preempt = false;
  // Told of each usage record once written (e.g. /metrics counters); called
  // under the core's lock, so it must be quick. Null: nobody.
  std::function<void(const v1::UsageRecord&)> on_usage = nullptr;
  // Observes the seconds of each searcher fit (Suggest, or a rebuild);
  // null: none. Not owned.
  metrics::Histogram* fit_seconds = nullptr;
};

class SchedulerCore {
 public:
  using WatchCallback = EventHub::Callback;
  using AcquireCallback = scheduler::AcquireCallback;
  using SuggestCallback = scheduler::SuggestCallback;

  // Loads and rebuilds every study from the store. Errors from the store
  // are returned as they are.
  static absl::StatusOr<std::unique_ptr<SchedulerCore>> Create(
      const SchedulerCoreOptions& options);
  ~SchedulerCore();

  // INVALID_ARGUMENT for a bad spec (field and reason), ALREADY_EXISTS for a
  // taken name, UNIMPLEMENTED for searchers/schedulers not built yet.
  Reply<v1::Study> CreateStudy(v1::StudySpec spec,
                               const auth::Principal& who = auth::Anonymous());
  // NOT_FOUND for an unknown study (as every per-study call below).
  Reply<v1::Study> GetStudy(const std::string& name,
                            const auth::Principal& who = auth::Anonymous());
  // The studies `who` may read, oldest first, in pages (0: 100, at most
  // 1000) after `page_token`.
  Reply<StudyPage> ListStudies(const auth::Principal& who = auth::Anonymous(),
                               int32_t page_size = 0,
                               const std::string& page_token = "");
  // Changes budgets. INVALID_ARGUMENT below the trials already created;
  // FAILED_PRECONDITION on a stopped study. Raising max_trials of a
  // COMPLETED study makes it ACTIVE again.
  Reply<v1::Study> UpdateStudy(const std::string& name, int32_t max_trials,
                               int32_t max_parallel_trials,
                               const auth::Principal& who = auth::Anonymous());
  // The same, and the priority (PERMISSION_DENIED above the caller's
  // quota's max_priority, unless an admin).
  Reply<v1::Study> UpdateStudy(const std::string& name,
                               const StudyChange& change,
                               const auth::Principal& who = auth::Anonymous());
  // Stops suggesting; PENDING and PAUSED trials become STOPPED, RUNNING ones
  // get STOP at their next report.
  Reply<v1::Study> StopStudy(const std::string& name,
                             const auth::Principal& who = auth::Anonymous());
  StatusReply DeleteStudy(const std::string& name,
                          const auth::Principal& who = auth::Anonymous());
  // Sets the note of the study or of its trial `trial` (owner or admin);
  // see StudyLifecycle::SetNote.
  Reply<v1::SetNoteResponse> SetNote(
      const std::string& name, std::optional<int64_t> trial,
      const std::string& note, const auth::Principal& who = auth::Anonymous());

  // Trials in number order; `page_token` from the previous page.
  Reply<TrialPage> ListTrials(const std::string& name,
                              const std::vector<v1::TrialState>& states,
                              int32_t page_size, const std::string& page_token,
                              const auth::Principal& who = auth::Anonymous());
  // With metric history.
  // Its history in pages by step: at most history_page_size points (0:
  // 1000, at most 10000) after the step in history_page_token; the next
  // token in *next_history_page_token (empty on the last page).
  Reply<v1::Trial> GetTrial(const std::string& name, int64_t number,
                            const auth::Principal& who = auth::Anonymous(),
                            int32_t history_page_size = 0,
                            const std::string& history_page_token = "",
                            std::string* next_history_page_token = nullptr);
  // Feasible COMPLETED trials, best objective first; with several
  // objectives, the Pareto front by crowding distance, and `front` (if
  // given) gets its hypervolume, reference point and size.
  Reply<std::vector<v1::Trial>> GetBestTrials(
      const std::string& name, int32_t count,
      const auth::Principal& who = auth::Anonymous(),
      v1::GetBestTrialsResponse* front = nullptr);
  // Configurations to run before the searcher's own, each checked against
  // the search space (owner or admin; the study must be ACTIVE). Returns
  // them with their ids; `waiting` gets the queue's length.
  Reply<std::vector<v1::QueuedTrial>> EnqueueTrials(
      const std::string& name, std::vector<v1::QueuedTrial> trials,
      const auth::Principal& who = auth::Anonymous(),
      int32_t* waiting = nullptr);
  // Queues the best `top` trials' configurations again with `seeds` new
  // seeds each (origin set), raising max_trials to fit and reopening a
  // COMPLETED study; `max_trials` gets the budget after.
  Reply<std::vector<v1::QueuedTrial>> ReevaluateTrials(
      const std::string& name, int32_t top, int32_t seeds,
      const auth::Principal& who = auth::Anonymous(),
      int32_t* max_trials = nullptr);
  static constexpr int64_t kMaxQueuedTrials = StudyLifecycle::kMaxQueuedTrials;
  // Resources used by worker trials' attempts that ended at or after
  // `since` (InfinitePast: all), summed `by` owner or study. A user sees
  // their own; admins and viewers everyone's; workers nothing.
  Reply<v1::GetUsageResponse> GetUsage(
      const std::string& by, absl::Time since,
      const auth::Principal& who = auth::Anonymous());
  // What /metrics shows of the core, read under the lock.
  struct Gauges {
    // Per study: trials by state.
    std::map<std::string, std::map<v1::TrialState, int64_t>> trials;
    std::map<v1::StudyState, int64_t> studies;
    int workers = 0;      // registered, not lost
    int64_t pending = 0;  // PENDING trials waiting for a worker
    size_t watchers = 0, events_queued = 0, suggestions_queued = 0;
  };
  Gauges ReadGauges();
  // The registered workers with the trials they run (admins and viewers).
  Reply<std::vector<v1::Worker>> ListWorkers(const auth::Principal& who);
  // PED-ANOVA over the COMPLETED trials (searchers/importance.h); the
  // trials are copied under the lock, the work is done outside it.
  Reply<searchers::ImportanceResult> GetParameterImportance(
      const std::string& name, double top_quantile,
      const auth::Principal& who = auth::Anonymous());

  // Ask: new RUNNING trials owned by `client_id`, or that client's open
  // trials if it has any. Returns fewer (or none) at max_parallel_trials;
  // done=true once the study will never suggest again. `done` is called
  // once, on the suggestion thread (or at once for bad arguments), without
  // the core's lock; UNAVAILABLE if the core shuts down first.
  void SuggestTrialsAsync(const std::string& name, int32_t count,
                          const std::string& client_id, SuggestCallback done,
                          const auth::Principal& who = auth::Anonymous());
  // The same, waiting for the answer (not from the suggestion thread).
  Reply<Suggestion> SuggestTrials(
      const std::string& name, int32_t count, const std::string& client_id,
      const auth::Principal& who = auth::Anonymous());
  // Blocks until the suggestion thread has nothing queued or running
  // (e.g. the PENDING trials of a new worker-run study exist).
  void WaitIdle();
  // Tell, during the run: durable before the decision is returned.
  // FAILED_PRECONDITION unless the trial is RUNNING; INVALID_ARGUMENT for a
  // step not after the last one or empty metrics. A report that was recorded
  // but whose decision could not be saved (UNAVAILABLE) is not recorded
  // again when retried: the retry saves and returns that decision.
  Reply<v1::Decision> ReportIntermediate(
      const std::string& name, int64_t number, int64_t step,
      const searchers::Metrics& metrics, const std::string& checkpoint,
      const auth::Principal& who = auth::Anonymous());
  // Tell, at the end: final metrics (with the objective) or an error.
  Reply<v1::Trial> CompleteTrial(
      const std::string& name, int64_t number,
      const searchers::Metrics& final_metrics, const std::string& error,
      const auth::Principal& who = auth::Anonymous());

  // Subscribes to a study's events and returns the watch id. The first
  // event `callback` gets is the SNAPSHOT (study with counts, best trial),
  // ahead of every later change; then every event in the order of the
  // changes. A STUDY_FINISHED event is the last one (right after the
  // snapshot for a study that is over). `callback` runs without the core's
  // lock, on whichever thread delivers (one at a time); it may be slow, but
  // holds up the other watchers meanwhile.
  Reply<int64_t> Watch(const std::string& name, WatchCallback callback,
                       const auth::Principal& who = auth::Anonymous());
  // Once it returns, the callback is not running and will not run again.
  void Unwatch(int64_t watch_id);

  // Workers. Every call from a worker renews its lease.
  // Worker calls are for the worker role (and admins); a worker id speaks
  // only for the principal that registered it (PERMISSION_DENIED).
  Reply<v1::RegisterWorkerResponse> RegisterWorker(
      const std::string& host, const v1::WorkerResources& resources,
      const auth::Principal& who = auth::Anonymous());
  // NOT_FOUND for an unknown or lost worker: it must register again.
  // Trials it is assigned but does not list go back to the queue.
  Reply<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request,
      const auth::Principal& who = auth::Anonymous());
  // Calls `done` exactly once, without the core's lock: at once with a
  // trial (or an error), else when a fitting trial becomes PENDING, or with
  // nullopt once `wait` has passed. `alive` is asked (under the lock: it
  // must be cheap) before a parked call is given a trial.
  void AcquireTrial(const std::string& worker_id, int32_t free_gpus,
                    absl::Duration wait, std::function<bool()> alive,
                    AcquireCallback done,
                    const auth::Principal& who = auth::Anonymous());
  // FAILED_PRECONDITION when the attempt is stale (the trial was given to
  // another attempt or worker); the worker must then kill the process.
  // A step already recorded (a resumed attempt replaying) is acknowledged
  // without being written again.
  // Both need the attempt's lease token (FAILED_PRECONDITION otherwise).
  Reply<v1::Decision> ReportProgress(
      const v1::ReportProgressRequest& request,
      const auth::Principal& who = auth::Anonymous());
  StatusReply FinishTrial(const v1::FinishTrialRequest& request,
                          const auth::Principal& who = auth::Anonymous());

  // Checkpoint transfer (CheckpointService; docs/checkpoint-transfer.md).
  // OK when `lease`'s attempt may upload a checkpoint `id`: checked as a
  // report is (worker role, its worker id, the attempt and its lease
  // token), and `id` must be the trial's own. Codes as ReportProgress.
  // With `bytes` >= 0, the study's owner must also have room for a
  // checkpoint of that size (RESOURCE_EXHAUSTED naming the quota).
  absl::Status CheckUploader(const v1::TrialLease& lease, const std::string& id,
                             const auth::Principal& who = auth::Anonymous(),
                             int64_t bytes = -1);
  // The checkpoint `id` that `lease`'s attempt reported at `step` (with
  // checkpoint_uploading) is durable in the store: it becomes the trial's
  // restore point (true) unless the trial restores from a later step
  // (false). FAILED_PRECONDITION when the attempt is stale; UNAVAILABLE
  // while the step is not reported yet (retry after the report).
  Reply<bool> CheckpointUploaded(
      const v1::TrialLease& lease, int64_t step, const std::string& id,
      const auth::Principal& who = auth::Anonymous());
  // OK when `who` may download checkpoints of `study`: whoever may read
  // the study, or a worker (the principal that registered it) running one
  // of its trials. NOT_FOUND or PERMISSION_DENIED.
  absl::Status CheckCheckpointReader(
      const std::string& study, const auth::Principal& who = auth::Anonymous());

  // Writes a consistent copy of the database to `path` on this machine
  // while the core goes on serving; `done` gets its size in bytes. Codes as
  // StudyStore::Backup, plus ABORTED while another backup runs and
  // UNAVAILABLE once the core shuts down. `done` is called once, without the
  // core's lock: at once for those two, else on a thread of the backup's
  // own. Not to be called from `done`.
  // Admin only. `name` is a file name in the backup directory that must not
  // exist yet (INVALID_ARGUMENT for anything else, ALREADY_EXISTS if it
  // does); `done` gets the copy's absolute path and size.
  void BackupDatabaseAsync(
      const std::string& name,
      std::function<void(absl::StatusOr<std::pair<std::string, int64_t>>)> done,
      const auth::Principal& who = auth::Anonymous());
  // The same, waiting for the answer.
  absl::StatusOr<std::pair<std::string, int64_t>> BackupDatabase(
      const std::string& name, const auth::Principal& who = auth::Anonymous());
  // The audit log, newest first (admin only).
  Reply<AuditPage> ListAuditEvents(
      const std::string& study, int32_t page_size,
      const std::string& page_token,
      const auth::Principal& who = auth::Anonymous());

  // Calls `done` once every write up to `ticket` is durable (OK), or once
  // one of them is lost (UNAVAILABLE; the core has then reloaded from the
  // store). `done` may run at once, on the caller's thread, or on the
  // store's committer thread.
  void WhenDurable(WriteTicket ticket, std::function<void(absl::Status)> done);

  const Limits& limits() const { return options_.limits; }

  // Expires long polls and worker leases; the background thread calls it.
  void Tick();
  // Ends every parked long poll (empty), parks no more and stops the
  // suggestion thread (queued suggestions answer UNAVAILABLE); for
  // shutdown.
  void StopWaiting();

 private:
  // Holds mu_. On release it applies the outbox's under-lock effects,
  // notes the write ticket (into *ticket, if given), releases the lock,
  // then answers parked calls and delivers events.
  class ABSL_SCOPED_LOCKABLE Lock {
   public:
    explicit Lock(SchedulerCore* core, WriteTicket* ticket = nullptr)
        ABSL_EXCLUSIVE_LOCK_FUNCTION(core->mu_);
    ~Lock() ABSL_UNLOCK_FUNCTION();

   private:
    SchedulerCore* core_;
    WriteTicket* ticket_;
  };
  // Runs `body` under the lock and returns its result with the ticket.
  template <typename T, typename F>
  Reply<T> Locked(F&& body) {
    WriteTicket ticket;
    absl::StatusOr<T> result = [&]() -> absl::StatusOr<T> {
      Lock lock(this, &ticket);
      return body();
    }();
    return Reply<T>(std::move(result), ticket);
  }

  explicit SchedulerCore(const SchedulerCoreOptions& options);
  WriteTicket Written() const;
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the store lost writes: drops every study and loads them again.
  void Reload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The outbox's effects that run under the lock.
  void ApplyEffects() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DispatchNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requeues preempted trials whose grace is over, and marks new ones.
  void PreemptNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the trial the placer chooses for `worker_id`; nullopt if none.
  absl::StatusOr<std::optional<Assignment>> AssignTo(
      const std::string& worker_id, int32_t free_gpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoseWorker(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The study, if `who` may read it (kRead) or change it (kWrite); NOT_FOUND
  // or PERMISSION_DENIED.
  enum class Access { kRead, kWrite };
  absl::StatusOr<StudyEntry*> FindFor(const auth::Principal& who,
                                      const std::string& name, Access access)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PERMISSION_DENIED unless `who` is a worker (or an admin) and, for
  // `worker_id`, the principal that registered it.
  absl::Status CheckWorker(const auth::Principal& who,
                           const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  storage::StudyStore* const store_;
  storage::Durability* const durability_;  // null: durable on return
  storage::CheckpointStore* const checkpoints_;
  const SchedulerCoreOptions options_;
  RealClock real_clock_;
  const Clock* const clock_;
  const StudyLoader loader_;
  std::thread ticker_;

  absl::Mutex mu_;
  Outbox outbox_ ABSL_GUARDED_BY(mu_);
  StudyRegistry studies_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  Dispatcher dispatcher_ ABSL_GUARDED_BY(mu_);
  CheckpointRetention retention_ ABSL_GUARDED_BY(mu_);
  CheckpointQuota quota_ ABSL_GUARDED_BY(mu_);
  Preemptions preemptions_ ABSL_GUARDED_BY(mu_);
  TrialLifecycle lifecycle_ ABSL_GUARDED_BY(mu_);
  Placer placer_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  StudyLifecycle study_lifecycle_ ABSL_GUARDED_BY(mu_);

  EventHub events_;
  Backups backups_;
  // Last: its threads run tasks that use everything above.
  TrialMaker maker_;
};

}  // namespace dial::scheduler
