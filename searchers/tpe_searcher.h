// TpeSearcher: the tree-structured Parzen estimator, for large,
// categorical-heavy or conditional spaces where a GP is the wrong tool.
// Each parameter is modelled on its own (as in Optuna's default TPE), over
// the trials where it was active: the best gamma(n) = min(ceil(n/10), 25)
// trials form the "good" density l(x), the rest (plus pending trials, as a
// constant liar, so parallel suggestions spread out) the "bad" density g(x).
// Numeric parameters use truncated-Gaussian Parzen windows in their unit
// coordinate (log space for LOG) with a prior component; categoricals use
// smoothed counts. Of 24 draws from l, the one maximising l/g wins. The
// first `initial_trials` (default 10) are random.
// Refinement steps (on unless `no_surrogate`): every even-numbered trial
// past the random ones, a linear-quadratic model of the best results
// (quadratic_refinement.h) proposes its minimum in a box around the incumbent
// when it ranks held-out results well enough; otherwise, and for several
// objectives or constraints, the trial is TPE's. Only the numeric
// parameters active in the incumbent move; the rest are the incumbent's.
// Several objectives (MOTPE) and constraints: "best" is the order of
// constrained non-dominated sorting (feasible first, then rank, crowding
// distance, trial number; pareto.h); failed trials come last. Deterministic for
// a seed; state is the observed history, rebuilt on restart. Not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "searchers/pareto.h"
#include "searchers/searcher.h"

namespace dial::searchers {

class TpeSearcher : public Searcher {
 public:
  struct Options {
    uint64_t seed = 0;
    int initial_trials = 10;
    int candidates = 24;
    double prior_weight = 1.0;
    bool refine = true;  // quadratic-model refinement steps
  };
  static absl::StatusOr<std::unique_ptr<TpeSearcher>> Create(
      const v1::StudySpec& spec);

  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  void Observe(const v1::Trial& trial) override;
  // Warm start: the prior's best gamma join the good group and the rest
  // the bad one (split within the prior, so a shifted scale does not mix
  // with the study's own), older than any of the study's trials, until the
  // study has twice its initial trials.
  void ObservePrior(const v1::Trial& trial) override;
  bool WantsReports() const override { return !rungs_.empty(); }
  void ObserveReport(
      const v1::Trial& trial, int64_t step,
      const google::protobuf::Map<std::string, double>& metrics) override;

 private:
  struct Observation {
    Params params;
    Point y;  // minimised; +infinity for failed trials
    double violation = 0;
  };
  // A refinement step (see the header comment), or nullopt when the model
  // of the best results does not predict them well enough, or the step
  // would repeat a configuration tried or in flight.
  std::optional<Params> Refine(const std::vector<Observation>& obs,
                               const std::vector<Params>& pending,
                               int64_t number) const;
  TpeSearcher(SearchSpace space, const Options& options,
              const v1::StudySpec& spec)
      : space_(std::move(space)),
        options_(options),
        spec_(spec),
        ranked_split_(IsMultiObjective(spec) || spec.constraints_size() > 0),
        rungs_(RungSteps(spec)) {}
  // Observation indices, best first.
  std::vector<size_t> BestFirst(const std::vector<Observation>& obs) const;

  SearchSpace space_;
  Options options_;
  v1::StudySpec spec_;
  bool ranked_split_;  // several objectives or constraints
  std::vector<Observation> observations_;
  std::vector<Observation> priors_;
  RungResults<Observation> rungs_;  // BOHB-style, under early stopping
};

}  // namespace dial::searchers
