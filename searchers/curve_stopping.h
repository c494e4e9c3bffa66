// Learning-curve stopping (scheduler.curve). On every report past the
// grace period the trial's curve so far is extrapolated to max_steps. How
// far such predictions miss is learnt from the curves that already ran to
// the end: each finished curve, cut at the same step and extrapolated the
// same way, gives one error (its real final value minus the prediction).
// Once past the grace period and with three reports at least, the trial
// stops when its prediction plus an optimistic quantile of those
// errors still falls short of the best final value so far. A late bloomer
// keeps going because its extrapolation still falls steeply, or because
// finished curves show that rankings at its step still change by that
// much; a flat bad curve stops early.
//
// The state is the set of reports seen and the set of finished trials, in
// any order, so a restarted scheduler that replays them reaches the same
// decisions. Not thread-safe (see trial_scheduler.h).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "searchers/early_stopping.h"
#include "searchers/trial_scheduler.h"

namespace dial::searchers {

// The extrapolation: for each power c in {0.5, 1, 2}, a least-squares fit
// of score = a + b * ((x / max_steps)^-c - 1), weighted towards the later
// points; the fit with the smallest weighted error gives `a`, the value at
// max_steps. Fewer than three points: the last score. The result is kept
// within the observed range widened by that range on each side.
// `points` are (step, score) in rising steps. Pure; exposed for tests.
double ExtrapolateCurve(const std::vector<std::pair<int64_t, double>>& points,
                        int64_t max_steps);

class CurveStoppingScheduler : public TrialScheduler {
 public:
  explicit CurveStoppingScheduler(const v1::StudySpec& spec);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  void Replay(const v1::Trial& trial, int64_t step,
              const Metrics& metrics) override;
  void OnTrialFinished(const v1::Trial& trial) override;

 private:
  using Curve = std::vector<std::pair<int64_t, double>>;  // (step, score)
  void Record(int64_t trial, int64_t step, double score);
  // The prediction for `curve` cut at `step` (points at or before it).
  double PredictAt(const Curve& curve, int64_t step) const;
  // The error of finished trial `trial`'s prediction when cut at `step`.
  double ErrorAt(int64_t trial, int64_t step);

  ObjectiveReader objective_;
  int64_t max_steps_, grace_steps_;
  double optimism_;
  int min_curves_;
  std::map<int64_t, Curve> curves_;
  std::set<int64_t> finished_;  // trials whose curve is whole
  std::map<std::pair<int64_t, int64_t>, double> errors_;  // (trial, step)
};

}  // namespace dial::searchers
