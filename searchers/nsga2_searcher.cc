#include "searchers/nsga2_searcher.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/random.h"
#include "common/status.h"

namespace dial::searchers {
namespace {

constexpr double kEta = 20;  // SBX and polynomial mutation index

// One SBX child of a and b in [0, 1] (Deb and Agrawal's bounded form).
double Sbx(double a, double b, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (std::abs(a - b) < 1e-14) return a;
  const double lo = std::min(a, b), hi = std::max(a, b);
  auto child = [&](double beta_bound, bool upper) {
    const double alpha = 2.0 - std::pow(beta_bound, -(kEta + 1));
    const double u = unit(rng);
    const double beta =
        u <= 1.0 / alpha ? std::pow(u * alpha, 1.0 / (kEta + 1))
                         : std::pow(1.0 / (2.0 - u * alpha), 1.0 / (kEta + 1));
    const double c = upper ? 0.5 * ((lo + hi) + beta * (hi - lo))
                           : 0.5 * ((lo + hi) - beta * (hi - lo));
    return std::clamp(c, 0.0, 1.0);
  };
  const double spread = hi - lo;
  return unit(rng) < 0.5 ? child(1.0 + 2.0 * lo / spread, false)
                         : child(1.0 + 2.0 * (1.0 - hi) / spread, true);
}

// Polynomial mutation of x in [0, 1].
double Mutate(double x, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double u = unit(rng);
  double delta;
  if (u < 0.5) {
    const double v = 2 * u + (1 - 2 * u) * std::pow(1 - x, kEta + 1);
    delta = std::pow(v, 1.0 / (kEta + 1)) - 1;
  } else {
    const double v = 2 * (1 - u) + 2 * (u - 0.5) * std::pow(x, kEta + 1);
    delta = 1 - std::pow(v, 1.0 / (kEta + 1));
  }
  return std::clamp(x + delta, 0.0, 1.0);
}

}  // namespace

absl::Status Nsga2Searcher::Validate(const v1::StudySpec& spec) {
  const auto& n = spec.searcher().nsga2();
  if (n.population_size() < 0 || n.population_size() > 10000) {
    return absl::InvalidArgumentError(
        "searcher.nsga2.population_size: must be between 0 (= 50) and 10000");
  }
  if (!(n.crossover_probability() >= 0 && n.crossover_probability() <= 1)) {
    return absl::InvalidArgumentError(
        "searcher.nsga2.crossover_probability: must be in [0, 1] (0: 0.9)");
  }
  if (!(n.mutation_probability() >= 0 && n.mutation_probability() <= 1)) {
    return absl::InvalidArgumentError(
        "searcher.nsga2.mutation_probability: must be in [0, 1] (0: 1 / "
        "parameters)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Nsga2Searcher>> Nsga2Searcher::Create(
    const v1::StudySpec& spec) {
  DIAL_RETURN_IF_ERROR(Validate(spec));
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  const auto& s = spec.searcher().nsga2();
  Options options;
  options.seed = s.seed();
  if (s.population_size() > 0) options.population_size = s.population_size();
  if (s.crossover_probability() > 0) {
    options.crossover_probability = s.crossover_probability();
  }
  options.mutation_probability = s.mutation_probability() > 0
                                     ? s.mutation_probability()
                                     : 1.0 / std::max(1, space.size());
  return std::unique_ptr<Nsga2Searcher>(
      new Nsga2Searcher(std::move(space), spec, options));
}

void Nsga2Searcher::Observe(const v1::Trial& trial) {
  if (trial.state() != v1::COMPLETED) return;
  auto objectives = MinimizedObjectives(spec_, trial);
  if (!objectives) return;
  observations_.push_back({trial.number(), space_.Encode(trial.params()),
                           std::move(*objectives),
                           ConstraintViolation(spec_, trial.final_metrics())});
}

void Nsga2Searcher::ObservePrior(const v1::Trial& trial) {
  auto objectives = MinimizedObjectives(spec_, trial);
  if (!objectives) return;
  // Numbered below every trial of the study, in the order given.
  observations_.push_back({-1 - int64_t(observations_.size()),
                           space_.Encode(trial.params()),
                           std::move(*objectives),
                           ConstraintViolation(spec_, trial.final_metrics())});
}

const std::vector<int>& Nsga2Searcher::Elite() {
  if (elite_of_ == observations_.size() && !elite_.empty()) return elite_;
  // Rank every observation (in trial-number order, so the order of
  // arrival does not matter) and keep the best population_size.
  std::vector<int> by_number(observations_.size());
  for (size_t i = 0; i < by_number.size(); ++i) by_number[i] = int(i);
  std::sort(by_number.begin(), by_number.end(), [&](int a, int b) {
    return observations_[a].number < observations_[b].number;
  });
  std::vector<Point> points;
  std::vector<double> violation;
  for (int i : by_number) {
    points.push_back(observations_[i].objectives);
    violation.push_back(observations_[i].violation);
  }
  const std::vector<int> order = ParetoOrder(points, &violation);
  const size_t keep =
      std::min(order.size(), static_cast<size_t>(options_.population_size));
  elite_.clear();
  for (size_t k = 0; k < keep; ++k) elite_.push_back(by_number[order[k]]);
  elite_of_ = observations_.size();
  return elite_;
}

absl::StatusOr<Params> Nsga2Searcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  std::mt19937_64 rng(SplitMix64(options_.seed ^ 0x4e5347) ^
                      SplitMix64(static_cast<uint64_t>(number)));
  if (observations_.size() < static_cast<size_t>(options_.population_size)) {
    return space_.Sample(rng);
  }
  const std::vector<int>& elite = Elite();
  // Binary tournament: the better placed of two (elite is best first).
  std::uniform_int_distribution<size_t> pick(0, elite.size() - 1);
  auto tournament = [&] {
    const size_t i = pick(rng), j = pick(rng);
    return &observations_[elite[std::min(i, j)]];
  };
  const Observation* a = tournament();
  const Observation* b = tournament();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const bool cross = unit(rng) < options_.crossover_probability;
  std::vector<double> child(space_.size());
  for (int d = 0; d < space_.size(); ++d) {
    const auto& p = space_.param(d);
    double x = a->unit[d], y = b->unit[d];
    if (std::isnan(x)) std::swap(x, y);
    if (std::isnan(x)) x = unit(rng);  // inactive in both parents
    if (std::isnan(y)) y = x;
    const bool numeric = p.has_float_() || p.has_int_();
    double c = x;
    if (cross) {
      c = numeric ? Sbx(x, y, rng) : (unit(rng) < 0.5 ? x : y);
    }
    if (unit(rng) < options_.mutation_probability) {
      c = numeric ? Mutate(c, rng) : unit(rng);
    }
    child[d] = c;
  }
  return space_.Decode(child);
}

}  // namespace dial::searchers
