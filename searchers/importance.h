// Hyperparameter importance by PED-ANOVA (Watanabe, Bansal and Hutter,
// IJCAI 2023): a parameter matters as much as the distribution of its
// values among the best trials differs from its distribution among all
// trials, measured by the Pearson divergence of the two. Closed form, no
// surrogate model: O(trials + bins^2) per parameter, so 100,000 trials
// take milliseconds. docs/searchers.md ("Parameter importance") says why
// this and not fANOVA. Thread-safe: a pure function.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "searchers/space.h"

namespace dial::searchers {

struct ParamImportance {
  std::string name;
  double importance = 0;  // share of the total, in [0, 1]
};

struct ImportanceResult {
  std::vector<ParamImportance> params;  // most important first
  int64_t trials = 0;                   // completed trials used
  int64_t top_trials = 0;               // of which in the top quantile
};

// One finished trial: its parameters and its loss (lower is better; negate
// a maximised objective).
struct ScoredTrial {
  Params params;
  double loss = 0;
};

// `top_quantile` in (0, 1): the share of trials counted as the best (0.1
// is the paper's default). FAILED_PRECONDITION with fewer than 4 trials
// with a finite loss.
absl::StatusOr<ImportanceResult> PedAnovaImportance(
    const SearchSpace& space, const std::vector<ScoredTrial>& trials,
    double top_quantile);

}  // namespace dial::searchers
