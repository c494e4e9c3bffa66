// Warm start (spec.warm_start): what a new study takes from earlier ones.
// Their finished trials are projected onto the new study's search space
// and objectives; the best `top_k` configurations are queued to run first,
// and the usable trials (at most kMaxPriorTrials, best first) become the
// searcher's prior. Pure: the caller looks the earlier studies up (with
// the creator's rights) and keeps the result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/study.pb.h"
#include "scheduler/study_entry.h"

namespace dial::scheduler {

inline constexpr int kMaxPriorTrials = 1000;

struct WarmStartPlan {
  std::vector<v1::QueuedTrial> queue;  // params only, best first
  std::vector<v1::Trial> priors;       // best first
};

// INVALID_ARGUMENT (naming warm_start.studies[i]) for a source whose space
// lacks a parameter of `spec` or gives it another kind, or when no source
// trial is usable; `source`'s errors as they are.
absl::StatusOr<WarmStartPlan> PlanWarmStart(
    const v1::StudySpec& spec,
    const std::function<absl::StatusOr<const StudyEntry*>(const std::string&)>&
        source);

}  // namespace dial::scheduler
