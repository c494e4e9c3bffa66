// CmaEsSearcher: the covariance matrix adaptation evolution strategy
// (Hansen, "The CMA Evolution Strategy: A Tutorial") with IPOP restarts,
// for continuous spaces with a budget of hundreds of trials or more, where
// a GP grows too slow and TPE's per-parameter model misses correlations.
//  - Space: floats, ints (relaxed; FromUnit rounds) and discrete values
//    (by their unit coordinate) form one Gaussian over the unit cube (log
//    space for LOG scale), starting at its centre with step `sigma0`.
//    Categoricals are not modelled: each suggestion draws them uniformly.
//    A draw outside the cube is redrawn up to 100 times, then clipped.
//  - Fitness: the objective, minimised; infeasible trials (outcome
//    constraints) rank after every feasible one, by violation; failed
//    trials, and completed ones without the objective, rank last. Stopped
//    trials count when they have the objective; other states are ignored.
//  - Update: finished trials are told in finish order, `lambda` at a time,
//    whichever distribution drew them (asynchronous tells); a trial's point
//    is its params re-encoded, so enqueued trials count too. The rank-one
//    and rank-mu update of Hansen's 2016 tutorial with its negative
//    weights (active CMA): the worse half of a generation shrinks C along
//    its directions.
//  - Model-assisted generations (lq-CMA-ES, Hansen 2019; on unless
//    `no_surrogate`, for up to 64 numeric parameters): once the run has
//    2n + 2 feasible results, each
//    generation draws its lambda offspring up front (a stream per
//    generation), fits a QuadraticModel on the run's latest results in the
//    distribution's whitened coordinates, and hands the offspring out
//    best-predicted first (re-sorting the rest after each result). After
//    each result, if the model's predictions made before the latest
//    kAgreementWindow (15) evaluations agree with their results (Kendall's
//    tau >= 0.85), the generation ends: all lambda offspring, ranked by
//    the model, update the distribution. Otherwise it goes on, and with
//    every offspring evaluated it is a plain generation. On a smooth
//    function a generation then costs one or two trials instead of
//    lambda; on a rugged one the model never earns trust and nothing
//    changes. A generation with an infeasible or failed result, and every
//    trial past its lambda offspring (more in flight than lambda), is
//    plain. Trials in flight when the rest is re-sorted may repeat an
//    offspring.
//  - IPOP: when the step collapses (sigma * sqrt(max eig C) < 1e-8), C's
//    condition number passes 1e14, or the best fitness of the last
//    10 + ceil(30 n / lambda) generations stays within 1e-12, the search
//    starts again from a seeded uniform random mean with `sigma0` and twice
//    the population, at most `max_restarts` times. Trials certainly drawn
//    before a restart (numbered at most the highest number observed by
//    then) are not told to the new run.
// Determinism: the state is a function of the spec and the Observe
// sequence alone; Suggest(number) draws from a stream seeded by (seed,
// number) and changes nothing, so a restarted scheduler that replays the
// finished trials suggests what the running one would. `pending` is
// ignored. Without numeric parameters it is random search.
// Limits: one objective and no conditional parameters (Create refuses
// both). Not thread-safe (see searcher.h).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "searchers/searcher.h"

namespace dial::searchers {

class CmaEsSearcher : public Searcher {
 public:
  struct Options {
    uint64_t seed = 0;
    int population_size = 0;  // lambda; 0: 4 + floor(3 ln n)
    double sigma0 = 0.125;    // in unit coordinates
    int max_restarts = 9;
    bool surrogate = true;  // model-assisted generations
  };
  // Its rules, the registry's check: INVALID_ARGUMENT for conditional
  // parameters, several objectives, or out-of-range options
  // (population_size 0 or 2..10000, sigma0 in [0, 1], max_restarts in
  // -1..100).
  static absl::Status Validate(const v1::StudySpec& spec);
  // Reads spec.searcher().cmaes(); Validate's errors, or those of a spec
  // that fails validation.
  static absl::StatusOr<std::unique_ptr<CmaEsSearcher>> Create(
      const v1::StudySpec& spec);
  ~CmaEsSearcher() override;

  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  bool UsesPending() const override { return false; }
  void Observe(const v1::Trial& trial) override;

  // The current run's lambda (0 without numeric parameters) and the number
  // of IPOP restarts so far.
  int population_size() const;
  int restarts() const { return restarts_; }
  // Generations the model ended early (model-assisted, trusted).
  int64_t model_generations() const;

 private:
  struct Cma;     // the distribution and its adaptation (cmaes_searcher.cc)
  struct Assist;  // model-assisted generations (cmaes_searcher.cc)
  struct Told {
    std::vector<double> x;  // unit coordinates of the numeric parameters
    int tier;               // 0 feasible, 1 infeasible, 2 failed
    double value;           // tier 0: objective; tier 1: violation
  };
  CmaEsSearcher(SearchSpace space, const v1::StudySpec& spec,
                const Options& options);
  void Restart();
  // After an update or a restart: the next generation, model-assisted when
  // the run has enough results for a model.
  void StartGeneration();
  // Refits the model on the run's latest results; true when the model has
  // ranked well enough to stand in for the rest of this generation.
  bool RefitAndTrust();
  void Update(const std::vector<Eigen::VectorXd>& ranked, double best);

  SearchSpace space_;
  v1::StudySpec spec_;  // for the objective and constraints
  Options options_;
  std::vector<int> numeric_;  // the parameters in the distribution
  std::unique_ptr<Cma> cma_;  // null without numeric parameters
  std::unique_ptr<Assist> assist_;
  std::vector<Told> batch_;  // told since the last update
  int restarts_ = 0;
  int64_t max_number_ = -1;    // highest trial number observed
  int64_t skip_through_ = -1;  // trials numbered up to this predate a restart
};

}  // namespace dial::searchers
