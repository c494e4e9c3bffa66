// QuadraticRefinement: TPE's local step towards the minimum near the best
// result. TPE models each parameter on its own and samples around good
// values, so it finds the basin of a good result quickly but closes in on
// its minimum slowly, and hardly at all along a valley that runs
// diagonally through several parameters. The step fits a
// linear-quadratic model (quadratic_model.h) to the best results and
// proposes the model's minimum near the best one:
//  - the best min(results, QuadraticModel::WantedPoints(n)) results (for
//    n <= 12 numeric parameters (n + 1)(n + 2), else 2 (2n + 1)), in
//    their unit coordinates, scaled by their spread (standard deviation)
//    per parameter; at least max(2n + 3, 8) results; at most
//    kMaxRefinedParameters (32) numeric parameters;
//  - trusted only if it ranks held-out results: 5-fold cross-validated
//    Kendall's tau of at least kMinRefinementTau (0.3); on a rugged or
//    noisy function it rarely is;
//  - the proposal is the lowest prediction among three rounds of 700
//    seeded draws, the first in the box of one spread around the best
//    result (within [0, 1]), each next one in a box a tenth as wide
//    around the lowest so far, all within the first box: a model that is
//    not convex cannot send it far.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "searchers/space.h"

namespace dial::searchers {

inline constexpr double kMinRefinementTau = 0.3;
// Above this many numeric parameters no step is taken (its six model fits
// would cost more than TPE's whole suggestion is meant to).
inline constexpr int kMaxRefinedParameters = 32;

struct RefinementStep {
  std::vector<double> point;   // unit coordinates
  std::vector<double> radius;  // the box's half-width per parameter
};

// points: unit coordinates; values: minimised, finite. nullopt when there
// are too few results or the model is not trusted.
std::optional<RefinementStep> QuadraticRefinement(
    const std::vector<std::vector<double>>& points,
    const std::vector<double>& values, uint64_t seed);

// A result for RefineNearBest: a configuration and its minimised value
// (not finite for a failed trial: never repeated, not modelled).
struct RefinementResult {
  const Params* params;
  double value;
};

// The step above over a study's results, as a configuration: the numeric
// parameters active in the best result are moved to the step's point (the
// others keep the best result's values). The model sees the best
// `best_share` of the finite results (at least one) among those where all
// of these parameters are active; every result counts as tried. nullopt
// when QuadraticRefinement declines, when the step would repeat a
// configuration tried or in flight, or when it lands beside a pending step
// (within a tenth of the box), so parallel suggestions do not all refine
// to one point.
std::optional<Params> RefineNearBest(
    const SearchSpace& space, const std::vector<RefinementResult>& results,
    const std::vector<Params>& pending, uint64_t seed, double best_share = 1.0);

}  // namespace dial::searchers
