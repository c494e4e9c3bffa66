// BayesianSearcher: Gaussian-process Bayesian optimisation.
//  - Inputs: floats and ints as their unit coordinate (log scale in log
//    space, ints relaxed and rounded on decode), categoricals one-hot;
//    inactive conditional parameters get a fixed value, so the model sees
//    them explicitly as "absent".
//  - Outputs: minimised internally; clipped above at Q3 + 3 IQR (diverged
//    trials), failed trials imputed at that worst value, log-warped when
//    heavily skewed, standardised.
//  - Model: Matern-5/2 ARD GP (gp.h). Hyperparameters are refitted at a
//    schedule of observation counts (every observation early, then every
//    ~10%), each fit a pure function of the first K observations in finish
//    order, so a restarted scheduler fits exactly what the running one did.
//    Past `max_fit_points` the fit uses a subset (the best half plus an even
//    spread); past `max_points` so does the posterior.
//  - Acquisition: log expected improvement, maximised over quasi-random and
//    perturbed-best candidates refined with bounded L-BFGS; pending trials
//    are fantasised at the posterior mean (kriging believer), so parallel
//    suggestions spread out and never repeat a pending or observed point.
//  - The first `initial_trials` come from a seeded scrambled Halton design.
//  - Several objectives (ParEGO): each suggestion scalarises the objectives,
//    normalised to [0, 1] over the observations, with the augmented
//    Chebyshev function under weights drawn from the simplex per trial
//    number, and maximises EI of that. Hyperparameters are fitted on the
//    equal-weight scalarisation, so they stay a function of the history.
//  - Warm start (ObservePrior), in place of the quasi-random phase: until
//    two of its own trials finish, a GP fitted once on the earlier
//    studies' trials (standardised on their own; hyperparameters from
//    their best half and a spread of the rest, 20 + 10 per input feature
//    in all and at most max_fit_points, length scales at most 1) proposes;
//    after that, that GP, conditioned again with the own observations'
//    scale (both standardised together, centred on the prior's upper
//    quartile), is the prior mean and the own observations are modelled
//    as residuals from it (stacked transfer), with the prior's
//    hyperparameters until the study has its initial trials and then
//    with ones fitted on the residuals scaled to unit size (then scaled
//    back; signal variance at most a quarter of the prior's). From the
//    study's initial trials on, every third trial is a quadratic
//    refinement step (quadratic_refinement.h) fitted on the best
//    kWarmRefinementShare of the study's own results, when that model
//    ranks them well enough.
//  - Constraints: a GP per constraint metric (standardised, same refit
//    schedule); the acquisition is EI times the probability that every
//    constraint holds (constrained EI), or that probability alone until a
//    feasible trial exists.
// Deterministic for a seed. Not thread-safe (see searcher.h).
#pragma once

#include <Eigen/Dense>
#include <memory>
#include <optional>
#include <vector>

#include "searchers/gp.h"
#include "searchers/pareto.h"
#include "searchers/searcher.h"
#include "searchers/trial_scheduler.h"

namespace dial::searchers {

// Maps configurations to the GP's input features and back.
class FeatureMap {
 public:
  explicit FeatureMap(const SearchSpace& space);
  int size() const { return size_; }
  Eigen::VectorXd Encode(const Params& params) const;
  // Nearest valid configuration (rounds ints, argmax of one-hot groups).
  Params Decode(const Eigen::VectorXd& features) const;

 private:
  const SearchSpace& space_;
  std::vector<int> offset_;  // first feature of each parameter
  std::vector<int> width_;   // 1, or the number of categories
  int size_ = 0;
};

// Warm start: the share of the study's own results (the best) that its
// quadratic refinement steps are fitted on.
inline constexpr double kWarmRefinementShare = 0.6;

class BayesianSearcher : public Searcher {
 public:
  struct Options {
    uint64_t seed = 0;
    int initial_trials = 0;  // 0: min(20, max(5, 2 * parameters))
    int max_fit_points = 200;
    int max_points = 500;
    int candidates = 1024;
    int local_starts = 5;
  };
  static absl::StatusOr<std::unique_ptr<BayesianSearcher>> Create(
      const v1::StudySpec& spec);
  static absl::StatusOr<std::unique_ptr<BayesianSearcher>> Create(
      const v1::StudySpec& spec, const Options& options);

  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  void Observe(const v1::Trial& trial) override;
  void ObservePrior(const v1::Trial& trial) override;
  bool WantsReports() const override { return !rungs_.empty(); }
  void ObserveReport(const v1::Trial& trial, int64_t step,
                     const Metrics& metrics) override;

  int initial_trials() const { return options_.initial_trials; }

 private:
  struct Observation {
    int64_t end_ms;
    int64_t number;
    Params params;
    Eigen::VectorXd features;
    double y;          // the first objective, minimised; NaN for a failed trial
    Point objectives;  // minimised, all of them; empty if failed
    std::vector<double> constraints;  // constraint metrics; NaN if absent
  };
  BayesianSearcher(SearchSpace space, const Options& options,
                   const v1::StudySpec& spec);
  Observation Make(int64_t end_ms, const v1::Trial& trial,
                   const Metrics& metrics) const;
  // The minimised target of each observation under `weights` (several
  // objectives: augmented Chebyshev over [0, 1]-normalised objectives);
  // NaN for failed ones.
  std::vector<double> Targets(const std::vector<const Observation*>& obs,
                              const std::vector<double>& weights) const;
  Params InitialDesign(int64_t number) const;
  // The hyperparameters for the current observations (refit on schedule).
  // The hyperparameters for `obs` (refit on schedule, per level).
  const GpHyperparameters& Hyperparameters(const std::vector<Observation>& obs,
                                           int level, int valid);

  SearchSpace space_;
  FeatureMap features_;
  Options options_;
  v1::StudySpec spec_;  // objectives and constraints
  int objectives_;
  // Constraint GPs' hyperparameters: (refit point, level) they are for.
  std::vector<GpHyperparameters> constraint_fits_;
  std::pair<int, int> constraint_fit_key_{-1, -2};
  std::vector<Observation> observations_;  // sorted by (end_ms, number)
  std::vector<Observation> stopped_;       // STOPPED trials, y NaN
  std::vector<Observation> priors_;        // warm start
  std::shared_ptr<const GaussianProcess> prior_gp_;  // fitted on priors_
  GpHyperparameters prior_h_;
  // Warm start: hyperparameters of the residual GP, and the (refit point,
  // level) they are for.
  GpHyperparameters residual_h_;
  std::pair<int, int> residual_fit_key_{-1, -2};
  // The warm-start prior's GP (fitted on first use).
  const GaussianProcess* PriorGp();

  // Suggest's steps.
  // What the model is fitted on.
  struct FitData {
    const std::vector<Observation>* chosen = nullptr;
    int level = -1;  // -1: final results; k: rung k; -3: the prior's trials
    int valid = 0;   // finite results among them
    const GaussianProcess* prior = nullptr;  // warm start's GP, if any
    bool prior_only = false;  // fewer than two results of its own
  };
  FitData ChooseFitData();
  // The objectives' weights for trial `number`: one each with one
  // objective, uniform on the simplex with several.
  std::vector<double> ScalarisationWeights(int64_t number) const;
  // The objective's model: the kept observations (rows 0..n-1 of x and y;
  // `pending` more rows left for the kriging believer), the
  // hyperparameters, and the conditioned GP (stacked on the prior's under
  // warm start).
  struct Model {
    std::vector<Observation> observations;  // chosen, then stopped ones
    std::vector<int> keep;
    int n = 0;
    Eigen::MatrixXd x;
    Eigen::VectorXd y;
    bool stacked = false;
    std::shared_ptr<const GaussianProcess> prior_gp;
    GpHyperparameters h;
    absl::StatusOr<GaussianProcess> gp;
  };
  // Warm start's quadratic refinement step (see Suggest), or nullopt.
  std::optional<Params> WarmRefinement(const FitData& data,
                                       const std::vector<Params>& pending,
                                       int64_t number) const;
  Model FitObjective(const FitData& data, const std::vector<double>& weights,
                     int pending);
  void FitResidualHyperparameters(const Model& m, const GaussianProcess& prior,
                                  int valid, int level);
  struct ConstraintModels {
    std::vector<GaussianProcess> gps;
    std::vector<std::pair<double, double>> bounds;  // standardised
    std::vector<bool> feasible;                     // per kept observation
  };
  ConstraintModels FitConstraints(const Model& m, int valid, int level);
  Params Acquire(Model& m, const ConstraintModels& c,
                 const std::vector<Params>& pending, int64_t number);
  RungResults<Observation> rungs_;
  int64_t report_seq_ = 0;
  int fitted_level_ = -2;  // -1: final results; k: rung k
  int fitted_at_ = -1;
  GpHyperparameters fitted_;
};

// Largest refit point <= n (refits happen when the observation count
// reaches one of these): every count up to 30, then every ~10%.
int RefitPoint(int n);

}  // namespace dial::searchers
