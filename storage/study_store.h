// StudyStore: the durable record of studies, trials, parameters, metric
// history, the checkpoint index and workers. Every method is atomic (one
// transaction), and a write is durable when it returns OK unless the store
// has a durability() (group commit), which then says when. Implementations
// are thread-safe; one contract suite (tests/storage/study_store_test.cc)
// runs against each.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dial/v1/study.pb.h"
#include "storage/durability.h"

namespace dial::storage {

struct TrialQuery {
  std::vector<v1::TrialState> states;  // empty: every state
  int64_t after_number = -1;           // trials with number > after_number
  int limit = 0;                       // 0: no limit
};

// A page of a trial's metric history, in step order. Finding: long
// histories pushed GetTrial answers over gRPC's 64 MiB message limit, so
// the scheduler reads them in pages (docs/limits.md).
struct HistoryQuery {
  int64_t after_step = -1;  // points with step > after_step
  int limit = 0;            // at most this many points; 0: no limit
  // The page ends after the first point that brings the points' serialized
  // size to at least this; 0: no bound. A page holds at least one point.
  size_t max_bytes = 0;
};

// One trial checkpoint in the index, for retention across restarts.
struct CheckpointRecord {
  std::string study;
  int64_t trial = 0;
  int64_t step = 0;
  std::string id;  // CheckpointStore id, "<study>/<trial>/<step>"
  int64_t size_bytes = 0;
  std::string checksum;
  // The objective of the report that made it, oriented so that higher is
  // better; -infinity when that report had no finite objective (a NaN is
  // stored as -infinity).
  double score = -std::numeric_limits<double>::infinity();
};

class StudyStore {
 public:
  virtual ~StudyStore() = default;

  // ALREADY_EXISTS if a study of that name exists.
  virtual absl::Status CreateStudy(const v1::Study& study) = 0;
  // NOT_FOUND if absent. trial_counts are not filled.
  virtual absl::StatusOr<v1::Study> GetStudy(const std::string& name) = 0;
  virtual absl::StatusOr<std::vector<v1::Study>> ListStudies() = 0;
  // Replaces spec, state, update_time, queue, next_queue_id and note (never
  // prior_trials: those are written once, by CreateStudy). NOT_FOUND if
  // absent.
  virtual absl::Status UpdateStudy(const v1::Study& study) = 0;
  // Removes the study with its trials, metrics and checkpoint index: at
  // once for every read (its name is free again when this returns), but a
  // store may leave the rows to PurgeDeleted, so that deleting a study of a
  // million trials is one small write.
  virtual absl::Status DeleteStudy(const std::string& name) = 0;
  // Removes what DeleteStudy left behind, in small transactions, so that
  // other writes go on meanwhile. Safe to call at any time and again after
  // a crash; stores that delete at once do nothing.
  virtual absl::Status PurgeDeleted() { return absl::OkStatus(); }

  // Inserts or replaces a trial: state, params, final metrics, lineage and
  // the other fields except metric_history. NOT_FOUND if the study is absent.
  virtual absl::Status PutTrial(const v1::Trial& trial) = 0;
  // NOT_FOUND if absent; metric_history is left empty.
  virtual absl::StatusOr<v1::Trial> GetTrial(const std::string& study,
                                             int64_t number) = 0;
  // Trials in number order.
  virtual absl::StatusOr<std::vector<v1::Trial>> ListTrials(
      const std::string& study, const TrialQuery& query) = 0;

  // Appends one report and updates what a report changes in the trial
  // (last_step, checkpoint, checkpoint_step; its other fields must be as
  // stored) in one transaction. ALREADY_EXISTS if the step is already
  // recorded.
  virtual absl::Status RecordReport(const v1::Trial& trial,
                                    const v1::MetricPoint& point) = 0;
  // The points of `query`'s page, by step. NOT_FOUND if the trial is
  // absent. The next page starts after the last point's step; a page with
  // fewer than `limit` points that did not stop at `max_bytes` is the last.
  virtual absl::StatusOr<std::vector<v1::MetricPoint>> GetMetricHistory(
      const std::string& study, int64_t number, const HistoryQuery& query) = 0;
  // The whole history (for callers that need all of it: the default
  // ForEachReport, tools and tests). Implementations must say
  // `using StudyStore::GetMetricHistory;` so it stays visible.
  absl::StatusOr<std::vector<v1::MetricPoint>> GetMetricHistory(
      const std::string& study, int64_t number) {
    return GetMetricHistory(study, number, HistoryQuery{});
  }
  // Every report of a study, trial by trial in number order and by step
  // within a trial, handed to `fn` one at a time (a restarted scheduler
  // replays them without holding them all). With `steps`, only reports that
  // hold a finite value of `metric`, and of those each trial's first at or
  // after each of the steps and its last (see TrialScheduler::ReplaySteps).
  // This default reads trial by trial; stores override it with one
  // streaming read.
  virtual absl::Status ForEachReport(
      const std::string& study, const std::vector<int64_t>& steps,
      const std::string& metric,
      const std::function<void(int64_t number, const v1::MetricPoint& point)>&
          fn) {
    auto trials = ListTrials(study, {});
    if (!trials.ok()) return trials.status();
    for (const v1::Trial& trial : *trials) {
      auto history = GetMetricHistory(study, trial.number());
      if (!history.ok()) return history.status();
      if (!steps.empty()) {
        std::erase_if(*history, [&](const v1::MetricPoint& p) {
          auto it = p.metrics().find(metric);
          return it == p.metrics().end() || !std::isfinite(it->second);
        });
      }
      for (size_t i = 0; i < history->size(); ++i) {
        const int64_t step = (*history)[i].step();
        const int64_t before = i > 0 ? (*history)[i - 1].step() : INT64_MIN;
        bool wanted = steps.empty() || i + 1 == history->size();
        for (int64_t s : steps) wanted |= before < s && s <= step;
        if (wanted) fn(trial.number(), (*history)[i]);
      }
    }
    return absl::OkStatus();
  }

  // The checkpoint index. PutCheckpoint inserts or replaces the record of
  // (study, trial, step); NOT_FOUND if the trial is absent. ListCheckpoints
  // returns every record of a study by trial, then step (NOT_FOUND if the
  // study is absent). Deleting an absent record is OK; NOT_FOUND if the
  // trial is absent. A trial's records go with its study.
  virtual absl::Status PutCheckpoint(const CheckpointRecord& record) = 0;
  virtual absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(
      const std::string& study) = 0;
  virtual absl::Status DeleteCheckpoint(const std::string& study,
                                        int64_t number, int64_t step) = 0;

  // Inserts or replaces a worker's record.
  virtual absl::Status PutWorker(const v1::Worker& worker) = 0;
  // The audit log. AppendAudit stores `event` with the next id (its `id` is
  // ignored); ListAudit returns events newest first: those of `study` (all
  // when empty), with id < before_id (0: no bound), at most `limit`. The
  // log outlives the studies it names.
  virtual absl::Status AppendAudit(const v1::AuditEvent& event) = 0;
  virtual absl::StatusOr<std::vector<v1::AuditEvent>> ListAudit(
      const std::string& study, int64_t before_id, int limit) = 0;

  // Usage records (one per ended attempt of a worker trial), in the same
  // durability as trial writes; they outlive the studies they name.
  virtual absl::Status AppendUsage(const v1::UsageRecord& record) = 0;
  // Records whose attempt ended at or after `since_ms` (Unix ms), oldest
  // first.
  virtual absl::StatusOr<std::vector<v1::UsageRecord>> ListUsage(
      int64_t since_ms) = 0;

  // Writes a consistent copy of everything committed to the file `path`
  // (absolute, on this machine) while the store stays in use, and returns
  // its size in bytes. The copy is written under a temporary name in the
  // same directory, fsynced and renamed to `path`, so `path` never holds a
  // partial copy, even after a crash. A backup never replaces a file:
  // ALREADY_EXISTS if `path` exists.
  // INVALID_ARGUMENT: `path` is relative, names a directory, or is the live
  // database or one of its companion files. FAILED_PRECONDITION: the
  // directory does not exist. ALREADY_EXISTS: `path` exists.
  // PERMISSION_DENIED: the directory is not writable. UNAVAILABLE: the copy
  // could not be written (disk full, I/O error); retry. UNIMPLEMENTED:
  // stores with nothing on disk.
  virtual absl::StatusOr<int64_t> Backup(const std::string& /*path*/) {
    return absl::UnimplementedError(
        "this study store keeps nothing on disk to back up");
  }

  // When writes become durable, for stores that commit later than they
  // apply (group commit; see Durability). Null: every write is durable when
  // its call returns.
  virtual Durability* durability() { return nullptr; }
};

}  // namespace dial::storage
