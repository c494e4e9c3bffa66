#include "searchers/searcher.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/params.h"
#include "common/random.h"
#include "common/status.h"
#include "searchers/bayesian_searcher.h"
#include "searchers/tpe_searcher.h"

namespace dial::searchers {
namespace {

constexpr int64_t kMaxEnumerated = 1000000;

std::vector<v1::ParamValue> GridValues(const SearchSpace& space, int i,
                                       int default_points) {
  const auto& p = space.param(i);
  std::vector<v1::ParamValue> values;
  auto spread = [&](int k) {
    for (int j = 0; j < k; ++j) {
      v1::ParamValue v = space.FromUnit(i, k == 1 ? 0.5 : double(j) / (k - 1));
      if (values.empty() ||
          ParamValueToString(values.back()) != ParamValueToString(v)) {
        values.push_back(v);
      }
    }
  };
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat:
      spread(p.float_().grid_points() ? p.float_().grid_points()
                                      : default_points);
      break;
    case v1::ParameterSpec::kInt: {
      int k = p.int_().grid_points() ? p.int_().grid_points() : default_points;
      const int64_t n = p.int_().max() - p.int_().min() + 1;
      if (n <= k) {
        for (int64_t v = p.int_().min(); v <= p.int_().max(); ++v) {
          values.emplace_back().set_int_value(v);
        }
      } else {
        // Endpoints exactly, the rest rounded from the (log) scale.
        const auto& r = p.int_();
        for (int j = 0; j < k; ++j) {
          double t = double(j) / (k - 1);
          double x = r.scale() == v1::LOG
                         ? std::exp(std::log(double(r.min())) +
                                    t * (std::log(double(r.max())) -
                                         std::log(double(r.min()))))
                         : r.min() + t * double(r.max() - r.min());
          int64_t v = std::clamp<int64_t>(std::llround(x), r.min(), r.max());
          if (values.empty() || values.back().int_value() != v) {
            values.emplace_back().set_int_value(v);
          }
        }
      }
      break;
    }
    case v1::ParameterSpec::kCategorical:
      for (const auto& s : p.categorical().values()) {
        values.emplace_back().set_string_value(s);
      }
      break;
    case v1::ParameterSpec::kDiscrete:
      for (double d : p.discrete().values()) {
        values.emplace_back().set_double_value(d);
      }
      break;
    default:
      break;
  }
  return values;
}

struct GridWalk {
  const SearchSpace& space;
  const std::vector<std::vector<v1::ParamValue>>& values;
  std::vector<bool> is_parent;  // some later parameter's condition names it
  std::vector<Params>* out;
  int64_t limit;

  // Leaves below parameter i, capped at kMaxEnumerated + 1.
  int64_t Count(int i, Params& params) const {
    if (i == space.size()) return 1;
    if (!space.IsActive(i, params)) return Count(i + 1, params);
    const auto& name = space.param(i).name();
    int64_t total = 0;
    if (!is_parent[i]) {
      params[name] = values[i][0];
      total = int64_t(values[i].size()) * Count(i + 1, params);
      params.erase(name);
    } else {
      for (const auto& v : values[i]) {
        params[name] = v;
        total += Count(i + 1, params);
        if (total > kMaxEnumerated) break;
      }
      params.erase(name);
    }
    return std::min(total, kMaxEnumerated + 1);
  }

  void Enumerate(int i, Params& params) const {
    if (int64_t(out->size()) >= limit) return;
    if (i == space.size()) {
      out->push_back(params);
      return;
    }
    if (!space.IsActive(i, params)) return Enumerate(i + 1, params);
    const auto& name = space.param(i).name();
    for (const auto& v : values[i]) {
      params[name] = v;
      Enumerate(i + 1, params);
      if (int64_t(out->size()) >= limit) break;
    }
    params.erase(name);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<RandomSearcher>> RandomSearcher::Create(
    const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  return std::unique_ptr<RandomSearcher>(
      new RandomSearcher(std::move(space), spec.searcher().random().seed()));
}

absl::StatusOr<Params> RandomSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  std::mt19937_64 rng(
      SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(number))));
  return space_.Sample(rng);
}

absl::StatusOr<std::unique_ptr<GridSearcher>> GridSearcher::Create(
    const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  const auto& grid = spec.searcher().grid();
  const int default_points = grid.default_points() ? grid.default_points() : 5;
  std::vector<std::vector<v1::ParamValue>> values;
  std::vector<bool> is_parent(space.size(), false);
  for (int i = 0; i < space.size(); ++i) {
    values.push_back(GridValues(space, i, default_points));
    for (const auto& [parent, unused] : space.param(i).when()) {
      for (int j = 0; j < i; ++j) {
        if (space.param(j).name() == parent) is_parent[j] = true;
      }
    }
  }
  const int64_t max_trials = spec.budget().max_trials();
  std::vector<Params> points;
  GridWalk walk{space, values, is_parent, &points, 0};
  Params scratch;
  const int64_t size = walk.Count(0, scratch);
  const std::string size_text = size > kMaxEnumerated
                                    ? absl::StrCat("more than ", kMaxEnumerated)
                                    : absl::StrCat(size);
  if (grid.exhaustive() && size != max_trials) {
    return absl::InvalidArgumentError(absl::StrCat(
        "searcher.grid.exhaustive: the grid has ", size_text,
        " points but budget.max_trials is ", max_trials,
        "; set max_trials to the grid size or change grid_points"));
  }
  if (grid.shuffle() && size > kMaxEnumerated) {
    return absl::InvalidArgumentError(
        absl::StrCat("searcher.grid.shuffle: the grid has ", size_text,
                     " points, too many to shuffle; lower grid_points"));
  }
  walk.limit = grid.shuffle() ? size : std::min(size, max_trials);
  walk.Enumerate(0, scratch);
  if (grid.shuffle()) {
    // Fisher-Yates with our own draws: the same order on every platform.
    std::mt19937_64 rng(SplitMix64(grid.seed()));
    for (size_t i = points.size(); i > 1; --i) {
      std::swap(points[i - 1], points[rng() % i]);
    }
    if (int64_t(points.size()) > max_trials) points.resize(max_trials);
  }
  return std::unique_ptr<GridSearcher>(
      new GridSearcher(std::move(points), size));
}

absl::StatusOr<Params> GridSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  if (number < 0 || number >= int64_t(points_.size())) {
    return absl::OutOfRangeError(absl::StrCat(
        "grid exhausted: all ", points_.size(), " points were suggested"));
  }
  return points_[number];
}

std::vector<int64_t> RungSteps(const v1::StudySpec& spec) {
  int64_t min_steps = 0, max_steps = 0;
  double eta = 0;
  if (spec.scheduler().has_asha()) {
    min_steps = spec.scheduler().asha().min_steps();
    max_steps = spec.scheduler().asha().max_steps();
    eta = spec.scheduler().asha().reduction_factor();
  } else if (spec.scheduler().has_hyperband()) {
    min_steps = spec.scheduler().hyperband().min_steps();
    max_steps = spec.scheduler().hyperband().max_steps();
    eta = spec.scheduler().hyperband().reduction_factor();
  }
  std::vector<int64_t> rungs;
  if (min_steps < 1 || !(eta > 1)) return rungs;
  for (double r = static_cast<double>(min_steps); r < max_steps; r *= eta) {
    rungs.push_back(static_cast<int64_t>(std::llround(r)));
  }
  return rungs;
}

absl::StatusOr<std::unique_ptr<Searcher>> CreateSearcher(
    const v1::StudySpec& spec) {
  switch (spec.searcher().kind_case()) {
    case v1::SearcherSpec::kRandom:
    case v1::SearcherSpec::KIND_NOT_SET: {
      DIAL_ASSIGN_OR_RETURN(auto s, RandomSearcher::Create(spec));
      return std::unique_ptr<Searcher>(std::move(s));
    }
    case v1::SearcherSpec::kGrid: {
      DIAL_ASSIGN_OR_RETURN(auto s, GridSearcher::Create(spec));
      return std::unique_ptr<Searcher>(std::move(s));
    }
    case v1::SearcherSpec::kBayesian: {
      DIAL_ASSIGN_OR_RETURN(auto s, BayesianSearcher::Create(spec));
      return std::unique_ptr<Searcher>(std::move(s));
    }
    case v1::SearcherSpec::kTpe: {
      DIAL_ASSIGN_OR_RETURN(auto s, TpeSearcher::Create(spec));
      return std::unique_ptr<Searcher>(std::move(s));
    }
  }
  return absl::InvalidArgumentError("searcher: unknown kind");
}

}  // namespace dial::searchers
