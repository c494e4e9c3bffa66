#include "searchers/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace dial::searchers {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Exact hypervolume by slicing along the last coordinate: between two
// consecutive values of it, the volume is the (d-1)-dimensional
// hypervolume of the points at or below the slice times its thickness.
// `points` are strictly better than `reference` in every coordinate.
double SliceVolume(std::vector<Point> points, const Point& reference,
                   size_t dims) {
  if (points.empty()) return 0;
  if (dims == 1) {
    double best = reference[0];
    for (const auto& p : points) best = std::min(best, p[0]);
    return reference[0] - best;
  }
  const size_t last = dims - 1;
  std::sort(points.begin(), points.end(),
            [&](const Point& a, const Point& b) { return a[last] < b[last]; });
  if (dims == 2) {
    // A sweep: each point adds the strip its first coordinate improves.
    double volume = 0, best_x = reference[0];
    for (size_t i = 0; i < points.size(); ++i) {
      best_x = std::min(best_x, points[i][0]);
      const double next =
          i + 1 < points.size() ? points[i + 1][1] : reference[1];
      volume += (reference[0] - best_x) * (next - points[i][1]);
    }
    return volume;
  }
  double volume = 0;
  std::vector<Point> below;
  for (size_t i = 0; i < points.size(); ++i) {
    below.push_back(points[i]);
    const double next =
        i + 1 < points.size() ? points[i + 1][last] : reference[last];
    if (next <= points[i][last]) continue;  // same slice as the next point
    // Only the non-dominated part of the slice's points matters.
    std::vector<Point> slice;
    for (const auto& p : below) slice.emplace_back(p.begin(), p.end() - 1);
    std::vector<Point> front;
    for (int k : ParetoFront(slice)) front.push_back(slice[k]);
    below.clear();
    for (const auto& p : front) {
      below.push_back(p);
      below.back().push_back(-kInf);  // keeps its slot in later slices
    }
    volume +=
        SliceVolume(front, reference, dims - 1) * (next - points[i][last]);
  }
  return volume;
}

}  // namespace

std::vector<v1::Objective> Objectives(const v1::StudySpec& spec) {
  if (spec.objectives_size() > 1) {
    return {spec.objectives().begin(), spec.objectives().end()};
  }
  return {spec.objective()};
}

bool IsMultiObjective(const v1::StudySpec& spec) {
  return spec.objectives_size() > 1;
}

std::optional<Point> MinimizedObjectives(const v1::StudySpec& spec,
                                         const Metrics& metrics) {
  Point out;
  for (const auto& o : Objectives(spec)) {
    auto it = metrics.find(o.metric());
    if (it == metrics.end() || !std::isfinite(it->second)) return std::nullopt;
    out.push_back(o.goal() == v1::MAXIMIZE ? -it->second : it->second);
  }
  return out;
}

std::optional<Point> MinimizedObjectives(const v1::StudySpec& spec,
                                         const v1::Trial& trial) {
  if (!IsMultiObjective(spec) && trial.has_objective_value()) {
    if (!std::isfinite(trial.objective_value())) return std::nullopt;
    return Point{spec.objective().goal() == v1::MAXIMIZE
                     ? -trial.objective_value()
                     : trial.objective_value()};
  }
  return MinimizedObjectives(spec, trial.final_metrics());
}

std::optional<MissingObjective> SetObjectiveValues(const v1::StudySpec& spec,
                                                   v1::Trial& trial) {
  std::vector<double> values;
  for (const auto& o : Objectives(spec)) {
    auto it = trial.final_metrics().find(o.metric());
    if (it == trial.final_metrics().end()) {
      return MissingObjective{o.metric(), false};
    }
    if (!std::isfinite(it->second)) return MissingObjective{o.metric(), true};
    values.push_back(it->second);
  }
  trial.set_objective_value(values[0]);
  trial.clear_objective_values();
  if (IsMultiObjective(spec)) {
    trial.mutable_objective_values()->Add(values.begin(), values.end());
  }
  return std::nullopt;
}

double ConstraintViolation(const v1::StudySpec& spec, const Metrics& metrics) {
  double violation = 0;
  for (const auto& c : spec.constraints()) {
    auto it = metrics.find(c.metric());
    if (it == metrics.end() || !std::isfinite(it->second)) return kInf;
    if (c.has_max() && it->second > c.max()) violation += it->second - c.max();
    if (c.has_min() && it->second < c.min()) violation += c.min() - it->second;
  }
  return violation;
}

bool IsFeasible(const v1::StudySpec& spec, const Metrics& metrics) {
  return spec.constraints().empty() || ConstraintViolation(spec, metrics) == 0;
}

bool Dominates(const Point& a, const Point& b) {
  bool better = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) return false;
    better |= a[i] < b[i];
  }
  return better;
}

std::vector<int> ParetoRanks(const std::vector<Point>& points,
                             const std::vector<double>* violation) {
  const int n = static_cast<int>(points.size());
  std::vector<int> rank(n, 0);
  std::vector<int> feasible, infeasible;
  for (int i = 0; i < n; ++i) {
    (violation && (*violation)[i] > 0 ? infeasible : feasible).push_back(i);
  }
  // Deb's fast non-dominated sort over the feasible points.
  const int m = static_cast<int>(feasible.size());
  std::vector<std::vector<int>> dominated(m);
  std::vector<int> count(m, 0), current;
  for (int a = 0; a < m; ++a) {
    for (int b = a + 1; b < m; ++b) {
      const Point& pa = points[feasible[a]];
      const Point& pb = points[feasible[b]];
      if (Dominates(pa, pb)) {
        dominated[a].push_back(b);
        ++count[b];
      } else if (Dominates(pb, pa)) {
        dominated[b].push_back(a);
        ++count[a];
      }
    }
  }
  for (int a = 0; a < m; ++a) {
    if (count[a] == 0) current.push_back(a);
  }
  int level = 0, last = 0;
  while (!current.empty()) {
    std::vector<int> next;
    for (int a : current) {
      rank[feasible[a]] = level;
      for (int b : dominated[a]) {
        if (--count[b] == 0) next.push_back(b);
      }
    }
    last = level++;
    current = std::move(next);
  }
  // Infeasible points: after every feasible rank, by violation.
  std::sort(infeasible.begin(), infeasible.end(),
            [&](int a, int b) { return (*violation)[a] < (*violation)[b]; });
  int base = m > 0 ? last + 1 : 0;
  for (size_t k = 0; k < infeasible.size(); ++k) {
    if (k > 0 &&
        (*violation)[infeasible[k]] > (*violation)[infeasible[k - 1]]) {
      ++base;
    }
    rank[infeasible[k]] = base;
  }
  return rank;
}

std::vector<double> CrowdingDistances(const std::vector<Point>& points,
                                      const std::vector<int>& members) {
  const size_t n = members.size();
  std::vector<double> distance(n, 0);
  if (n == 0) return distance;
  const size_t dims = points[members[0]].size();
  std::vector<size_t> order(n);
  for (size_t d = 0; d < dims; ++d) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return points[members[a]][d] < points[members[b]][d];
    });
    const double lo = points[members[order.front()]][d];
    const double hi = points[members[order.back()]][d];
    distance[order.front()] = distance[order.back()] = kInf;
    if (!(hi > lo)) continue;
    for (size_t k = 1; k + 1 < n; ++k) {
      distance[order[k]] += (points[members[order[k + 1]]][d] -
                             points[members[order[k - 1]]][d]) /
                            (hi - lo);
    }
  }
  return distance;
}

std::vector<int> ParetoOrder(const std::vector<Point>& points,
                             const std::vector<double>* violation) {
  const std::vector<int> rank = ParetoRanks(points, violation);
  std::vector<double> crowding(points.size(), 0);
  std::map<int, std::vector<int>> by_rank;
  for (size_t i = 0; i < points.size(); ++i) by_rank[rank[i]].push_back(i);
  for (const auto& [r, members] : by_rank) {
    const auto d = CrowdingDistances(points, members);
    for (size_t k = 0; k < members.size(); ++k) crowding[members[k]] = d[k];
  }
  std::vector<int> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (rank[a] != rank[b]) return rank[a] < rank[b];
    if (crowding[a] != crowding[b]) return crowding[a] > crowding[b];
    return a < b;
  });
  return order;
}

std::vector<int> ParetoFront(const std::vector<Point>& points) {
  std::vector<int> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  // Lexicographic order: no point is dominated by a later one, so one pass
  // against the front so far suffices.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return points[a] < points[b]; });
  std::vector<int> front;
  for (int i : order) {
    bool keep = true;
    for (int f : front) {
      if (Dominates(points[f], points[i]) || points[f] == points[i]) {
        keep = false;
        break;
      }
    }
    if (keep) front.push_back(i);
  }
  std::sort(front.begin(), front.end());
  return front;
}

double Hypervolume(std::vector<Point> points, const Point& reference) {
  std::vector<Point> inside;
  for (auto& p : points) {
    bool below = p.size() == reference.size();
    for (size_t d = 0; below && d < p.size(); ++d) below = p[d] < reference[d];
    if (below) inside.push_back(std::move(p));
  }
  std::vector<Point> front;
  for (int k : ParetoFront(inside)) front.push_back(inside[k]);
  return SliceVolume(std::move(front), reference, reference.size());
}

Point ReferencePoint(const std::vector<v1::Objective>& objectives,
                     const std::vector<Point>& points) {
  Point reference(objectives.size(), 0);
  for (size_t d = 0; d < objectives.size(); ++d) {
    const auto& o = objectives[d];
    if (o.has_reference()) {
      reference[d] = o.goal() == v1::MAXIMIZE ? -o.reference() : o.reference();
      continue;
    }
    double lo = kInf, hi = -kInf;
    for (const auto& p : points) {
      lo = std::min(lo, p[d]);
      hi = std::max(hi, p[d]);
    }
    if (points.empty()) continue;
    reference[d] =
        hi + std::max(0.1 * (hi - lo), 1e-9 * std::max(1.0, std::abs(hi)));
  }
  return reference;
}

}  // namespace dial::searchers
