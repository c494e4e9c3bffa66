#include "searchers/rank_check.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dial::searchers {
namespace {

// The check reads at most this many completed trials, the latest ones, so
// its cost stays bounded in a study of 100,000 trials.
constexpr size_t kMaxCompared = 200;

// 1-based ranks, ties sharing their average rank.
std::vector<double> AverageRanks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double rank = (i + j) / 2.0 + 1;
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = rank;
    i = j + 1;
  }
  return ranks;
}

}  // namespace

std::optional<double> SpearmanCorrelation(const std::vector<double>& a,
                                          const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return std::nullopt;
  const std::vector<double> ra = AverageRanks(a), rb = AverageRanks(b);
  const double mean = (a.size() + 1) / 2.0;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (saa == 0 || sbb == 0) return std::nullopt;
  return sab / std::sqrt(saa * sbb);
}

RankCheckedScheduler::RankCheckedScheduler(
    const v1::StudySpec& spec, std::unique_ptr<TrialScheduler> inner)
    : objective_(spec),
      inner_(std::move(inner)),
      steps_(inner_->ReplaySteps()),
      min_trials_(spec.scheduler().rank_check().min_trials() > 0
                      ? spec.scheduler().rank_check().min_trials()
                      : 8),
      min_correlation_(spec.scheduler().rank_check().min_correlation() > 0
                           ? spec.scheduler().rank_check().min_correlation()
                           : 0.7) {
  std::sort(steps_.begin(), steps_.end());
  steps_.erase(std::unique(steps_.begin(), steps_.end()), steps_.end());
}

void RankCheckedScheduler::Record(int64_t trial, int64_t step, double score) {
  Curve& curve = curves_[trial];
  curve.last = score;
  if (steps_.empty()) {
    curve.at.emplace(step, score);
    return;
  }
  // The same points the store's filtered replay yields: the first report
  // at or after each replay step.
  for (; curve.next < steps_.size() && steps_[curve.next] <= step;
       ++curve.next) {
    curve.at[steps_[curve.next]] = score;
  }
}

std::optional<int64_t> RankCheckedScheduler::KeyOf(int64_t step) const {
  if (steps_.empty()) return step;
  // The decision is about the last replay step (rung) the report reached.
  auto rung = std::upper_bound(steps_.begin(), steps_.end(), step);
  if (rung == steps_.begin()) return std::nullopt;
  return *std::prev(rung);
}

std::optional<double> RankCheckedScheduler::ValueAt(const Curve& curve,
                                                    int64_t key) const {
  // Every report is kept without replay steps: the first at or after it.
  auto it = steps_.empty() ? curve.at.lower_bound(key) : curve.at.find(key);
  if (it == curve.at.end()) return std::nullopt;
  return it->second;
}

bool RankCheckedScheduler::Holds(int64_t step,
                                 std::optional<double>* correlation) {
  // Decisions at steps sharing a rung (or a report step) share the answer.
  const std::optional<int64_t> key = KeyOf(step);
  if (!key) {
    if (correlation) *correlation = std::nullopt;
    return false;  // before the first rung: nothing to compare
  }
  auto cached = cache_.find(*key);
  if (cached == cache_.end()) {
    std::vector<double> early, final;
    for (int64_t number : completed_) {
      const Curve& curve = curves_.at(number);
      if (auto value = ValueAt(curve, *key)) {
        early.push_back(*value);
        final.push_back(curve.last);
      }
    }
    std::optional<double> rho;
    if (static_cast<int>(early.size()) >= min_trials_) {
      rho = SpearmanCorrelation(early, final);
      if (!rho) rho = 0;  // constant values rank nothing
    }
    cached = cache_.emplace(*key, rho).first;
  }
  if (correlation) *correlation = cached->second;
  return cached->second && *cached->second >= min_correlation_;
}

v1::Decision RankCheckedScheduler::OnReport(const v1::Trial& trial,
                                            int64_t step,
                                            const Metrics& metrics) {
  // A trial let past a PAUSE has now gone past that rung: the inner
  // scheduler counts it as promoted there, and a later PAUSE of it may
  // stand and be promoted as any other.
  went_on_.erase(trial.number());
  if (auto score = objective_.Score(metrics)) {
    Record(trial.number(), step, *score);
  }
  v1::Decision decision = inner_->OnReport(trial, step, metrics);
  if (decision.action() != v1::Decision::STOP &&
      decision.action() != v1::Decision::PAUSE) {
    return decision;
  }
  if (Holds(step)) return decision;
  if (decision.action() == v1::Decision::PAUSE) {
    went_on_.insert(trial.number());
  }
  v1::Decision go_on;
  go_on.set_action(v1::Decision::CONTINUE);
  return go_on;
}

void RankCheckedScheduler::Replay(const v1::Trial& trial, int64_t step,
                                  const Metrics& metrics) {
  // Only completed and still open trials' curves can be evidence; a
  // restart does not hold every stopped trial's reports.
  const bool kept = trial.state() != v1::STOPPED && trial.state() != v1::FAILED;
  if (auto score = objective_.Score(metrics); score && kept) {
    Record(trial.number(), step, *score);
  }
  inner_->Replay(trial, step, metrics);
}

void RankCheckedScheduler::OnTrialFinished(const v1::Trial& trial) {
  went_on_.erase(trial.number());
  inner_->OnTrialFinished(trial);
  auto it = curves_.find(trial.number());
  if (it == curves_.end() || it->second.completed) return;
  // Only curves that ran to their own end are evidence; the others and
  // those that fall out of the compared window are let go.
  if (trial.state() != v1::COMPLETED) {
    curves_.erase(it);
    return;
  }
  it->second.completed = true;
  completed_.push_back(trial.number());
  cache_.clear();
  if (completed_.size() > kMaxCompared) {
    curves_.erase(completed_.front());
    completed_.pop_front();
  }
}

std::optional<int64_t> RankCheckedScheduler::NextPromotion() {
  while (auto number = inner_->NextPromotion()) {
    if (!went_on_.count(*number)) return number;
  }
  return std::nullopt;
}

}  // namespace dial::searchers
