#include "searchers/importance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace dial::searchers {
namespace {

// Continuous parameters (floats, wide int ranges) are estimated on this
// many equal bins of the unit interval.
constexpr int kBins = 50;

using Binning = ImportanceInput::Binning;
constexpr Binning kContinuous = {kBins, true};

Binning BinningOf(const v1::ParameterSpec& p) {
  switch (p.domain_case()) {
    case v1::ParameterSpec::kCategorical:
      return {p.categorical().values_size(), false};
    case v1::ParameterSpec::kDiscrete:
      return {p.discrete().values_size(), false};
    case v1::ParameterSpec::kInt: {
      const int64_t values = p.int_().max() - p.int_().min() + 1;
      if (values <= kBins) return {static_cast<int>(values), false};
      return kContinuous;
    }
    default:
      return kContinuous;
  }
}

int BinOf(const SearchSpace& space, int i, const Binning& binning,
          const v1::ParamValue& value) {
  const v1::ParameterSpec& p = space.param(i);
  if (!binning.smooth && p.domain_case() == v1::ParameterSpec::kInt) {
    return static_cast<int>(value.int_value() - p.int_().min());
  }
  // Categorical and discrete values sit at bucket centres of the unit
  // interval, continuous ones anywhere in it.
  const int bin = static_cast<int>(space.ToUnit(i, value) * binning.bins);
  return std::clamp(bin, 0, binning.bins - 1);
}

// The density of `bins` (a histogram of n values) on the bins, with one
// pseudo-value spread evenly (so no bin is 0) and, for continuous
// parameters, Gaussian smoothing of Scott's bandwidth (at least a bin).
std::vector<double> Density(const std::vector<int>& bins, int nbins,
                            bool smooth) {
  const double n = static_cast<double>(bins.size());
  std::vector<double> counts(nbins, 0.0);
  for (int b : bins) counts[b] += 1;
  if (smooth) {
    const double mean =
        std::accumulate(bins.begin(), bins.end(), 0.0) / std::max(1.0, n);
    double var = 0;
    for (int b : bins) var += (b - mean) * (b - mean);
    var /= std::max(1.0, n - 1);
    const double h = std::max(1.0, std::sqrt(var) * std::pow(n, -0.2));
    std::vector<double> kernel(nbins);
    for (int d = 0; d < nbins; ++d)
      kernel[d] = std::exp(-0.5 * d * d / (h * h));
    std::vector<double> smoothed(nbins, 0.0);
    for (int j = 0; j < nbins; ++j) {
      if (counts[j] == 0) continue;
      // Each value's kernel sums to 1 over the bins (truncated at the
      // edges), so every value weighs the same.
      double total = 0;
      for (int b = 0; b < nbins; ++b) total += kernel[std::abs(b - j)];
      for (int b = 0; b < nbins; ++b) {
        smoothed[b] += counts[j] * kernel[std::abs(b - j)] / total;
      }
    }
    counts = std::move(smoothed);
  }
  std::vector<double> p(nbins);
  for (int b = 0; b < nbins; ++b) p[b] = (counts[b] + 1.0 / nbins) / (n + 1);
  return p;
}

// Pearson divergence of `top` from `all`: sum all * (top / all - 1)^2.
double PearsonDivergence(const std::vector<double>& top,
                         const std::vector<double>& all) {
  double d = 0;
  for (size_t b = 0; b < top.size(); ++b) {
    const double r = top[b] / all[b] - 1;
    d += all[b] * r * r;
  }
  return d;
}

}  // namespace

ImportanceInput::ImportanceInput(const SearchSpace& space) : space_(&space) {
  for (int i = 0; i < space.size(); ++i) {
    binning_.push_back(BinningOf(space.param(i)));
  }
}

void ImportanceInput::Add(const Params& params, double loss) {
  for (int i = 0; i < space_->size(); ++i) {
    const auto it = params.find(space_->param(i).name());
    bins_.push_back(
        it == params.end()
            ? int16_t{-1}
            : static_cast<int16_t>(BinOf(*space_, i, binning_[i], it->second)));
  }
  loss_.push_back(loss);
}

absl::StatusOr<ImportanceResult> PedAnovaImportance(
    const SearchSpace& space, const std::vector<ScoredTrial>& trials,
    double top_quantile) {
  ImportanceInput input(space);
  for (const auto& t : trials) input.Add(t.params, t.loss);
  return PedAnovaImportance(input, top_quantile);
}

absl::StatusOr<ImportanceResult> PedAnovaImportance(
    const ImportanceInput& input, double top_quantile) {
  if (!(top_quantile > 0 && top_quantile < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_quantile: must be in (0, 1), got ", top_quantile));
  }
  const std::vector<double>& loss = input.loss_;
  std::vector<size_t> order;
  for (size_t t = 0; t < loss.size(); ++t) {
    if (std::isfinite(loss[t])) order.push_back(t);
  }
  if (order.size() < 4) {
    return absl::FailedPreconditionError(
        absl::StrCat("parameter importance needs at least 4 completed "
                     "trials with an objective value; the study has ",
                     order.size()));
  }
  const size_t top = std::clamp<size_t>(
      static_cast<size_t>(std::ceil(top_quantile * order.size())), 2,
      order.size() - 1);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return loss[a] < loss[b]; });

  const SearchSpace& space = *input.space_;
  const size_t params = static_cast<size_t>(space.size());
  ImportanceResult result;
  result.trials = static_cast<int64_t>(order.size());
  result.top_trials = static_cast<int64_t>(top);
  double total = 0;
  for (size_t i = 0; i < params; ++i) {
    const int nbins = input.binning_[i].bins;
    std::vector<int> all, best;
    for (size_t k = 0; k < order.size(); ++k) {
      const int bin = input.bins_[order[k] * params + i];
      if (bin < 0) continue;  // inactive
      all.push_back(bin);
      if (k < top) best.push_back(bin);
    }
    double d = 0;
    if (best.size() >= 2 && nbins > 1) {
      const bool smooth = input.binning_[i].smooth;
      d = PearsonDivergence(Density(best, nbins, smooth),
                            Density(all, nbins, smooth));
    }
    result.params.push_back({space.param(static_cast<int>(i)).name(), d});
    total += d;
  }
  for (auto& p : result.params) {
    p.importance = total > 0 ? p.importance / total : 0;
  }
  std::stable_sort(result.params.begin(), result.params.end(),
                   [](const ParamImportance& a, const ParamImportance& b) {
                     return a.importance > b.importance;
                   });
  return result;
}

}  // namespace dial::searchers
