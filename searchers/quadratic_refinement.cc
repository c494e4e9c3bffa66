#include "searchers/quadratic_refinement.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "searchers/quadratic_model.h"

namespace dial::searchers {

std::optional<RefinementStep> QuadraticRefinement(
    const std::vector<std::vector<double>>& points,
    const std::vector<double>& values, uint64_t seed) {
  if (points.empty()) return std::nullopt;
  const int n = static_cast<int>(points[0].size());
  if (n == 0) return std::nullopt;
  if (n > kMaxRefinedParameters) return std::nullopt;
  const int m = std::min<int>(points.size(), QuadraticModel::WantedPoints(n));
  if (m < std::max(2 * n + 3, 8)) return std::nullopt;
  std::vector<int> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + m, order.end(),
                    [&](int a, int b) { return values[a] < values[b]; });
  std::vector<Eigen::VectorXd> x;
  std::vector<double> y;
  for (int k = 0; k < m; ++k) {
    x.push_back(Eigen::Map<const Eigen::VectorXd>(points[order[k]].data(), n));
    y.push_back(values[order[k]]);
  }
  const Eigen::VectorXd best = x[0];
  Eigen::VectorXd spread(n);
  for (int d = 0; d < n; ++d) {
    double mean = 0, sq = 0;
    for (const auto& p : x) mean += p[d];
    mean /= m;
    for (const auto& p : x) sq += (p[d] - mean) * (p[d] - mean);
    spread[d] = std::max(std::sqrt(sq / m), 1e-9);
  }
  QuadraticModel::Frame frame{best, spread.cwiseInverse().asDiagonal()};
  // Cross-validated rank agreement: each fifth predicted by a model of the
  // other four.
  std::vector<double> predicted(m), actual(m);
  for (int fold = 0; fold < 5; ++fold) {
    std::vector<Eigen::VectorXd> tx;
    std::vector<double> ty;
    for (int k = 0; k < m; ++k) {
      if (k % 5 != fold) {
        tx.push_back(x[k]);
        ty.push_back(y[k]);
      }
    }
    auto model = QuadraticModel::Fit(tx, ty, frame);
    if (!model) return std::nullopt;
    for (int k = fold; k < m; k += 5) {
      predicted[k] = model->Predict(x[k]);
      actual[k] = y[k];
    }
  }
  if (KendallTau(predicted, actual) < kMinRefinementTau) return std::nullopt;
  auto model = QuadraticModel::Fit(x, y, frame);
  if (!model) return std::nullopt;
  // The model's best in a box of the top points' spread around the best.
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  Eigen::VectorXd arg = best;
  double low = model->Predict(best);
  // Three rounds of draws, each in a box a tenth as wide around the
  // lowest so far.
  for (double scale : {1.0, 0.1, 0.01}) {
    const Eigen::VectorXd centre = arg;
    for (int k = 0; k < 700; ++k) {
      Eigen::VectorXd c(n);
      for (int d = 0; d < n; ++d) {
        const double lo = std::max(0.0, best[d] - spread[d]),
                     hi = std::min(1.0, best[d] + spread[d]);
        c[d] = std::clamp(centre[d] + scale * spread[d] * unit(rng), lo, hi);
      }
      const double v = model->Predict(c);
      if (v < low) {
        low = v;
        arg = c;
      }
    }
  }
  if ((arg - best).norm() < 1e-12) return std::nullopt;
  return RefinementStep{std::vector<double>(arg.data(), arg.data() + n),
                        std::vector<double>(spread.data(), spread.data() + n)};
}

std::optional<Params> RefineNearBest(
    const SearchSpace& space, const std::vector<RefinementResult>& results,
    const std::vector<Params>& pending, uint64_t seed, double best_share) {
  const RefinementResult* best = nullptr;
  for (const auto& r : results) {
    if (std::isfinite(r.value) && (!best || r.value < best->value)) best = &r;
  }
  if (!best) return std::nullopt;
  // The numeric parameters active in the incumbent.
  std::vector<int> numeric;
  for (int i = 0; i < space.size(); ++i) {
    const auto& p = space.param(i);
    if ((p.has_float_() || p.has_int_()) && best->params->count(p.name())) {
      numeric.push_back(i);
    }
  }
  if (numeric.empty()) return std::nullopt;
  auto unit_point = [&](const Params& params) {
    std::vector<double> u;
    for (int i : numeric) {
      auto it = params.find(space.param(i).name());
      if (it == params.end() || !space.Contains(i, it->second)) break;
      u.push_back(space.ToUnit(i, it->second));
    }
    return u;
  };
  std::vector<std::vector<double>> points;
  std::vector<double> values;
  for (const auto& r : results) {
    if (!std::isfinite(r.value)) continue;
    std::vector<double> u = unit_point(*r.params);
    if (u.size() != numeric.size()) continue;
    points.push_back(std::move(u));
    values.push_back(r.value);
  }
  if (best_share < 1.0 && !values.empty()) {
    // The best share, in their original order.
    std::vector<double> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    const size_t keep = std::clamp<size_t>(
        static_cast<size_t>(
            std::ceil(best_share * static_cast<double>(sorted.size()))),
        1, sorted.size());
    const double cut = sorted[keep - 1];
    size_t out = 0;
    for (size_t i = 0; i < values.size() && out < keep; ++i) {
      if (values[i] > cut) continue;
      if (out != i) points[out] = std::move(points[i]);
      values[out++] = values[i];
    }
    points.resize(out);
    values.resize(out);
  }
  const auto step = QuadraticRefinement(points, values, seed);
  if (!step) return std::nullopt;
  Params out = *best->params;
  for (size_t k = 0; k < numeric.size(); ++k) {
    out[space.param(numeric[k]).name()] =
        space.FromUnit(numeric[k], step->point[k]);
  }
  auto same = [&](const Params& a, const Params& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [name, value] : a) {
      auto it = b.find(name);
      if (it == b.end() ||
          it->second.SerializeAsString() != value.SerializeAsString()) {
        return false;
      }
    }
    return true;
  };
  for (const auto& r : results) {
    if (same(*r.params, out)) return std::nullopt;
  }
  for (const auto& p : pending) {
    if (same(p, out)) return std::nullopt;
    const std::vector<double> u = unit_point(p);
    if (u.size() != numeric.size()) continue;
    double d = 0;
    for (size_t k = 0; k < u.size(); ++k) {
      d = std::max(d, std::abs(u[k] - step->point[k]) / step->radius[k]);
    }
    if (d < 0.1) return std::nullopt;
  }
  return out;
}

}  // namespace dial::searchers
