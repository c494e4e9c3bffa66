#include "searchers/parzen.h"

#include <algorithm>
#include <cmath>

namespace dial::searchers {
namespace {

double Phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

Parzen::Parzen(std::vector<double> points, std::vector<double> weights,
               double prior_weight) {
  // The prior: a wide component centred on the range.
  points.push_back(0.5);
  weights.push_back(prior_weight);
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return points[a] < points[b]; });
  const size_t n = points.size();
  const double min_sigma = 1.0 / std::min(100.0, 1.0 + n);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    const bool prior = i == n - 1;
    double sigma;
    if (prior) {
      sigma = 1.0;
    } else {
      const double left = k == 0 ? 0.0 : points[i] - points[order[k - 1]];
      const double right = k + 1 == n ? 0.0 : points[order[k + 1]] - points[i];
      sigma = std::clamp(std::max(left, right), min_sigma, 1.0);
    }
    mu_.push_back(points[i]);
    sigma_.push_back(sigma);
    weight_.push_back(weights[i]);
  }
  double total = 0;
  for (double w : weight_) total += w;
  for (size_t k = 0; k < n; ++k) {
    weight_[k] /= total;
    mass_.push_back(Phi((1 - mu_[k]) / sigma_[k]) - Phi(-mu_[k] / sigma_[k]));
  }
}

double Parzen::LogScore(double x) const {
  double p = 0;
  for (size_t k = 0; k < mu_.size(); ++k) {
    const double z = (x - mu_[k]) / sigma_[k];
    // Truncated to [0, 1]; not divided by the width (see parzen.h).
    p += weight_[k] * std::exp(-0.5 * z * z) /
         (std::sqrt(2 * M_PI) * std::max(mass_[k], 1e-12));
  }
  return std::log(std::max(p, 1e-300));
}

double Parzen::Sample(std::mt19937_64& rng) const {
  std::discrete_distribution<size_t> pick(weight_.begin(), weight_.end());
  const size_t k = pick(rng);
  std::normal_distribution<double> normal(mu_[k], sigma_[k]);
  for (int tries = 0; tries < 100; ++tries) {
    const double x = normal(rng);
    if (x >= 0 && x <= 1) return x;
  }
  return std::clamp(mu_[k], 0.0, 1.0);
}

}  // namespace dial::searchers
