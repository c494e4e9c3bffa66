// The rank check (scheduler.rank_check): a guard around a stopping trial
// scheduler for curves that cross. Stopping early is only as good as the
// ranking at the step it cuts at: where slow starters overtake fast ones,
// ASHA, the median rule and their peers stop the eventual winners. This
// wrapper lets the inner scheduler's STOP (or PAUSE) of a trial at step s
// stand only once the study has evidence that rankings at s hold: at least
// min_trials completed trials whose values at s and at their end have a
// Spearman rank correlation of at least min_correlation. Until then the
// trial goes on, as under FIFO.
//
// The evidence is a function of the completed trials' reports alone, so a
// restarted scheduler that replays them (and the finished trials) reaches
// the same state. Not thread-safe (see trial_scheduler.h).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "searchers/early_stopping.h"
#include "searchers/trial_scheduler.h"

namespace dial::searchers {

// Spearman's rank correlation of two equally long series (ties get their
// average rank); nullopt when fewer than two values or either series is
// constant. Pure; exposed for tests.
std::optional<double> SpearmanCorrelation(const std::vector<double>& a,
                                          const std::vector<double>& b);

class RankCheckedScheduler : public TrialScheduler {
 public:
  RankCheckedScheduler(const v1::StudySpec& spec,
                       std::unique_ptr<TrialScheduler> inner);
  v1::Decision OnReport(const v1::Trial& trial, int64_t step,
                        const Metrics& metrics) override;
  void Replay(const v1::Trial& trial, int64_t step,
              const Metrics& metrics) override;
  // The inner scheduler's: the check reads the same reports it does.
  std::vector<int64_t> ReplaySteps() const override { return steps_; }
  void OnTrialFinished(const v1::Trial& trial) override;
  void OnCheckpoint(const v1::Trial& trial) override {
    inner_->OnCheckpoint(trial);
  }
  // Promotions of trials whose PAUSE was overruled are skipped: they went
  // on already.
  std::optional<int64_t> NextPromotion() override;
  bool HasPromotion() const override { return inner_->HasPromotion(); }

  // Whether a STOP or PAUSE at `step` would stand now, and the correlation
  // it rests on (nullopt: too few completed trials reached the step).
  bool Holds(int64_t step, std::optional<double>* correlation = nullptr);

 private:
  // A trial's values as the check reads them: with replay steps, the first
  // report at or after each; without, every report. And the last one.
  struct Curve {
    std::map<int64_t, double> at;
    double last = 0;
    size_t next = 0;  // the first replay step not recorded yet
    bool completed = false;
  };
  void Record(int64_t trial, int64_t step, double score);
  // The key of `at` a decision at `step` compares: the step itself, or
  // with replay steps the last one at or before it (nullopt: none).
  std::optional<int64_t> KeyOf(int64_t step) const;
  // A curve's value at that key.
  std::optional<double> ValueAt(const Curve& curve, int64_t key) const;

  ObjectiveReader objective_;
  std::unique_ptr<TrialScheduler> inner_;
  std::vector<int64_t> steps_;
  int min_trials_;
  double min_correlation_;
  // Running trials' curves and the latest completed ones'.
  std::map<int64_t, Curve> curves_;
  std::deque<int64_t> completed_;  // the compared window, oldest first
  std::set<int64_t> went_on_;      // trials whose PAUSE was overruled
  // The check's key step -> its correlation, until the next completion
  std::map<int64_t, std::optional<double>> cache_;
};

}  // namespace dial::searchers
