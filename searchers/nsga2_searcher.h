// Nsga2Searcher: NSGA-II for one or several objectives, with constraints.
//  - Steady state: each suggestion is one child. Its parents come by binary
//    tournament from the elite population: the best `population_size`
//    observed trials by constrained non-dominated rank (feasible first,
//    infeasible by violation), then crowding distance, then trial number
//    (pareto.h), recomputed when a trial finishes.
//  - Variation in each parameter's unit coordinate: SBX crossover (eta 20)
//    and polynomial mutation (eta 20) on floats and ints; categorical and
//    discrete values come from either parent (uniform crossover) and
//    mutate by a fresh draw. Conditional parameters decode as the space
//    says (a child's inactive parameters are dropped).
//  - Until `population_size` trials have finished, suggestions are uniform
//    random draws (the first generation).
// A suggestion is a function of the seed, the trial number and the
// observed trials, so a restarted scheduler suggests the same.
// Not thread-safe (see searcher.h).
#pragma once

#include <memory>
#include <vector>

#include "searchers/pareto.h"
#include "searchers/searcher.h"

namespace dial::searchers {

class Nsga2Searcher : public Searcher {
 public:
  struct Options {
    uint64_t seed = 0;
    int population_size = 50;
    double crossover_probability = 0.9;
    double mutation_probability = 0;  // 0: 1 / parameters
  };
  // Its rules, the registry's check: INVALID_ARGUMENT naming the field
  // for an out-of-range option.
  static absl::Status Validate(const v1::StudySpec& spec);
  static absl::StatusOr<std::unique_ptr<Nsga2Searcher>> Create(
      const v1::StudySpec& spec);

  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  bool UsesPending() const override { return false; }
  void Observe(const v1::Trial& trial) override;
  // Warm start: prior trials join the pool the elite is chosen from (as
  // if observed before the study's first trial).
  void ObservePrior(const v1::Trial& trial) override;

 private:
  struct Observation {
    int64_t number;
    std::vector<double> unit;  // SearchSpace::Encode
    Point objectives;          // minimised
    double violation;
  };
  Nsga2Searcher(SearchSpace space, v1::StudySpec spec, const Options& options)
      : space_(std::move(space)), spec_(std::move(spec)), options_(options) {}
  const std::vector<int>& Elite();

  SearchSpace space_;
  v1::StudySpec spec_;
  Options options_;
  std::vector<Observation> observations_;
  std::vector<int> elite_;  // indices into observations_, best first
  size_t elite_of_ = 0;     // observations_.size() when elite_ was made
};

}  // namespace dial::searchers
