// Multi-objective and constrained benchmark problems for searcher_bench
// --multi (every objective minimised), and the exact hypervolume the bench
// scores fronts with. The same definitions, reference points and ideal
// values are in mo_problems.py; change both together. Header-only; pure
// functions, thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench/searchers/functions.h"

namespace dial::bench {

// Metric names: objectives "f1", "f2", ... (a single objective: "y"),
// constraints "c1", "c2", ..., each feasible when <= 0.
struct MoProblem {
  const char* name;
  const char* space_yaml;  // search_space entries
  int objectives;
  std::vector<double> (*f)(const searchers::Params&);  // `objectives` values
  // Several objectives: the fixed hypervolume reference point, one
  // coordinate per objective. Empty for a single objective.
  std::vector<double> reference;
  // The best achievable score: several objectives, the hypervolume of the
  // true Pareto front against `reference`; one objective, the best feasible
  // value.
  double ideal;
  int constraints = 0;
  std::vector<double> (*c)(const searchers::Params&) = nullptr;  // if any
};

inline std::vector<double> UnitVector(const searchers::Params& p, int n) {
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = X(p, "x" + std::to_string(i));
  return x;
}

// ZDT (Zitzler, Deb and Thiele 2000) with n = 6: f1 = x0 and f2 = g h(f1 /
// g), g = 1 + 9 mean(x1..x5) in [1, 10]. The front is at x1..x5 = 0.
inline double ZdtG(const std::vector<double>& x) {
  double s = 0;
  for (size_t i = 1; i < x.size(); ++i) s += x[i];
  return 1 + 9 * s / double(x.size() - 1);
}

inline std::vector<double> Zdt1(const searchers::Params& p) {
  const auto x = UnitVector(p, 6);
  const double g = ZdtG(x);
  return {x[0], g * (1 - std::sqrt(x[0] / g))};
}

inline std::vector<double> Zdt2(const searchers::Params& p) {
  const auto x = UnitVector(p, 6);
  const double g = ZdtG(x);
  return {x[0], g * (1 - (x[0] / g) * (x[0] / g))};
}

// A disconnected front (five pieces); f2 down to -0.773.
inline std::vector<double> Zdt3(const searchers::Params& p) {
  const auto x = UnitVector(p, 6);
  const double g = ZdtG(x), r = x[0] / g;
  return {x[0], g * (1 - std::sqrt(r) - r * std::sin(10 * M_PI * x[0]))};
}

// DTLZ2 (Deb et al. 2002), 3 objectives, n = 6 (k = 4 distance variables):
// the front is the positive octant of the unit sphere, at x2..x5 = 0.5.
inline std::vector<double> Dtlz2(const searchers::Params& p) {
  const auto x = UnitVector(p, 6);
  double g = 0;
  for (int i = 2; i < 6; ++i) g += (x[i] - 0.5) * (x[i] - 0.5);
  const double a = x[0] * M_PI / 2, b = x[1] * M_PI / 2;
  return {(1 + g) * std::cos(a) * std::cos(b),
          (1 + g) * std::cos(a) * std::sin(b), (1 + g) * std::sin(a)};
}

// Branin inside a disc, as in Gardner et al. 2014 ("Bayesian optimization
// with inequality constraints"): (x1 - 2.5)^2 + (x2 - 7.5)^2 <= 50. Of
// Branin's three global minima only (pi, 2.275) is inside, so the
// constrained optimum is still 0.397887 but the other two basins are cut
// away (about 70 % of the box is feasible).
inline std::vector<double> BraninObjective(const searchers::Params& p) {
  return {Branin(p)};
}

inline std::vector<double> BraninDisc(const searchers::Params& p) {
  const double x1 = X(p, "x1"), x2 = X(p, "x2");
  return {(x1 - 2.5) * (x1 - 2.5) + (x2 - 7.5) * (x2 - 7.5) - 50};
}

// Mixed, constrained: a stand-in training loss over a log-scale float
// (lr), a log-scale int (units), a categorical (opt) and a float (dropout),
// under a memory budget: units x the weight copies the optimiser keeps
// (sgd 2, rmsprop 3, adam 4) <= 180. The unconstrained optimum (adam, 256
// units, loss 0) needs 1,024 and is infeasible; the constrained one is sgd
// with 90 units, lr 10^-2.5, dropout 0.2: 0.25 (log2 90 - 8)^2 + 0.6 =
// 1.16862677 (rmsprop's best is 1.395 at 60 units, adam's 1.573 at 45).
inline double OptimiserCopies(const std::string& opt) {
  return opt == "sgd" ? 2 : opt == "rmsprop" ? 3 : 4;
}

inline std::vector<double> MixedLoss(const searchers::Params& p) {
  const std::string opt = p.at("opt").string_value();
  return {std::pow(std::log10(X(p, "lr")) + 2.5, 2) +
          std::pow(std::log2(X(p, "units")) - 8, 2) / 4 +
          4 * std::pow(X(p, "dropout") - 0.2, 2) +
          (opt == "sgd"       ? 0.6
           : opt == "rmsprop" ? 0.3
                              : 0)};
}

inline std::vector<double> MixedMemory(const searchers::Params& p) {
  return {X(p, "units") * OptimiserCopies(p.at("opt").string_value()) - 180};
}

inline constexpr char kUnitCube6[] =
    "  - {name: x0, float: {min: 0, max: 1}}\n"
    "  - {name: x1, float: {min: 0, max: 1}}\n"
    "  - {name: x2, float: {min: 0, max: 1}}\n"
    "  - {name: x3, float: {min: 0, max: 1}}\n"
    "  - {name: x4, float: {min: 0, max: 1}}\n"
    "  - {name: x5, float: {min: 0, max: 1}}\n";

// ZDT reference (1.1, 11): f1 <= 1 and f2 <= g <= 10 everywhere in [0, 1]^6,
// so every evaluated point counts from the first trial on (a reference
// near the front, such as (1.1, 1.1), scores random early trials 0 and
// hides the first half of a run). The ideal values are the fronts'
// hypervolumes: 11 + 2/3 + 0.1, 11 + 1/3 + 0.1, and ZDT3's computed
// numerically (mo_problems.py). DTLZ2: 1.1^3 - pi/6.
inline const MoProblem kMoProblems[] = {
    {"zdt1", kUnitCube6, 2, Zdt1, {1.1, 11}, 11 + 2. / 3 + .1},
    {"zdt2", kUnitCube6, 2, Zdt2, {1.1, 11}, 11 + 1. / 3 + .1},
    {"zdt3", kUnitCube6, 2, Zdt3, {1.1, 11}, 12.2217629087},
    {"dtlz2", kUnitCube6, 3, Dtlz2, {1.1, 1.1, 1.1}, 1.331 - M_PI / 6},
    {"branin_c",
     "  - {name: x1, float: {min: -5, max: 10}}\n"
     "  - {name: x2, float: {min: 0, max: 15}}\n",
     1,
     BraninObjective,
     {},
     0.397887357729739,
     1,
     BraninDisc},
    {"mixed_c",
     "  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}\n"
     "  - {name: units, int: {min: 8, max: 512, scale: LOG}}\n"
     "  - {name: opt, categorical: {values: [sgd, adam, rmsprop]}}\n"
     "  - {name: dropout, float: {min: 0, max: 0.5}}\n",
     1,
     MixedLoss,
     {},
     1.1686267707625972,
     1,
     MixedMemory},
};

// The volume of the slab below `reference` dominated by the first `dims`
// coordinates of `points`, which are all strictly below it: slices along
// the last coordinate, a sweep in two dimensions.
inline double SliceVolume(std::vector<std::vector<double>> points,
                          const std::vector<double>& reference, size_t dims) {
  if (points.empty()) return 0;
  const size_t last = dims - 1;
  std::sort(points.begin(), points.end(),
            [&](const auto& a, const auto& b) { return a[last] < b[last]; });
  double volume = 0, best_x = reference[0];
  for (size_t i = 0; i < points.size(); ++i) {
    const double next =
        i + 1 < points.size() ? points[i + 1][last] : reference[last];
    if (dims == 2) {
      best_x = std::min(best_x, points[i][0]);
      volume += (reference[0] - best_x) * (next - points[i][1]);
    } else if (next > points[i][last]) {
      const std::vector<std::vector<double>> below(points.begin(),
                                                   points.begin() + i + 1);
      volume +=
          SliceVolume(below, reference, dims - 1) * (next - points[i][last]);
    }
  }
  return volume;
}

// Exact hypervolume (minimising) dominated by `points` and bounded by
// `reference`, for 2 or more objectives; a point not strictly better than
// the reference in every coordinate adds nothing. O(n^(d-1) log n): plenty
// for a study's few hundred points in 2 or 3 objectives. Written here
// rather than taken from searchers/pareto.h so that the bench's measure
// does not depend on the code it measures.
inline double Hypervolume(const std::vector<std::vector<double>>& points,
                          const std::vector<double>& reference) {
  std::vector<std::vector<double>> inside;
  for (const auto& p : points) {
    bool below = true;
    for (size_t i = 0; i < reference.size(); ++i) below &= p[i] < reference[i];
    if (below) inside.push_back(p);
  }
  return SliceVolume(std::move(inside), reference, reference.size());
}

}  // namespace dial::bench
