// StudyEntry: one study as the core holds it in memory: the study, its
// searcher and trial scheduler, every trial, and indexes over the trials so
// that no call scans them all.
//
// The state is closed. What mirrors the store (the study, its trials and
// the indexes over them) changes only through Apply and Mirror, and those
// take a Stored value, which only a successful store write (Save, below) or
// a load makes: memory can follow the disk, never run ahead of it. The rest
// is memory's own (what the searcher has yet to see, decisions given,
// uploads under way, the flags) and changes through named operations.
//
// Not thread-safe: the core's lock guards every entry. The searcher is
// used on the study's executor only (and before it starts).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/service.pb.h"
#include "searchers/pareto.h"
#include "searchers/searcher.h"
#include "searchers/space.h"
#include "searchers/trial_scheduler.h"
#include "storage/study_store.h"

namespace dial::scheduler {

// Open trials still hold a place in max_parallel_trials.
bool IsOpen(v1::TrialState state);
bool IsFinal(v1::TrialState state);

// A study or trial as the store now holds it. Save makes one from a write
// that succeeded; StudyLoader from what it read.
template <typename T>
class Stored {
 public:
  const T& get() const { return value_; }
  const T* operator->() const { return &value_; }

 private:
  explicit Stored(T value) : value_(std::move(value)) {}
  T value_;

  friend class Save;
  friend class StudyLoader;
  friend class StudyEntry;
};

// The writes that make Stored values. Errors of the store as they are.
class Save {
 public:
  static absl::StatusOr<Stored<v1::Study>> NewStudy(storage::StudyStore& store,
                                                    v1::Study study);
  static absl::StatusOr<Stored<v1::Study>> Study(storage::StudyStore& store,
                                                 v1::Study study);
  static absl::StatusOr<Stored<v1::Trial>> Trial(storage::StudyStore& store,
                                                 v1::Trial trial);
  // A report of RUNNING `trial` (last_step set to the point's step).
  static absl::StatusOr<Stored<v1::Trial>> Report(storage::StudyStore& store,
                                                  v1::Trial trial,
                                                  const v1::MetricPoint& point);
};

class StudyEntry {
 public:
  // Several objectives: the Pareto front of the feasible COMPLETED trials
  // (trial numbers, by crowding distance: each objective's extremes
  // first), its hypervolume and the reference point (in the objectives'
  // own units). Cached until a ranked trial changes.
  struct Front {
    std::vector<int64_t> trials;
    double hypervolume = 0;
    std::vector<double> reference;
  };
  // A report for searchers that fit on rung results (BOHB).
  struct Report {
    v1::Trial trial;
    int64_t step;
    searchers::Metrics metrics;
  };
  // What the searcher has not seen yet: finished trials in finish order,
  // and (for WantsReports searchers) reports in arrival order.
  struct Observations {
    std::vector<v1::Trial> trials;
    std::vector<Report> reports;
  };
  // A checkpoint reported while still uploading (checkpoint transfer): its
  // id, its retention score (none for a checkpoint that is not the
  // trainer's) and the worker uploading it.
  struct UploadingCheckpoint {
    std::string id;
    std::optional<double> score;
    std::string worker_id;
  };
  using Decided = std::pair<int64_t, v1::Decision>;  // (step, decision)

  // The study as stored, with the searcher and trial scheduler made for
  // it. Its prior trials (warm start) move to priors(): answers and study
  // writes never carry them.
  StudyEntry(Stored<v1::Study> study,
             std::unique_ptr<searchers::Searcher> searcher,
             std::unique_ptr<searchers::TrialScheduler> trial_scheduler);

  // --- What mirrors the store.
  const v1::Study& study() const { return study_; }
  const std::string& name() const { return study_.name(); }
  // Every trial, without metric history.
  const std::map<int64_t, v1::Trial>& trials() const { return trials_; }
  // Indexes over trials(): open and PENDING trial numbers, counts by
  // state, open trials by ask/tell client, and feasible COMPLETED trials
  // best first as (value with the sign that makes lower better, number;
  // the first objective's, with several).
  const std::set<int64_t>& open() const { return open_; }
  const std::set<int64_t>& pending() const { return pending_; }
  const std::map<v1::TrialState, int64_t>& state_counts() const {
    return state_counts_;
  }
  const std::map<std::string, std::set<int64_t>>& open_by_client() const {
    return open_by_client_;
  }
  const std::set<std::pair<double, int64_t>>& ranked() const { return ranked_; }
  // Re-evaluations: origin trial -> its COMPLETED re-evaluations' objective
  // values, by trial number. An origin ranks by the mean over its runs;
  // re-evaluations themselves are not ranked.
  const std::map<int64_t, std::map<int64_t, double>>& reruns() const {
    return reruns_;
  }
  int open_trials() const { return open_trials_; }  // PENDING/RUNNING/PAUSED
  int active_trials() const { return active_trials_; }  // PENDING or RUNNING
  // Warm start: the searcher's prior (in the store since creation).
  const google::protobuf::RepeatedPtrField<v1::Trial>& priors() const {
    return priors_;
  }
  // The stored study becomes this one's. A change of budget clears
  // exhausted(): the searcher is asked again.
  void Apply(Stored<v1::Study> study);
  // The stored trial (metric history dropped) and the indexes.
  void Mirror(Stored<v1::Trial> trial);
  // The queued configuration `queue_id` became a trial: off the queue in
  // memory only. The stored queue keeps it until the study is next
  // written; a load drops what a trial's queue_id covers.
  void Dequeue(int64_t queue_id);

  // --- Derived views.
  // Whether the study's trials run on workers (not ask/tell).
  bool worker_run() const {
    return study_.spec().trial().run_case() != v1::TrialTemplate::RUN_NOT_SET;
  }
  // The study with its trial counts filled in.
  v1::Study WithCounts() const;
  // The best feasible COMPLETED trial; null if none. With several
  // objectives, the first of ParetoFront().
  const v1::Trial* Best() const;
  const Front& ParetoFront() const;
  // A re-evaluated trial's runs (itself and its COMPLETED re-evaluations):
  // count, mean and sample standard deviation; nullopt if it has none.
  std::optional<v1::SeedRuns> Runs(int64_t number) const;
  // Whether the budget lets one more trial start now.
  bool CanCreate() const;
  // The search space, built once with the entry (a study's space never
  // changes); the error of an invalid one.
  absl::StatusOr<const searchers::SearchSpace*> space() const;

  // --- The searcher's side (its executor).
  searchers::Searcher& searcher() { return *searcher_; }
  // A searcher rebuilt for a changed spec (its budget); it is asked anew
  // (exhausted() is cleared).
  void ReplaceSearcher(std::unique_ptr<searchers::Searcher> searcher);
  searchers::TrialScheduler& trial_scheduler() { return *trial_scheduler_; }
  // A finished trial (or a report) for the searcher, later.
  void Observe(const v1::Trial& finished);
  void ObserveReport(const v1::Trial& trial, int64_t step,
                     const searchers::Metrics& metrics);
  Observations TakeObservations();
  const Observations& observations() const { return unobserved_; }
  // The searcher has no more points (until the budget changes).
  bool exhausted() const { return exhausted_; }
  void MarkExhausted() { exhausted_ = true; }

  // --- Decisions given to reports (the trial lifecycle's).
  // The decision given to each trial's latest report, returned again when
  // that report is retried.
  void RememberDecision(int64_t trial, int64_t step,
                        const v1::Decision& decision);
  const Decided* LastDecision(int64_t trial) const;
  // A new attempt starts: what an earlier attempt's reports were answered
  // is not the answer to the same steps reported again.
  void ForgetDecision(int64_t trial) { last_decision_.erase(trial); }
  // A decision whose report is recorded but whose effect (STOP, PAUSE,
  // EXPLOIT) failed to save; the report's retry saves it.
  void LeaveUnsaved(int64_t trial, int64_t step, const v1::Decision& decision);
  const Decided* Unsaved(int64_t trial) const;
  void ForgetUnsaved(int64_t trial) { unsaved_decisions_.erase(trial); }

  // --- Checkpoints still uploading, by (trial, step), until CommitUpload
  // makes them durable or the attempt finishes or its worker is lost. A
  // trial with one is not dispatched again (it would resume from an older
  // checkpoint). At most a few per trial.
  // Keeps the latest 8 of a trial (uploads are coalesced: older ones may
  // never come).
  void AddUpload(int64_t trial, int64_t step, UploadingCheckpoint upload);
  const UploadingCheckpoint* FindUpload(int64_t trial, int64_t step) const;
  bool Uploading(int64_t trial) const;
  // Forgets trial `trial`'s uploads up to `step` (all by default).
  void ForgetUploads(int64_t trial, int64_t step = INT64_MAX);
  // Forgets the uploads of worker `worker_id` (lost: they never come).
  void ForgetUploadsOf(const std::string& worker_id);

  // --- Top-ups of worker-run studies' PENDING trials (the trial maker's).
  // Whether a top-up is to be queued now (none is queued yet).
  bool QueueFill();
  void FillStarted() { fill_queued_ = false; }
  // The last top-up or finish check failed on the store; the next
  // AcquireTrial queues it again (TakeFillFailed).
  void FillFailed() { fill_failed_ = true; }
  bool TakeFillFailed() { return std::exchange(fill_failed_, false); }

  // --- Workers that refused the study's trials by their own policy
  // (FinishTrialRequest.refused): worker id -> the reason it gave. Memory
  // only: after a restart a worker refuses once more, at no failure.
  void RefusedBy(const std::string& worker_id, std::string reason) {
    refusals_[worker_id] = std::move(reason);
  }
  const std::map<std::string, std::string>& refusals() const {
    return refusals_;
  }
  void ForgetRefusalsOf(const std::string& worker_id) {
    refusals_.erase(worker_id);
  }

  // --- Leaving the registry (StudyRegistry). Work queued for a dropped
  // entry leaves it alone.
  void Drop(bool stale) {
    deleted_ = true;
    stale_ = stale_ || stale;
  }
  bool deleted() const { return deleted_; }
  bool stale() const { return stale_; }  // dropped by a reload

 private:
  v1::Study study_;
  std::map<int64_t, v1::Trial> trials_;
  std::set<int64_t> open_, pending_;
  std::map<v1::TrialState, int64_t> state_counts_;
  std::set<std::pair<double, int64_t>> ranked_;
  std::map<int64_t, std::map<int64_t, double>> reruns_;
  std::map<std::string, std::set<int64_t>> open_by_client_;
  int open_trials_ = 0;
  int active_trials_ = 0;
  google::protobuf::RepeatedPtrField<v1::Trial> priors_;
  mutable std::optional<Front> front_;  // ParetoFront's cache
  absl::StatusOr<searchers::SearchSpace> space_;

  std::unique_ptr<searchers::Searcher> searcher_;
  std::unique_ptr<searchers::TrialScheduler> trial_scheduler_;
  bool wants_reports_ = false;
  Observations unobserved_;
  bool exhausted_ = false;

  std::map<int64_t, Decided> last_decision_;
  std::map<int64_t, Decided> unsaved_decisions_;
  std::map<std::pair<int64_t, int64_t>, UploadingCheckpoint> uploading_;

  std::map<std::string, std::string> refusals_;

  bool fill_queued_ = false;
  bool fill_failed_ = false;
  bool deleted_ = false;
  bool stale_ = false;
};

}  // namespace dial::scheduler
