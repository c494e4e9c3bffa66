// StudyEntry: one study as the core holds it in memory: the study, its
// searcher and trial scheduler, every trial, and indexes over the trials so
// that no call scans them all. Mirror is the only way trials change here,
// and it keeps the indexes right. Not thread-safe: the core's lock guards
// every entry (the searcher is used on the suggestion thread only).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dial/v1/service.pb.h"
#include "searchers/pareto.h"
#include "searchers/searcher.h"
#include "searchers/trial_scheduler.h"

namespace dial::scheduler {

// Open trials still hold a place in max_parallel_trials.
bool IsOpen(v1::TrialState state);
bool IsFinal(v1::TrialState state);

struct StudyEntry {
  // Several objectives: the Pareto front of the feasible COMPLETED trials
  // (trial numbers, by crowding distance: each objective's extremes
  // first), its hypervolume and the reference point (in the objectives'
  // own units). Cached until a ranked trial changes.
  struct Front {
    std::vector<int64_t> trials;
    double hypervolume = 0;
    std::vector<double> reference;
  };
  v1::Study study;
  // Used on the suggestion thread only (and before it starts).
  std::unique_ptr<searchers::Searcher> searcher;
  std::unique_ptr<searchers::TrialScheduler> trial_scheduler;
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
  bool stale = false;  // dropped by a reload
  std::map<int64_t, v1::Trial> trials;
  // Indexes over `trials`: open and PENDING trial numbers, counts by state,
  // and feasible COMPLETED trials best first as (value with the sign that
  // makes lower better, number; the first objective's, with several).
  std::set<int64_t> open, pending;
  std::map<v1::TrialState, int64_t> state_counts;
  std::set<std::pair<double, int64_t>> ranked;
  // Warm start: the searcher's prior (in the store since creation; not in
  // `study`, so answers and study writes never carry it).
  google::protobuf::RepeatedPtrField<v1::Trial> priors;
  // Re-evaluations: origin trial -> its COMPLETED re-evaluations' objective
  // values, by trial number. An origin ranks by the mean over its runs;
  // re-evaluations themselves are not ranked.
  std::map<int64_t, std::map<int64_t, double>> reruns;
  mutable std::optional<Front> front;  // ParetoFront's cache
  std::map<std::string, std::set<int64_t>> open_by_client;
  // The decision given for each trial's latest report, returned again
  // when a worker retries that report.
  std::map<int64_t, std::pair<int64_t, v1::Decision>> last_decision;
  // Decisions whose report is recorded but whose effect (STOP, PAUSE,
  // EXPLOIT) failed to save, by trial: (step, decision).
  std::map<int64_t, std::pair<int64_t, v1::Decision>> unsaved_decisions;
  // Checkpoints reported while still uploading (checkpoint transfer):
  // (trial, step) -> the checkpoint id, its retention score (none for a
  // checkpoint that is not the trainer's) and the worker uploading it,
  // until CommitUpload makes it durable, or the attempt finishes or its
  // worker is lost. A trial with one is not dispatched again (it would
  // resume from an older checkpoint). At most a few per trial.
  struct UploadingCheckpoint {
    std::string id;
    std::optional<double> score;
    std::string worker_id;
  };
  std::map<std::pair<int64_t, int64_t>, UploadingCheckpoint> uploading;
  bool Uploading(int64_t trial) const {
    auto it = uploading.lower_bound({trial, INT64_MIN});
    return it != uploading.end() && it->first.first == trial;
  }
  // Forgets trial `trial`'s uploads up to `step` (all by default).
  void ForgetUploads(int64_t trial, int64_t step = INT64_MAX) {
    auto it = uploading.lower_bound({trial, INT64_MIN});
    while (it != uploading.end() && it->first.first == trial &&
           it->first.second <= step) {
      it = uploading.erase(it);
    }
  }
  int open_trials = 0;     // PENDING, RUNNING or PAUSED
  int active_trials = 0;   // PENDING or RUNNING: what max_parallel counts
  bool exhausted = false;  // the searcher has no more points

  const std::string& name() const { return study.name(); }
  // Whether the study's trials run on workers (not ask/tell).
  bool worker_run() const {
    return study.spec().trial().run_case() != v1::TrialTemplate::RUN_NOT_SET;
  }
  // Stores `trial` (without its metric history) and updates the indexes.
  void Mirror(v1::Trial trial);
  // The study with its trial counts filled in.
  v1::Study WithCounts() const;
  // The best feasible COMPLETED trial; null if none. With several
  // objectives, the first of Front().
  const v1::Trial* Best() const;
  // Several objectives: the Pareto front (see Front above).
  const Front& ParetoFront() const;
  // A re-evaluated trial's runs (itself and its COMPLETED re-evaluations):
  // count, mean and sample standard deviation; nullopt if it has none.
  std::optional<v1::SeedRuns> Runs(int64_t number) const;
  // Whether the budget lets one more trial start now.
  bool CanCreate() const;
};

}  // namespace dial::scheduler
