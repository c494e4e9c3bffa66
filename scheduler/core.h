// SchedulerCore: studies and the trial lifecycle, independent of gRPC. It
// owns each study's searcher and trial scheduler, mirrors every trial in
// memory (the decision path never scans the database) and writes every
// change through the StudyStore before answering, so an acknowledged change
// is durable. On Create it rebuilds all of this from the store, so a
// restarted scheduler resumes every study where it was.
//
// Thread-safe: one mutex guards the in-memory state. It is held across
// StudyStore calls on purpose: the store is the source of truth and must see
// changes in the same order as memory. The store never calls back into the
// core, and watch callbacks must only enqueue (they run under the lock).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "dial/v1/service.pb.h"
#include "searchers/searcher.h"
#include "searchers/trial_scheduler.h"
#include "storage/study_store.h"

namespace dial::scheduler {

struct SchedulerCoreOptions {
  storage::StudyStore* store = nullptr;  // required, not owned
  const Clock* clock = nullptr;          // nullptr: real time
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
  absl::StatusOr<TrialPage> ListTrials(const std::string& name,
                                       const std::vector<v1::TrialState>& states,
                                       int32_t page_size,
                                       const std::string& page_token);
  // With metric history.
  absl::StatusOr<v1::Trial> GetTrial(const std::string& name, int64_t number);
  // COMPLETED trials, best objective first.
  absl::StatusOr<std::vector<v1::Trial>> GetBestTrials(const std::string& name,
                                                       int32_t count);

  // Ask: new RUNNING trials owned by `client_id`, or that client's open
  // trials if it has any. Returns fewer (or none) at max_parallel_trials;
  // done=true once the study will never suggest again.
  absl::StatusOr<Suggestion> SuggestTrials(const std::string& name,
                                           int32_t count,
                                           const std::string& client_id);
  // Tell, during the run: durable before the decision is returned.
  // FAILED_PRECONDITION unless the trial is RUNNING; INVALID_ARGUMENT for a
  // step not after the last one or empty metrics.
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

 private:
  struct StudyEntry {
    v1::Study study;
    std::unique_ptr<searchers::Searcher> searcher;
    std::unique_ptr<searchers::TrialScheduler> trial_scheduler;
    std::map<int64_t, v1::Trial> trials;
    std::map<std::string, std::set<int64_t>> open_by_client;
    int open_trials = 0;
    bool exhausted = false;  // the searcher has no more points
  };
  struct Watcher {
    std::string study;
    WatchCallback callback;
  };

  explicit SchedulerCore(const SchedulerCoreOptions& options);
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<StudyEntry*> Find(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Trial*> FindTrial(StudyEntry& entry, int64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists `trial` and mirrors it in memory (open counts, client index).
  absl::Status SaveTrial(StudyEntry& entry, const v1::Trial& trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Mirror(StudyEntry& entry, const v1::Trial& trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveStudyState(StudyEntry& entry, v1::StudyState state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaybeFinish(StudyEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FinishTrial(StudyEntry& entry, v1::Trial trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Study WithCounts(const StudyEntry& entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const v1::Trial* Best(const StudyEntry& entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(const StudyEntry& entry, v1::StudyEvent::Kind kind,
            const v1::Trial* trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  google::protobuf::Timestamp Now() const;

  storage::StudyStore* store_;
  const Clock* clock_;
  RealClock real_clock_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<StudyEntry>> studies_
      ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  int64_t next_watch_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Open trials still hold a place in max_parallel_trials.
bool IsOpen(v1::TrialState state);
bool IsFinal(v1::TrialState state);

}  // namespace dial::scheduler
