// The targets of Bayesian optimisation's GPs: a robust standardisation of
// minimised results, and the subset a fit or a posterior keeps when there
// are too many of them.
#pragma once

#include <Eigen/Dense>
#include <vector>

namespace dial::searchers {

// Robust standardisation of minimised targets; NaN (failed) -> worst.
// Values above Q3 + 3 IQR are clipped there; a heavy right tail (e.g.
// Rosenbrock-like losses) is worked on a log scale. Fitted on some values,
// it can be applied to others.
struct Standardizer {
  bool warp = false;
  double lo = 0, cap = 0, hi = 0, shift = 0, mean = 0, sd = 1;

  static Standardizer Fit(const std::vector<double>& raw);
  Eigen::VectorXd Apply(const std::vector<double>& raw) const;
};

// Fitted on `raw` and applied to it.
Eigen::VectorXd Transform(const std::vector<double>& raw);

// The best half and an even spread of the rest, `limit` in all, in
// original order (all of them when there are no more than `limit`).
std::vector<int> Subset(const Eigen::VectorXd& y, int limit);

}  // namespace dial::searchers
