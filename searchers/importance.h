// Hyperparameter importance by PED-ANOVA (Watanabe, Bansal and Hutter,
// IJCAI 2023): a parameter matters as much as the distribution of its
// values among the best trials differs from its distribution among all
// trials, measured by the Pearson divergence of the two. Closed form, no
// surrogate model: O(trials + bins^2) per parameter, so 100,000 trials
// take milliseconds. docs/searchers.md ("Parameter importance") says why
// this and not fANOVA. Thread-safe: a pure function.
#pragma once

#include <cstdint>
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

// Trials reduced to what the estimate needs: each parameter's bin (-1:
// inactive) and the loss. Cheap to fill (no copies of the params), so a
// caller can fill it under a lock and compute outside it.
class ImportanceInput {
 public:
  // How a parameter's values become bins: discrete kinds one bin a value,
  // continuous ones smoothed equal bins of the unit interval.
  struct Binning {
    int bins;
    bool smooth;
  };
  explicit ImportanceInput(const SearchSpace& space);
  void Add(const Params& params, double loss);
  size_t size() const { return loss_.size(); }

 private:
  friend absl::StatusOr<ImportanceResult> PedAnovaImportance(
      const ImportanceInput& input, double top_quantile);
  const SearchSpace* space_;
  std::vector<Binning> binning_;  // per parameter
  std::vector<int16_t> bins_;     // trial-major: size() x params
  std::vector<double> loss_;
};

// `top_quantile` in (0, 1): the share of trials counted as the best (0.1
// is the paper's default). FAILED_PRECONDITION with fewer than 4 trials
// with a finite loss.
absl::StatusOr<ImportanceResult> PedAnovaImportance(
    const ImportanceInput& input, double top_quantile);
absl::StatusOr<ImportanceResult> PedAnovaImportance(
    const SearchSpace& space, const std::vector<ScoredTrial>& trials,
    double top_quantile);

}  // namespace dial::searchers
