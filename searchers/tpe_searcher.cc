#include "searchers/tpe_searcher.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "common/random.h"
#include "common/status.h"
#include "searchers/parzen.h"
#include "searchers/quadratic_refinement.h"

namespace dial::searchers {
namespace {

// Optuna-style recency weights over a group in observation order: the
// latest 25 count fully, older ones ramp down towards 1/n, so an early
// region that has been left behind stops pulling the estimate.
std::vector<double> RecencyWeights(size_t n) {
  std::vector<double> w(n, 1.0);
  if (n <= 25) return w;
  const size_t ramp = n - 25;
  for (size_t i = 0; i < ramp; ++i) {
    w[i] = 1.0 / n + (1.0 - 1.0 / n) * static_cast<double>(i) / ramp;
  }
  return w;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TpeSearcher>> TpeSearcher::Create(
    const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  Options options;
  options.seed = spec.searcher().tpe().seed();
  if (spec.searcher().tpe().initial_trials() > 0) {
    options.initial_trials = spec.searcher().tpe().initial_trials();
  }
  options.refine = !spec.searcher().tpe().no_surrogate();
  return std::unique_ptr<TpeSearcher>(
      new TpeSearcher(std::move(space), options, spec));
}

void TpeSearcher::Observe(const v1::Trial& trial) {
  const double inf = std::numeric_limits<double>::infinity();
  const size_t dims = Objectives(spec_).size();
  if (trial.state() == v1::COMPLETED) {
    if (auto y = MinimizedObjectives(spec_, trial)) {
      observations_.push_back(
          {trial.params(), std::move(*y),
           ConstraintViolation(spec_, trial.final_metrics())});
    }
  } else if (trial.state() == v1::FAILED) {
    observations_.push_back({trial.params(), Point(dims, inf), inf});
  }
}

void TpeSearcher::ObservePrior(const v1::Trial& trial) {
  if (auto y = MinimizedObjectives(spec_, trial)) {
    priors_.push_back({trial.params(), std::move(*y),
                       ConstraintViolation(spec_, trial.final_metrics())});
  }
}

void TpeSearcher::ObserveReport(
    const v1::Trial& trial, int64_t step,
    const google::protobuf::Map<std::string, double>& metrics) {
  auto y = MinimizedObjectives(spec_, metrics);
  if (!y) return;
  rungs_.Add(trial.number(), step, [&] {
    return Observation{trial.params(), *y, 0};
  });
}

std::vector<size_t> TpeSearcher::BestFirst(
    const std::vector<Observation>& obs) const {
  std::vector<size_t> order(obs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!ranked_split_) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return obs[a].y[0] < obs[b].y[0];
    });
    return order;
  }
  std::vector<Point> points;
  std::vector<double> violation;
  for (const auto& o : obs) {
    points.push_back(o.y);
    violation.push_back(o.violation);
  }
  const std::vector<int> ranked = ParetoOrder(points, &violation);
  for (size_t i = 0; i < order.size(); ++i) order[i] = size_t(ranked[i]);
  return order;
}

absl::StatusOr<Params> TpeSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  std::mt19937_64 rng(SplitMix64(options_.seed) ^
                      SplitMix64(static_cast<uint64_t>(number)));
  // Full-budget results, or the highest rung with enough of them (BOHB).
  const std::vector<Observation>* chosen = &observations_;
  const size_t needed = static_cast<size_t>(options_.initial_trials);
  if (observations_.size() < needed && !rungs_.empty()) {
    if (const auto* rung = rungs_.Highest(needed)) chosen = rung;
  }
  const std::vector<Observation>& obs = *chosen;
  if (obs.size() + priors_.size() < needed) return space_.Sample(rng);
  if (options_.refine && !ranked_split_ && number % 2 == 0) {
    if (auto refined = Refine(obs, pending, number)) return *refined;
  }
  // Good = the best gamma(n); bad = the rest plus pending trials (as a
  // constant liar). Both keep observation order, for the recency weights.
  std::vector<const Params*> good, bad;
  // The prior first (older), then the study's own, each split on its own;
  // the prior counts until the study has twice its initial trials.
  static const std::vector<Observation> kNoPrior;
  const std::vector<Observation>* groups[] = {
      obs.size() < 2 * needed ? &priors_ : &kNoPrior, &obs};
  for (const auto* group : groups) {
    const std::vector<size_t> by_value = BestFirst(*group);
    const size_t n_good = std::min<size_t>(
        25, static_cast<size_t>(std::ceil(0.1 * group->size())));
    std::vector<bool> is_good(group->size(), false);
    for (size_t i = 0; i < n_good; ++i) is_good[by_value[i]] = true;
    for (size_t i = 0; i < group->size(); ++i) {
      (is_good[i] ? good : bad).push_back(&(*group)[i].params);
    }
  }
  for (const auto& p : pending) bad.push_back(&p);

  Params out;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < space_.size(); ++i) {
    if (!space_.IsActive(i, out)) continue;
    const auto& spec = space_.param(i);
    // The group's values of this parameter (where active), with weights.
    auto values_of = [&](const std::vector<const Params*>& group,
                         std::vector<double>* weights) {
      std::vector<v1::ParamValue> values;
      for (const Params* p : group) {
        auto it = p->find(spec.name());
        if (it != p->end() && space_.Contains(i, it->second)) {
          values.push_back(it->second);
        }
      }
      *weights = RecencyWeights(values.size());
      return values;
    };
    std::vector<double> good_w, bad_w;
    const auto good_values = values_of(good, &good_w);
    const auto bad_values = values_of(bad, &bad_w);
    if (spec.has_categorical() || spec.has_discrete()) {
      // Listed values are modelled as categories: smoothed counts.
      const int k = spec.has_categorical() ? spec.categorical().values_size()
                                           : spec.discrete().values_size();
      std::vector<double> l(k, options_.prior_weight / k),
          g(k, options_.prior_weight / k);
      auto index = [&](const v1::ParamValue& v) {
        if (spec.has_discrete()) {
          const auto& vals = spec.discrete().values();
          return static_cast<int>(
              std::find(vals.begin(), vals.end(), v.double_value()) -
              vals.begin());
        }
        const auto& vals = spec.categorical().values();
        return static_cast<int>(
            std::find(vals.begin(), vals.end(), v.string_value()) -
            vals.begin());
      };
      // Each observation's kernel keeps a share of its mass for every
      // category (as Optuna's does), so an untried category stays
      // reachable as evidence piles up elsewhere.
      double good_total = 0, bad_total = 0;
      for (double w : good_w) good_total += w;
      for (double w : bad_w) bad_total += w;
      for (int c = 0; c < k; ++c) {
        l[c] +=
            options_.prior_weight * good_total / (good_values.size() + 1) / k;
        g[c] += options_.prior_weight * bad_total / (bad_values.size() + 1) / k;
      }
      for (size_t j = 0; j < good_values.size(); ++j) {
        l[index(good_values[j])] += good_w[j];
      }
      for (size_t j = 0; j < bad_values.size(); ++j) {
        g[index(bad_values[j])] += bad_w[j];
      }
      double lt = 0, gt = 0;
      for (int c = 0; c < k; ++c) {
        lt += l[c];
        gt += g[c];
      }
      std::discrete_distribution<int> draw(l.begin(), l.end());
      int best = 0;
      double best_score = -std::numeric_limits<double>::infinity();
      for (int c = 0; c < options_.candidates; ++c) {
        const int x = draw(rng);
        const double score = std::log(l[x] / lt) - std::log(g[x] / gt);
        if (score > best_score) {
          best_score = score;
          best = x;
        }
      }
      if (spec.has_discrete()) {
        out[spec.name()].set_double_value(spec.discrete().values(best));
      } else {
        out[spec.name()].set_string_value(spec.categorical().values(best));
      }
      continue;
    }
    std::vector<double> lu, gu;
    for (const auto& v : good_values) lu.push_back(space_.ToUnit(i, v));
    for (const auto& v : bad_values) gu.push_back(space_.ToUnit(i, v));
    Parzen l(lu, good_w, options_.prior_weight),
        g(gu, bad_w, options_.prior_weight);
    double best = unit(rng);
    double best_score = -std::numeric_limits<double>::infinity();
    for (int c = 0; c < options_.candidates; ++c) {
      const double x = l.Sample(rng);
      const double score = l.LogScore(x) - g.LogScore(x);
      if (score > best_score) {
        best_score = score;
        best = x;
      }
    }
    out[spec.name()] = space_.FromUnit(i, best);
  }
  return out;
}

std::optional<Params> TpeSearcher::Refine(const std::vector<Observation>& obs,
                                          const std::vector<Params>& pending,
                                          int64_t number) const {
  std::vector<RefinementResult> results;
  for (const auto& o : obs) results.push_back({&o.params, o.y[0]});
  return RefineNearBest(
      space_, results, pending,
      SplitMix64(options_.seed ^ 0x7ef1) ^ static_cast<uint64_t>(number));
}

}  // namespace dial::searchers
