// TpeSearcher: the tree-structured Parzen estimator, for large,
// categorical-heavy or conditional spaces where a GP is the wrong tool.
// Each parameter is modelled on its own (as in Optuna's default TPE), over
// the trials where it was active: the best gamma(n) = min(ceil(n/10), 25)
// trials form the "good" density l(x), the rest (plus pending trials, as a
// constant liar, so parallel suggestions spread out) the "bad" density g(x).
// Numeric parameters use truncated-Gaussian Parzen windows in their unit
// coordinate (log space for LOG) with a prior component; categoricals use
// smoothed counts. Of 24 draws from l, the one maximising l/g wins. The
// first `initial_trials` (default 10) are random. Deterministic for a seed;
// state is the observed history, rebuilt on restart. Not thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "searchers/searcher.h"

namespace dial::searchers {

class TpeSearcher : public Searcher {
 public:
  struct Options {
    uint64_t seed = 0;
    int initial_trials = 10;
    int candidates = 24;
    double prior_weight = 1.0;
  };
  static absl::StatusOr<std::unique_ptr<TpeSearcher>> Create(
      const v1::StudySpec& spec);

  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  void Observe(const v1::Trial& trial) override;
  bool WantsReports() const override { return !rungs_.empty(); }
  void ObserveReport(
      const v1::Trial& trial, int64_t step,
      const google::protobuf::Map<std::string, double>& metrics) override;

 private:
  struct Observation {
    Params params;
    double y;  // minimised; +infinity for failed trials
  };
  TpeSearcher(SearchSpace space, const Options& options, bool maximize,
              std::vector<int64_t> rungs, std::string metric)
      : space_(std::move(space)),
        options_(options),
        maximize_(maximize),
        rungs_(std::move(rungs)),
        metric_(std::move(metric)) {}

  SearchSpace space_;
  Options options_;
  bool maximize_;
  std::vector<Observation> observations_;
  RungResults<Observation> rungs_;  // BOHB-style, under early stopping
  std::string metric_;
};

}  // namespace dial::searchers
