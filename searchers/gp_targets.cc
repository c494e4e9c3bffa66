#include "searchers/gp_targets.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "searchers/quantile.h"

namespace dial::searchers {

Standardizer Standardizer::Fit(const std::vector<double>& raw) {
  Standardizer s;
  std::vector<double> valid;
  for (double y : raw) {
    if (std::isfinite(y)) valid.push_back(y);
  }
  if (valid.empty()) return s;
  const double q25 = Quantile(valid, 0.25), q50 = Quantile(valid, 0.5),
               q75 = Quantile(valid, 0.75);
  s.lo = *std::min_element(valid.begin(), valid.end());
  double spread = q75 - q25;
  if (!(spread > 0)) spread = std::max(1e-12, std::abs(q50) * 1e-3 + 1e-12);
  s.cap = q75 + 3 * spread;
  s.hi = s.lo;
  for (double y : valid) s.hi = std::max(s.hi, std::min(y, s.cap));
  // Heavy right tail (e.g. Rosenbrock-like losses): work on a log scale.
  s.warp = (s.hi - q50) > 5 * (q50 - s.lo) && s.hi > s.lo;
  s.shift = 0.01 * (q50 - s.lo) + 1e-9 * (s.hi - s.lo) + 1e-300;
  const Eigen::VectorXd out = s.Apply(raw);
  s.mean = out.mean();
  const double sd = std::sqrt((out.array() - s.mean).square().mean());
  s.sd = sd > 1e-12 ? sd : 1.0;
  return s;
}

Eigen::VectorXd Standardizer::Apply(const std::vector<double>& raw) const {
  Eigen::VectorXd out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    double y = std::isfinite(raw[i]) ? std::min(raw[i], cap) : hi;
    // Below the values it was fitted on, a warped scale goes on linearly.
    if (warp) {
      y = y >= lo ? std::log(y - lo + shift)
                  : std::log(shift) + (y - lo) / shift;
    }
    out[i] = (y - mean) / sd;
  }
  return out;
}

Eigen::VectorXd Transform(const std::vector<double>& raw) {
  return Standardizer::Fit(raw).Apply(raw);
}

std::vector<int> Subset(const Eigen::VectorXd& y, int limit) {
  const int n = static_cast<int>(y.size());
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (n <= limit) return idx;
  std::vector<int> by_value = idx;
  std::stable_sort(by_value.begin(), by_value.end(),
                   [&](int a, int b) { return y[a] < y[b]; });
  std::vector<bool> take(n, false);
  const int best = limit / 2;
  for (int i = 0; i < best; ++i) take[by_value[i]] = true;
  std::vector<int> rest;
  for (int i = 0; i < n; ++i) {
    if (!take[i]) rest.push_back(i);
  }
  const int more = limit - best;
  for (int j = 0; j < more; ++j) {
    take[rest[static_cast<size_t>(j) * rest.size() / more]] = true;
  }
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    if (take[i]) out.push_back(i);
  }
  return out;
}

}  // namespace dial::searchers
