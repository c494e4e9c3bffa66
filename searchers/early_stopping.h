// Early-stopping trial schedulers: the median stopping rule, asynchronous
// successive halving (ASHA, stopping variant) and asynchronous Hyperband
// (ASHA brackets). Each decides on every report from the reports it has
// seen, deterministically, so a restarted scheduler that replays the stored
// reports in time order reaches the same state. Not thread-safe (see
// trial_scheduler.h).
#pragma once

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "searchers/pareto.h"
#include "searchers/trial_scheduler.h"

namespace dial::searchers {

// Reads the objective from a report, oriented so that higher is better.
class ObjectiveReader {
 public:
  explicit ObjectiveReader(const v1::StudySpec& spec)
      : metric_(spec.objective().metric()),
        maximize_(spec.objective().goal() == v1::MAXIMIZE) {}
  std::optional<double> Score(const Metrics& metrics) const;
  // The value as the user sees it (for reasons in decisions).
  double Value(double score) const { return maximize_ ? score : -score; }
  const std::string& metric() const { return metric_; }

 private:
  std::string metric_;
  bool maximize_;
};

// Stops a trial whose best value so far is worse than the median of the
// other trials' running averages at the same step, once the trial is past
// `grace_steps` and at least `min_samples` other trials reached that step.
class MedianStoppingScheduler : public TrialScheduler {
 public:
  explicit MedianStoppingScheduler(const v1::StudySpec& spec);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  void Replay(const v1::Trial& trial, int64_t step,
              const Metrics& metrics) override;

 private:
  struct History {
    std::vector<std::pair<int64_t, double>> scores;  // by step
    double best = -1e300;
  };
  ObjectiveReader objective_;
  int64_t grace_steps_;
  int min_samples_;
  std::map<int64_t, History> trials_;
};

// Successive-halving rungs at min_steps * eta^k below max_steps. The first
// report at or past a rung records the trial's value there.
//  - Stopping variant: a trial whose value falls below the (1 - 1/eta)
//    quantile of all values recorded at that rung so far is stopped.
//  - Promotion variant (the ASHA paper's): every trial PAUSEs at each rung;
//    NextPromotion resumes the best not-yet-promoted trial that is in the
//    top 1/eta of its rung, highest rung first; otherwise a new trial starts.
//  - Several objectives (MOASHA): a rung ranks its trials by non-dominated
//    sorting, then crowding distance, then trial number (pareto.h); a trial
//    that another at the rung dominates and whose place is not within the
//    first ceil(n/eta) of the n recorded is stopped, and promotion takes
//    from the first floor(n/eta).
// (score, trial) pairs in ascending order with ranks: the k-th in O(log n).
using RankedScores =
    __gnu_pbds::tree<std::pair<double, int64_t>, __gnu_pbds::null_type,
                     std::less<std::pair<double, int64_t>>,
                     __gnu_pbds::rb_tree_tag,
                     __gnu_pbds::tree_order_statistics_node_update>;

class AshaScheduler : public TrialScheduler {
 public:
  AshaScheduler(const v1::StudySpec& spec, int64_t min_steps, int64_t max_steps,
                double eta, bool promotion = false);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  // Records the rung values only: they depend on each trial's own reports,
  // so replaying trial by trial rebuilds the rungs as they were.
  void Replay(const v1::Trial& trial, int64_t step,
              const Metrics& metrics) override;
  // Its rungs: a rung's value is the first report with a finite objective
  // at or after it, and a trial went past a rung if its last such report
  // is beyond it.
  std::vector<int64_t> ReplaySteps() const override { return rungs_; }
  std::optional<int64_t> NextPromotion() override;
  bool HasPromotion() const override;
  const std::vector<int64_t>& rungs() const { return rungs_; }

 private:
  // The best promotable trial, highest rung first: (rung, trial).
  std::optional<std::pair<size_t, int64_t>> FindPromotion() const;
  // Several objectives: rung k's trials, best first.
  std::vector<int64_t> ParetoRanked(size_t k) const;
  void Record(size_t k, int64_t trial, double score, const Metrics& metrics);

  ObjectiveReader objective_;
  v1::StudySpec spec_;  // the objectives, for several
  bool multi_;
  // Several objectives: rung index -> trial -> minimised objectives
  std::vector<std::map<int64_t, Point>> points_;
  double eta_;
  bool promotion_;
  std::vector<int64_t> rungs_;
  // rung index -> trial -> value recorded there
  std::vector<std::map<int64_t, double>> recorded_;
  // rung index -> the same values in order, for the cut-off and the top
  // 1/eta in O(log n) however full the rung is
  std::vector<RankedScores> ranked_;
  // Replay's place: the trial it is in and how many rungs of that trial it
  // has recorded and promoted.
  int64_t replay_trial_ = -1;
  size_t replay_recorded_ = 0, replay_promoted_ = 0;
  // rung index -> trials that went on past it
  std::vector<std::set<int64_t>> promoted_;
};

// Asynchronous Hyperband: brackets of ASHA whose first rung is
// min_steps * eta^b, so later brackets give every trial a longer run before
// the first cut. Trial n goes to bracket n mod the number of brackets.
class AsyncHyperbandScheduler : public TrialScheduler {
 public:
  explicit AsyncHyperbandScheduler(const v1::StudySpec& spec);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  void Replay(const v1::Trial& trial, int64_t step,
              const Metrics& metrics) override;
  // Every bracket's rungs (a trial's rows at other brackets' rungs are
  // read by nobody).
  std::vector<int64_t> ReplaySteps() const override;
  int brackets() const { return static_cast<int>(brackets_.size()); }

 private:
  std::vector<std::unique_ptr<AshaScheduler>> brackets_;
};

// Synchronous Hyperband: brackets of successive halving. Trial n belongs
// to bracket n mod B, whose first rung is min_steps * eta^b. Every trial
// PAUSEs at each rung; once every member of a bracket has reached a rung
// (or ended), the best 1/eta of them are resumed and the others wait until
// the study's budget is used, then stop. Members are known in advance:
// the trial numbers below max_trials.
class SyncHyperbandScheduler : public TrialScheduler {
 public:
  explicit SyncHyperbandScheduler(const v1::StudySpec& spec);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  void OnTrialFinished(const v1::Trial& trial) override;
  std::optional<int64_t> NextPromotion() override;
  bool HasPromotion() const override;
  int brackets() const { return static_cast<int>(brackets_.size()); }

 private:
  struct Bracket {
    std::vector<int64_t> rungs;
    std::vector<std::map<int64_t, double>> recorded;  // per rung
    std::vector<std::set<int64_t>> promoted;          // per rung
    std::set<int64_t> members;
  };
  std::optional<std::pair<Bracket*, int64_t>> Find(size_t* rung) const;

  ObjectiveReader objective_;
  double eta_;
  mutable std::vector<Bracket> brackets_;
  std::set<int64_t> ended_;
};

}  // namespace dial::searchers
