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

}  // namespace dial::searchers
