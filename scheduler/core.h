// SchedulerCore: studies and the trial lifecycle, independent of gRPC. It
// owns each study's searcher and trial scheduler, mirrors every trial in
// memory (the decision path never scans the database) and writes every
// change through the StudyStore before answering, so an acknowledged change
// is durable. On Create it rebuilds all of this from the store, so a
// restarted scheduler resumes every study where it was.
//
// Thread-safe: one mutex guards the in-memory state. It is held across
// StudyStore calls on purpose: the store is the source of truth and must see
// changes in the same order as memory. Memory changes only after the store
// write it mirrors succeeded, so when the store fails (UNAVAILABLE: disk
// full, I/O error) the call fails with nothing changed and the same call
// succeeds once the store works again; background work that failed (topping
// up a worker-run study, finishing a study) is retried later. The store never
// calls back into the core, and watch callbacks must only enqueue (they run
// under the lock). Searchers run on one suggestion thread of the core's own,
// without that lock, so a slow model fit never blocks reports, RPC threads or
// leases.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "dial/v1/service.pb.h"
#include "searchers/searcher.h"
#include "searchers/trial_scheduler.h"
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
  std::function<absl::StatusOr<std::unique_ptr<searchers::Searcher>>(
      const v1::StudySpec&)>
      searcher_factory = nullptr;
  // Makes a study's trial scheduler; default searchers::CreateTrialScheduler.
  std::function<absl::StatusOr<std::unique_ptr<searchers::TrialScheduler>>(
      const v1::StudySpec&)>
      trial_scheduler_factory = nullptr;
};

// A trial handed to a worker.
struct Assignment {
  v1::Trial trial;
  v1::TrialTemplate run;
  std::string restore_checkpoint;  // empty: start from scratch
  int64_t start_step = 0;
  int32_t attempt = 0;
};

struct TrialPage {
  std::vector<v1::Trial> trials;
  std::string next_page_token;
};

struct Suggestion {
  std::vector<v1::Trial> trials;
  bool done = false;
  v1::StudyState study_state = v1::STUDY_STATE_UNSPECIFIED;
};

class SchedulerCore {
 public:
  using WatchCallback = std::function<void(const v1::StudyEvent&)>;
  using AcquireCallback =
      std::function<void(absl::StatusOr<std::optional<Assignment>>)>;

  // Loads and rebuilds every study from the store. Errors from the store
  // are returned as they are.
  static absl::StatusOr<std::unique_ptr<SchedulerCore>> Create(
      const SchedulerCoreOptions& options);

  // INVALID_ARGUMENT for a bad spec (field and reason), ALREADY_EXISTS for a
  // taken name, UNIMPLEMENTED for searchers/schedulers not built yet.
  absl::StatusOr<v1::Study> CreateStudy(v1::StudySpec spec);
  // NOT_FOUND for an unknown study (as every per-study call below).
  absl::StatusOr<v1::Study> GetStudy(const std::string& name);
  absl::StatusOr<std::vector<v1::Study>> ListStudies();
  // Changes budgets. INVALID_ARGUMENT below the trials already created;
  // FAILED_PRECONDITION on a stopped study. Raising max_trials of a
  // COMPLETED study makes it ACTIVE again.
  absl::StatusOr<v1::Study> UpdateStudy(const std::string& name,
                                        int32_t max_trials,
                                        int32_t max_parallel_trials);
  // Stops suggesting; PENDING and PAUSED trials become STOPPED, RUNNING ones
  // get STOP at their next report.
  absl::StatusOr<v1::Study> StopStudy(const std::string& name);
  absl::Status DeleteStudy(const std::string& name);

  // Trials in number order; `page_token` from the previous page.
  absl::StatusOr<TrialPage> ListTrials(
      const std::string& name, const std::vector<v1::TrialState>& states,
      int32_t page_size, const std::string& page_token);
  // With metric history.
  absl::StatusOr<v1::Trial> GetTrial(const std::string& name, int64_t number);
  // COMPLETED trials, best objective first.
  absl::StatusOr<std::vector<v1::Trial>> GetBestTrials(const std::string& name,
                                                       int32_t count);

  // Ask: new RUNNING trials owned by `client_id`, or that client's open
  // trials if it has any. Returns fewer (or none) at max_parallel_trials;
  // done=true once the study will never suggest again. `done` is called
  // once, on the suggestion thread (or at once for bad arguments), without
  // the core's lock; UNAVAILABLE if the core shuts down first.
  void SuggestTrialsAsync(const std::string& name, int32_t count,
                          const std::string& client_id,
                          std::function<void(absl::StatusOr<Suggestion>)> done);
  // The same, waiting for the answer (not from the suggestion thread).
  absl::StatusOr<Suggestion> SuggestTrials(const std::string& name,
                                           int32_t count,
                                           const std::string& client_id);
  // Blocks until the suggestion thread has nothing queued or running
  // (e.g. the PENDING trials of a new worker-run study exist).
  void WaitIdle();
  // Tell, during the run: durable before the decision is returned.
  // FAILED_PRECONDITION unless the trial is RUNNING; INVALID_ARGUMENT for a
  // step not after the last one or empty metrics. A report that was recorded
  // but whose decision could not be saved (UNAVAILABLE) is not recorded
  // again when retried: the retry saves and returns that decision.
  absl::StatusOr<v1::Decision> ReportIntermediate(
      const std::string& name, int64_t number, int64_t step,
      const searchers::Metrics& metrics, const std::string& checkpoint);
  // Tell, at the end: final metrics (with the objective) or an error.
  absl::StatusOr<v1::Trial> CompleteTrial(
      const std::string& name, int64_t number,
      const searchers::Metrics& final_metrics, const std::string& error);

  // Subscribes to a study's events. Returns the SNAPSHOT event to send
  // first and sets *watch_id. The callback runs under the core's lock: it
  // must only enqueue. A STUDY_FINISHED event is the last one.
  absl::StatusOr<v1::StudyEvent> Watch(const std::string& name,
                                       WatchCallback callback,
                                       int64_t* watch_id);
  void Unwatch(int64_t watch_id);

  // Workers. Every call from a worker renews its lease.
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const std::string& host, const v1::WorkerResources& resources);
  // NOT_FOUND for an unknown or lost worker: it must register again.
  // Trials it is assigned but does not list go back to the queue.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);
  // Calls `done` exactly once: at once with a trial (or an error), else when
  // a fitting trial becomes PENDING, or with nullopt once `wait` has passed.
  // `alive` is asked before a parked call is given a trial. `done` runs under
  // the core's lock: it must only finish the RPC.
  void AcquireTrial(const std::string& worker_id, int32_t free_gpus,
                    absl::Duration wait, std::function<bool()> alive,
                    AcquireCallback done);
  // FAILED_PRECONDITION when the attempt is stale (the trial was given to
  // another attempt or worker); the worker must then kill the process.
  // A step already recorded (a resumed attempt replaying) is acknowledged
  // without being written again.
  absl::StatusOr<v1::Decision> ReportProgress(
      const v1::ReportProgressRequest& request);
  absl::Status FinishTrial(const v1::FinishTrialRequest& request);

  // Writes a consistent copy of the database to `path` on this machine
  // while the core goes on serving; `done` gets its size in bytes. Codes as
  // StudyStore::Backup, plus ABORTED while another backup runs and
  // UNAVAILABLE once the core shuts down. `done` is called once, without the
  // core's lock: at once for those two, else on a thread of the backup's
  // own. Not to be called from `done`.
  void BackupDatabaseAsync(const std::string& path,
                           std::function<void(absl::StatusOr<int64_t>)> done);
  // The same, waiting for the answer.
  absl::StatusOr<int64_t> BackupDatabase(const std::string& path);

  // Calls `done` once every change that the calling thread's latest call
  // made or saw is durable (OK), or once one of them is lost (UNAVAILABLE;
  // the core has then reloaded from the store). "Latest call": the last
  // one to release the core's lock on this thread, or, inside an
  // AcquireCallback or a SuggestTrialsAsync `done`, the call answered. Every
  // answer to a client goes through it, so nothing is acknowledged before
  // its commit (group commit: see StudyStore::WhenDurable). `done` may run
  // at once, on the caller's thread, or on the store's committer thread.
  void WhenDurable(std::function<void(absl::Status)> done);
  // Forgets what an earlier call on this thread noted (a Watch or a backup
  // answers without WhenDurable), so that a call that fails before taking
  // the lock waits for nothing rather than for another call's writes.
  void ForgetWritten();

  // Expires long polls and worker leases; the background thread calls it.
  void Tick();
  // Ends every parked long poll (empty) and parks no more; for shutdown.
  void StopWaiting();
  ~SchedulerCore();

 private:
  struct StudyEntry {
    v1::Study study;
    // Used on the suggestion thread only (and before it starts).
    std::unique_ptr<searchers::Searcher> searcher;
    // Finished trials the searcher has not seen yet, in finish order.
    std::vector<v1::Trial> unobserved;
    // Reports for searchers that fit on rung results (BOHB), in arrival
    // order, not yet handed over.
    struct Report {
      v1::Trial trial;
      int64_t step;
      searchers::Metrics metrics;
    };
    bool wants_reports = false;
    std::vector<Report> unobserved_reports;
    bool fill_queued = false;
    // The last top-up or finish check failed on the store; the next
    // AcquireTrial queues it again.
    bool fill_failed = false;
    bool deleted = false;
    bool stale = false;  // dropped by Reload
    std::unique_ptr<searchers::TrialScheduler> trial_scheduler;
    std::map<int64_t, v1::Trial> trials;
    // Indexes over `trials` that Mirror keeps, so no call scans them all:
    // open and PENDING trial numbers, counts by state, and COMPLETED trials
    // best first as (value with the sign that makes lower better, number).
    std::set<int64_t> open, pending;
    std::map<v1::TrialState, int64_t> state_counts;
    std::set<std::pair<double, int64_t>> ranked;
    std::map<std::string, std::set<int64_t>> open_by_client;
    // Retention: trial -> checkpoint step -> objective (higher is better),
    // and checkpoint ids pinned by the trial whose exploit copies them.
    std::map<int64_t, std::map<int64_t, double>> checkpoint_scores;
    std::map<std::string, std::set<int64_t>> pins;
    // The decision given for each trial's latest report, returned again
    // when a worker retries that report.
    std::map<int64_t, std::pair<int64_t, v1::Decision>> last_decision;
    // Decisions whose report is recorded but whose effect (STOP, PAUSE,
    // EXPLOIT) failed to save, by trial: (step, decision).
    std::map<int64_t, std::pair<int64_t, v1::Decision>> unsaved_decisions;
    int open_trials = 0;     // PENDING, RUNNING or PAUSED
    int active_trials = 0;   // PENDING or RUNNING: what max_parallel counts
    bool exhausted = false;  // the searcher has no more points
  };
  struct Watcher {
    std::string study;
    WatchCallback callback;
  };
  struct WorkerEntry {
    v1::Worker worker;
    absl::Time last_seen;
  };
  struct Task {
    std::function<void()> run;
    std::function<void()> cancel;  // instead of run, at shutdown
  };
  struct Waiter {
    std::string worker_id;
    int32_t free_gpus;
    absl::Time deadline;
    std::function<bool()> alive;
    AcquireCallback done;
  };

  // Holds mu_. On release it notes the store's sequence number for this
  // thread, so WhenDurable waits for exactly what the call wrote or read.
  class ABSL_SCOPED_LOCKABLE Lock {
   public:
    explicit Lock(SchedulerCore* core) ABSL_EXCLUSIVE_LOCK_FUNCTION(core->mu_)
        : core_(core) {
      core_->mu_.Lock();
    }
    ~Lock() ABSL_UNLOCK_FUNCTION() {
      core_->NoteWritten();
      core_->mu_.Unlock();
    }

   private:
    SchedulerCore* core_;
  };

  explicit SchedulerCore(const SchedulerCoreOptions& options);
  void NoteWritten() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls an AcquireCallback (under the lock), noting the sequence number
  // its answer waits for.
  void Answer(const AcquireCallback& done,
              absl::StatusOr<std::optional<Assignment>> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why queued work must leave `entry` alone: NOT_FOUND once DeleteStudy
  // dropped it, UNAVAILABLE once a Reload replaced it; else OK.
  absl::Status Gone(const StudyEntry& entry) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the store lost writes: drops every study and loads them again.
  void Reload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<StudyEntry*> Find(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The suggestion thread's loop, and its queue.
  void RunTasks();
  void Enqueue(Task task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Idle() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return tasks_.empty() && !executing_;
  }
  bool HasWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !tasks_.empty() || stopping_;
  }
  // Asks the suggestion thread to top up a worker-run study's PENDING
  // trials (see FillPending).
  void ScheduleFill(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Trial*> FindTrial(StudyEntry& entry, int64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists `trial` and mirrors it in memory (open counts, client index).
  absl::Status SaveTrial(StudyEntry& entry, const v1::Trial& trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Mirror(StudyEntry& entry, v1::Trial trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the trial's checkpoints that the study's policy no longer keeps,
  // on the suggestion thread, once the caller's latest write is durable.
  void Retain(StudyEntry& entry, int64_t trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveStudyState(StudyEntry& entry, v1::StudyState state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaybeFinish(StudyEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MaybeFinish after a change that is already durable: a store error is
  // logged and the check retried later instead of failing that change.
  void FinishIfDone(StudyEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Finalize(StudyEntry& entry, v1::Trial trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the budget lets one more trial start now.
  bool CanCreate(const StudyEntry& entry) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Suggestion thread only: a new trial from the searcher (run without the
  // lock), saved; nullopt when the space is exhausted or the budget closed
  // meanwhile.
  absl::StatusOr<std::optional<v1::Trial>> NewTrial(
      const std::shared_ptr<StudyEntry>& entry, v1::TrialState state,
      const std::string& client_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Suggestion thread only: worker-run studies keep max_parallel_trials
  // PENDING or running trials.
  void FillPending(const std::shared_ptr<StudyEntry>& entry)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Requeue(StudyEntry& entry, v1::Trial trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<Assignment>> Assign(const std::string& worker_id,
                                                   int32_t free_gpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands PENDING trials to parked AcquireTrial calls.
  void Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Decision> RecordReport(StudyEntry& entry, v1::Trial trial,
                                            int64_t step,
                                            const searchers::Metrics& metrics,
                                            const std::string& checkpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves what `decision`, given for `trial`'s report at `step`, changes
  // (STOP, PAUSE, EXPLOIT) and emits the event. `trial` is as recorded with
  // that report.
  absl::Status ApplyDecision(StudyEntry& entry, v1::Trial trial, int64_t step,
                             const v1::Decision& decision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For a retried report: if the effect of the decision given to trial
  // `number`'s report at `step` could not be saved, saves it now and returns
  // that decision; nullopt if there is none.
  absl::StatusOr<std::optional<v1::Decision>> SaveUnsavedDecision(
      StudyEntry& entry, int64_t number, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trial of a worker call, if `attempt` of `worker_id` still owns it.
  absl::StatusOr<v1::Trial*> Fence(StudyEntry& entry,
                                   const std::string& worker_id, int64_t number,
                                   int32_t attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Touch(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoseWorker(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Study WithCounts(const StudyEntry& entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const v1::Trial* Best(const StudyEntry& entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(const StudyEntry& entry, v1::StudyEvent::Kind kind,
            const v1::Trial* trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  google::protobuf::Timestamp Now() const;

  storage::StudyStore* store_;
  storage::CheckpointStore* checkpoints_;
  std::function<absl::StatusOr<std::unique_ptr<searchers::Searcher>>(
      const v1::StudySpec&)>
      searcher_factory_;
  std::function<absl::StatusOr<std::unique_ptr<searchers::TrialScheduler>>(
      const v1::StudySpec&)>
      trial_scheduler_factory_;
  const Clock* clock_;
  RealClock real_clock_;
  const absl::Duration worker_lease_;
  std::thread ticker_;

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<StudyEntry>> studies_
      ABSL_GUARDED_BY(mu_);
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool executing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread suggester_;
  std::map<int64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  int64_t next_watch_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // When each running worker trial was handed out (study, number).
  std::map<std::pair<std::string, int64_t>, absl::Time> dispatched_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool reload_needed_ ABSL_GUARDED_BY(mu_) = false;  // a Reload failed
  // The latest backup's thread; joined by the next backup or at the end.
  std::thread backup_thread_ ABSL_GUARDED_BY(mu_);
  bool backup_running_ ABSL_GUARDED_BY(mu_) = false;
};

// Open trials still hold a place in max_parallel_trials.
bool IsOpen(v1::TrialState state);
bool IsFinal(v1::TrialState state);

}  // namespace dial::scheduler
