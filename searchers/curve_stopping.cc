#include "searchers/curve_stopping.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "searchers/quantile.h"

namespace dial::searchers {

double ExtrapolateCurve(const std::vector<std::pair<int64_t, double>>& points,
                        int64_t max_steps) {
  if (points.empty()) return std::numeric_limits<double>::quiet_NaN();
  if (points.size() < 3) return points.back().second;
  const double last_x = static_cast<double>(points.back().first);
  double best_a = points.back().second;
  double best_sse = std::numeric_limits<double>::infinity();
  for (double c : {0.5, 1.0, 2.0}) {
    double sw = 0, sp = 0, sy = 0, spp = 0, spy = 0;
    for (const auto& [step, y] : points) {
      const double x = static_cast<double>(step);
      const double w = x / last_x;  // later points count more
      const double phi = std::pow(x / double(max_steps), -c) - 1;
      sw += w;
      sp += w * phi;
      sy += w * y;
      spp += w * phi * phi;
      spy += w * phi * y;
    }
    const double det = sw * spp - sp * sp;
    if (!(std::abs(det) > 1e-12 * std::max(1.0, sw * spp))) continue;
    const double b = (sw * spy - sp * sy) / det;
    const double a = (sy - b * sp) / sw;
    double sse = 0;
    for (const auto& [step, y] : points) {
      const double x = static_cast<double>(step);
      const double phi = std::pow(x / double(max_steps), -c) - 1;
      const double r = y - a - b * phi;
      sse += (x / last_x) * r * r;
    }
    if (std::isfinite(a) && sse < best_sse) {
      best_sse = sse;
      best_a = a;
    }
  }
  double lo = points[0].second, hi = lo;
  for (const auto& p : points) {
    lo = std::min(lo, p.second);
    hi = std::max(hi, p.second);
  }
  const double span = hi - lo;
  return std::clamp(best_a, lo - span, hi + span);
}

CurveStoppingScheduler::CurveStoppingScheduler(const v1::StudySpec& spec)
    : objective_(spec),
      max_steps_(spec.scheduler().curve().max_steps()),
      grace_steps_(spec.scheduler().curve().grace_steps() > 0
                       ? spec.scheduler().curve().grace_steps()
                       : std::max<int64_t>(1, max_steps_ / 10)),
      optimism_(spec.scheduler().curve().optimism() > 0
                    ? spec.scheduler().curve().optimism()
                    : 0.1),
      min_curves_(spec.scheduler().curve().min_curves() > 0
                      ? spec.scheduler().curve().min_curves()
                      : 3) {}

void CurveStoppingScheduler::Record(int64_t trial, int64_t step, double score) {
  Curve& curve = curves_[trial];
  auto it = std::lower_bound(curve.begin(), curve.end(), step,
                             [](const std::pair<int64_t, double>& p,
                                int64_t s) { return p.first < s; });
  if (it != curve.end() && it->first == step) {
    it->second = score;  // a resumed attempt reporting the step again
  } else {
    curve.insert(it, {step, score});
  }
  if (step >= max_steps_) finished_.insert(trial);
}

void CurveStoppingScheduler::Replay(const v1::Trial& trial, int64_t step,
                                    const Metrics& metrics) {
  if (auto score = objective_.Score(metrics)) {
    Record(trial.number(), step, *score);
  }
}

void CurveStoppingScheduler::OnTrialFinished(const v1::Trial& trial) {
  // A trial that completed short of max_steps (its own budget) is whole.
  if (trial.state() == v1::COMPLETED && curves_.count(trial.number())) {
    finished_.insert(trial.number());
  }
}

double CurveStoppingScheduler::PredictAt(const Curve& curve,
                                         int64_t step) const {
  auto end =
      std::upper_bound(curve.begin(), curve.end(), step,
                       [](int64_t s, const std::pair<int64_t, double>& p) {
                         return s < p.first;
                       });
  return ExtrapolateCurve(Curve(curve.begin(), end), max_steps_);
}

double CurveStoppingScheduler::ErrorAt(int64_t trial, int64_t step) {
  auto [it, fresh] = errors_.try_emplace({trial, step}, 0.0);
  if (fresh) {
    const Curve& curve = curves_.at(trial);
    it->second = curve.back().second - PredictAt(curve, step);
  }
  return it->second;
}

v1::Decision CurveStoppingScheduler::OnReport(const v1::Trial& trial,
                                              int64_t step,
                                              const Metrics& metrics) {
  v1::Decision decision;
  decision.set_action(v1::Decision::CONTINUE);
  auto score = objective_.Score(metrics);
  if (!score) return decision;
  Record(trial.number(), step, *score);
  // Three points at least: fewer extrapolate nothing.
  if (step < grace_steps_ || finished_.count(trial.number()) ||
      curves_[trial.number()].size() < 3) {
    return decision;
  }
  double best = -std::numeric_limits<double>::infinity();
  std::vector<double> errors;
  for (int64_t other : finished_) {
    const Curve& curve = curves_.at(other);
    best = std::max(best, curve.back().second);
    if (curve.front().first <= step) errors.push_back(ErrorAt(other, step));
  }
  if (static_cast<int>(errors.size()) < min_curves_) return decision;
  const Curve& mine = curves_.at(trial.number());
  const double predicted = PredictAt(mine, step);
  const double bound = predicted + Quantile(errors, 1 - optimism_);
  if (bound >= best) return decision;
  decision.set_action(v1::Decision::STOP);
  decision.set_reason(absl::StrCat(
      objective_.metric(), " extrapolated to step ", max_steps_, ": ",
      objective_.Value(predicted), ", at best ", objective_.Value(bound),
      " by the errors of ", errors.size(),
      " finished curves cut at this step; the best final value is ",
      objective_.Value(best)));
  return decision;
}

}  // namespace dial::searchers
