// StudyLoader: rebuilds a study's in-memory state from the store, the one
// way start-up, a reload after a lost commit and UpdateStudy (a new
// searcher) all do it, with one replay order: stored reports trial by
// trial, then finished trials in the order they finished. Searchers and
// trial schedulers must not depend on the order of reports across trials.
// Thread-safe as far as the store is: it keeps no state of its own.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "dial/v1/service.pb.h"
#include "scheduler/study_entry.h"
#include "searchers/searcher.h"
#include "searchers/trial_scheduler.h"
#include "storage/study_store.h"

namespace dial::scheduler {

using SearcherFactory =
    std::function<absl::StatusOr<std::unique_ptr<searchers::Searcher>>(
        const v1::StudySpec&)>;
using TrialSchedulerFactory =
    std::function<absl::StatusOr<std::unique_ptr<searchers::TrialScheduler>>(
        const v1::StudySpec&)>;

class StudyLoader {
 public:
  StudyLoader(storage::StudyStore* store, SearcherFactory searchers,
              TrialSchedulerFactory trial_schedulers)
      : store_(store),
        searchers_(std::move(searchers)),
        trial_schedulers_(std::move(trial_schedulers)) {}

  // `study` with its trials, searcher and trial scheduler as they were.
  // Errors of the store and the factories as they are.
  absl::StatusOr<std::shared_ptr<StudyEntry>> Load(v1::Study study) const;
  // A new searcher for `spec` that has seen what `trials` (the study's,
  // without metric history) and their stored reports hold.
  absl::StatusOr<std::unique_ptr<searchers::Searcher>> RebuildSearcher(
      const v1::StudySpec& spec, const std::map<int64_t, v1::Trial>& trials,
      const google::protobuf::RepeatedPtrField<v1::Trial>& priors) const;
  // The factories, for studies made anew.
  const SearcherFactory& searchers() const { return searchers_; }
  const TrialSchedulerFactory& trial_schedulers() const {
    return trial_schedulers_;
  }

 private:
  // Feeds the stored history to `searcher` and, unless null,
  // `trial_scheduler`; returns how many reports were replayed.
  absl::StatusOr<int64_t> Replay(
      const v1::Study& study, const std::map<int64_t, v1::Trial>& trials,
      searchers::Searcher& searcher,
      searchers::TrialScheduler* trial_scheduler) const;

  storage::StudyStore* store_;
  SearcherFactory searchers_;
  TrialSchedulerFactory trial_schedulers_;
};

}  // namespace dial::scheduler
