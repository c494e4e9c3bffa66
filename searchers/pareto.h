// Several objectives and outcome constraints: the study's objectives as
// values to minimise, constraint violation, non-dominated sorting, crowding
// distance and hypervolume. Shared by the scheduler (fronts, the best
// trial) and the searchers. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/map.h"

namespace dial::searchers {

using Metrics = google::protobuf::Map<std::string, double>;
using Point = std::vector<double>;

// The study's objectives: spec.objectives when it lists several, else
// spec.objective alone.
std::vector<v1::Objective> Objectives(const v1::StudySpec& spec);
bool IsMultiObjective(const v1::StudySpec& spec);

// The objectives' values in `metrics`, signed so that lower is better
// (maximised objectives negated); nullopt if one is missing or not finite.
std::optional<Point> MinimizedObjectives(const v1::StudySpec& spec,
                                         const Metrics& metrics);
// The same for a finished trial: its final metrics, or objective_value
// when the study has one objective and the trial no final metrics.
std::optional<Point> MinimizedObjectives(const v1::StudySpec& spec,
                                         const v1::Trial& trial);

// Sets trial.objective_value (the first objective) and, with several
// objectives, trial.objective_values from the trial's final metrics. The
// first objective metric that is missing or not finite otherwise, with
// nothing set: {metric, whether it is present}.
struct MissingObjective {
  std::string metric;
  bool present;  // present but not finite
};
std::optional<MissingObjective> SetObjectiveValues(const v1::StudySpec& spec,
                                                   v1::Trial& trial);

// How far `metrics` are from satisfying the constraints: 0 when feasible,
// else the sum of each violated bound's distance (a missing or non-finite
// metric counts as infinity).
double ConstraintViolation(const v1::StudySpec& spec, const Metrics& metrics);
bool IsFeasible(const v1::StudySpec& spec, const Metrics& metrics);

// a dominates b (minimising): no worse in every coordinate, better in one.
bool Dominates(const Point& a, const Point& b);

// Non-dominated sorting (rank 0 is the Pareto front) under constrained
// domination, as NSGA-II: with `violation` (one per point, 0 = feasible),
// every feasible point ranks before every infeasible one, and infeasible
// ones rank by violation alone.
std::vector<int> ParetoRanks(const std::vector<Point>& points,
                             const std::vector<double>* violation = nullptr);

// Crowding distances of `members` (indices into points, usually one rank),
// in the order of `members`; the extremes of each coordinate get infinity.
std::vector<double> CrowdingDistances(const std::vector<Point>& points,
                                      const std::vector<int>& members);

// All indices, best first: by rank, then crowding distance (larger first),
// then index. A total order, so restarts and replays agree.
std::vector<int> ParetoOrder(const std::vector<Point>& points,
                             const std::vector<double>* violation = nullptr);

// Indices of the non-dominated points (duplicates: the first kept).
std::vector<int> ParetoFront(const std::vector<Point>& points);

// The volume dominated by `points` and bounded by `reference` (minimising;
// points not strictly better than the reference in every coordinate add
// nothing). Exact: sweeps for 2 objectives, recursive slicing above.
double Hypervolume(std::vector<Point> points, const Point& reference);

// A reference point for fronts without a given one: per objective, the
// worst value among `points` plus 10% of the range (at least 1e-9 · max(1,
// |worst|)), with each objective's `reference` (given in the objective's
// own units) taking precedence. In minimised units.
Point ReferencePoint(const std::vector<v1::Objective>& objectives,
                     const std::vector<Point>& points);

}  // namespace dial::searchers
