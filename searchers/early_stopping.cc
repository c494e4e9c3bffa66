#include "searchers/early_stopping.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "searchers/quantile.h"

namespace dial::searchers {
namespace {

v1::Decision Continue() {
  v1::Decision d;
  d.set_action(v1::Decision::CONTINUE);
  return d;
}

v1::Decision Stop(std::string reason) {
  v1::Decision d;
  d.set_action(v1::Decision::STOP);
  d.set_reason(std::move(reason));
  return d;
}

}  // namespace

std::optional<double> ObjectiveReader::Score(const Metrics& metrics) const {
  auto it = metrics.find(metric_);
  if (it == metrics.end() || !std::isfinite(it->second)) return std::nullopt;
  return maximize_ ? it->second : -it->second;
}

MedianStoppingScheduler::MedianStoppingScheduler(const v1::StudySpec& spec)
    : objective_(spec),
      grace_steps_(spec.scheduler().median().grace_steps()),
      min_samples_(spec.scheduler().median().min_samples() > 0
                       ? spec.scheduler().median().min_samples()
                       : 3) {}

void MedianStoppingScheduler::Replay(const v1::Trial& trial, int64_t step,
                                     const Metrics& metrics) {
  auto score = objective_.Score(metrics);
  if (!score) return;
  History& mine = trials_[trial.number()];
  mine.scores.push_back({step, *score});
  mine.best = std::max(mine.best, *score);
}

v1::Decision MedianStoppingScheduler::OnReport(const v1::Trial& trial,
                                               int64_t step,
                                               const Metrics& metrics) {
  auto score = objective_.Score(metrics);
  if (!score) return Continue();
  History& mine = trials_[trial.number()];
  mine.scores.push_back({step, *score});
  mine.best = std::max(mine.best, *score);
  if (step < grace_steps_) return Continue();
  std::vector<double> averages;
  for (const auto& [number, other] : trials_) {
    if (number == trial.number() || other.scores.empty() ||
        other.scores.back().first < step) {
      continue;  // has not reached this step
    }
    double sum = 0;
    int n = 0;
    for (const auto& [s, v] : other.scores) {
      if (s > step) break;
      sum += v;
      ++n;
    }
    if (n > 0) averages.push_back(sum / n);
  }
  if (static_cast<int>(averages.size()) < min_samples_) return Continue();
  const double median = Quantile(averages, 0.5);
  if (mine.best >= median) return Continue();
  return Stop(absl::StrCat("best ", objective_.metric(), " ",
                           objective_.Value(mine.best),
                           " is worse than the "
                           "median ",
                           objective_.Value(median), " of ", averages.size(),
                           " other trials' running averages "
                           "at step ",
                           step));
}

AshaScheduler::AshaScheduler(const v1::StudySpec& spec, int64_t min_steps,
                             int64_t max_steps, double eta, bool promotion)
    : objective_(spec),
      multi_(IsMultiObjective(spec)),
      eta_(eta),
      promotion_(promotion) {
  if (multi_) *spec_.mutable_objectives() = spec.objectives();
  for (double r = static_cast<double>(min_steps); r < max_steps; r *= eta) {
    rungs_.push_back(static_cast<int64_t>(std::llround(r)));
  }
  recorded_.resize(rungs_.size());
  ranked_.resize(rungs_.size());
  promoted_.resize(rungs_.size());
  points_.resize(multi_ ? rungs_.size() : 0);
}

std::vector<int64_t> AshaScheduler::ParetoRanked(size_t k) const {
  std::vector<int64_t> trials;
  std::vector<Point> points;
  for (const auto& [trial, point] : points_[k]) {
    trials.push_back(trial);
    points.push_back(point);
  }
  std::vector<int64_t> out;
  for (int i : ParetoOrder(points)) out.push_back(trials[i]);
  return out;
}

void AshaScheduler::Record(size_t k, int64_t trial, double score,
                           const Metrics& metrics) {
  if (!recorded_[k].emplace(trial, score).second) return;
  ranked_[k].insert({score, trial});
  if (multi_) {
    if (auto point = MinimizedObjectives(spec_, metrics)) {
      points_[k][trial] = std::move(*point);
    }
  }
}

std::optional<std::pair<size_t, int64_t>> AshaScheduler::FindPromotion() const {
  // Without the promotion variant no trial waits to be promoted.
  if (!promotion_) return std::nullopt;
  for (size_t k = rungs_.size(); k-- > 0;) {
    if (multi_) {
      const std::vector<int64_t> order = ParetoRanked(k);
      const size_t top = static_cast<size_t>(std::floor(order.size() / eta_));
      for (size_t i = 0; i < top; ++i) {
        if (!promoted_[k].count(order[i])) return std::make_pair(k, order[i]);
      }
      continue;
    }
    const RankedScores& ranked = ranked_[k];
    const size_t top = static_cast<size_t>(std::floor(ranked.size() / eta_));
    // Best first: highest score, then the higher trial number on ties.
    auto it = ranked.end();
    for (size_t i = 0; i < top; ++i) {
      --it;
      if (!promoted_[k].count(it->second)) return std::make_pair(k, it->second);
    }
  }
  return std::nullopt;
}

std::optional<int64_t> AshaScheduler::NextPromotion() {
  auto found = FindPromotion();
  if (!found) return std::nullopt;
  promoted_[found->first].insert(found->second);
  return found->second;
}

bool AshaScheduler::HasPromotion() const { return FindPromotion().has_value(); }

void AshaScheduler::Replay(const v1::Trial& trial, int64_t step,
                           const Metrics& metrics) {
  auto score = objective_.Score(metrics);
  if (!score) return;
  // Replays come trial by trial, steps rising: the rungs a trial has
  // reached and gone past only grow, so each is looked up once per trial.
  if (trial.number() != replay_trial_) {
    replay_trial_ = trial.number();
    replay_recorded_ = replay_promoted_ = 0;
  }
  for (size_t k = 0; k < rungs_.size() && rungs_[k] <= step; ++k) {
    if (rungs_[k] < step && k >= replay_promoted_) {
      promoted_[k].insert(trial.number());
      replay_promoted_ = k + 1;
    }
    if (k >= replay_recorded_) {
      Record(k, trial.number(), *score, metrics);
      replay_recorded_ = k + 1;
    }
  }
}

v1::Decision AshaScheduler::OnReport(const v1::Trial& trial, int64_t step,
                                     const Metrics& metrics) {
  auto score = objective_.Score(metrics);
  if (!score) return Continue();
  // Every rung this report reaches that the trial has not passed yet. The
  // report is recorded at each of them even when a lower one stops the
  // trial, so the rungs depend on the trial's reports alone and Replay
  // rebuilds them exactly (a stopped trial reports no more).
  bool reached_new_rung = false;
  int64_t rung_step = 0;
  std::optional<v1::Decision> stop;
  for (size_t k = 0; k < rungs_.size() && rungs_[k] <= step; ++k) {
    auto& rung = recorded_[k];
    // Reporting past a rung means the trial was let past it.
    if (rungs_[k] < step) promoted_[k].insert(trial.number());
    if (rung.count(trial.number())) continue;
    Record(k, trial.number(), *score, metrics);
    RankedScores& ranked = ranked_[k];
    reached_new_rung = true;
    rung_step = rungs_[k];
    if (promotion_ || stop) continue;
    if (multi_) {
      const std::vector<int64_t> order = ParetoRanked(k);
      const size_t keep = static_cast<size_t>(std::ceil(order.size() / eta_));
      const size_t place =
          std::find(order.begin(), order.end(), trial.number()) - order.begin();
      // A trial no other at the rung dominates goes on, as the best does
      // with one objective.
      bool dominated = false;
      auto mine = points_[k].find(trial.number());
      for (const auto& [other, point] : points_[k]) {
        if (mine != points_[k].end() && Dominates(point, mine->second)) {
          dominated = true;
          break;
        }
      }
      if (dominated && place < order.size() && place >= keep) {
        stop = Stop(absl::StrCat(
            "at rung ", rungs_[k], " its objectives place it ", place + 1,
            " of ", order.size(),
            " by non-dominated sorting, outside the first ", keep));
      }
      continue;
    }
    // Quantile(values, 1 - 1/eta) of the rung, from its ranks.
    const double pos = (1.0 - 1.0 / eta_) * (ranked.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, ranked.size() - 1);
    const double v_lo = ranked.find_by_order(lo)->first;
    const double cutoff =
        v_lo + (pos - lo) * (ranked.find_by_order(hi)->first - v_lo);
    if (*score < cutoff) {
      stop = Stop(absl::StrCat(
          objective_.metric(), " ", objective_.Value(*score), " at rung ",
          rungs_[k], " is outside the top 1/", eta_, " of ", ranked.size(),
          " trials (cut-off ", objective_.Value(cutoff), ")"));
    }
  }
  if (stop) return *stop;
  if (promotion_ && reached_new_rung &&
      !promoted_[std::min<size_t>(
                     rungs_.size() - 1,
                     std::upper_bound(rungs_.begin(), rungs_.end(), step) -
                         rungs_.begin() - 1)]
           .count(trial.number())) {
    v1::Decision d;
    d.set_action(v1::Decision::PAUSE);
    d.set_reason(absl::StrCat("waiting at rung ", rung_step, " for promotion"));
    return d;
  }
  return Continue();
}

AsyncHyperbandScheduler::AsyncHyperbandScheduler(const v1::StudySpec& spec) {
  const auto& hb = spec.scheduler().hyperband();
  const double eta = hb.reduction_factor();
  for (double first = static_cast<double>(hb.min_steps());
       first < hb.max_steps(); first *= eta) {
    brackets_.push_back(std::make_unique<AshaScheduler>(
        spec, static_cast<int64_t>(std::llround(first)), hb.max_steps(), eta));
  }
}

std::vector<int64_t> AsyncHyperbandScheduler::ReplaySteps() const {
  std::set<int64_t> steps;
  for (const auto& b : brackets_) {
    steps.insert(b->rungs().begin(), b->rungs().end());
  }
  return {steps.begin(), steps.end()};
}

void AsyncHyperbandScheduler::Replay(const v1::Trial& trial, int64_t step,
                                     const Metrics& metrics) {
  brackets_[static_cast<size_t>(trial.number()) % brackets_.size()]->Replay(
      trial, step, metrics);
}

v1::Decision AsyncHyperbandScheduler::OnReport(const v1::Trial& trial,
                                               int64_t step,
                                               const Metrics& metrics) {
  return brackets_[static_cast<size_t>(trial.number()) % brackets_.size()]
      ->OnReport(trial, step, metrics);
}

SyncHyperbandScheduler::SyncHyperbandScheduler(const v1::StudySpec& spec)
    : objective_(spec), eta_(spec.scheduler().hyperband().reduction_factor()) {
  const auto& hb = spec.scheduler().hyperband();
  for (double first = static_cast<double>(hb.min_steps());
       first < hb.max_steps(); first *= eta_) {
    Bracket b;
    for (double r = first; r < hb.max_steps(); r *= eta_) {
      b.rungs.push_back(static_cast<int64_t>(std::llround(r)));
    }
    b.recorded.resize(b.rungs.size());
    b.promoted.resize(b.rungs.size());
    brackets_.push_back(std::move(b));
  }
  for (int64_t n = 0; n < spec.budget().max_trials(); ++n) {
    brackets_[static_cast<size_t>(n) % brackets_.size()].members.insert(n);
  }
}

v1::Decision SyncHyperbandScheduler::OnReport(const v1::Trial& trial,
                                              int64_t step,
                                              const Metrics& metrics) {
  auto score = objective_.Score(metrics);
  if (!score) return Continue();
  Bracket& b =
      brackets_[static_cast<size_t>(trial.number()) % brackets_.size()];
  bool new_rung = false;
  bool passed_last = false;
  for (size_t k = 0; k < b.rungs.size() && b.rungs[k] <= step; ++k) {
    if (b.rungs[k] < step) b.promoted[k].insert(trial.number());
    passed_last = b.promoted[k].count(trial.number()) > 0;
    if (b.recorded[k].count(trial.number())) continue;
    b.recorded[k][trial.number()] = *score;
    new_rung = true;
  }
  if (new_rung && !passed_last) {
    v1::Decision d;
    d.set_action(v1::Decision::PAUSE);
    d.set_reason("waiting for the bracket's round to finish");
    return d;
  }
  return Continue();
}

void SyncHyperbandScheduler::OnTrialFinished(const v1::Trial& trial) {
  ended_.insert(trial.number());
}

std::optional<std::pair<SyncHyperbandScheduler::Bracket*, int64_t>>
SyncHyperbandScheduler::Find(size_t* rung) const {
  for (auto& b : brackets_) {
    // Rounds in order: round k is complete when everyone who entered it
    // (all members for k = 0, the promoted of round k - 1 after) reached
    // rung k or ended; its best 1/eta go on.
    for (size_t k = 0; k < b.rungs.size(); ++k) {
      const std::set<int64_t>& entered = k == 0 ? b.members : b.promoted[k - 1];
      bool complete = !entered.empty();
      for (int64_t m : entered) {
        if (!b.recorded[k].count(m) && !ended_.count(m)) {
          complete = false;
          break;
        }
      }
      if (!complete) break;
      std::vector<std::pair<double, int64_t>> ranked;
      for (const auto& [n, v] : b.recorded[k]) {
        if (entered.count(n)) ranked.push_back({v, n});
      }
      std::sort(ranked.rbegin(), ranked.rend());
      const size_t top = std::max<size_t>(
          1, static_cast<size_t>(std::floor(ranked.size() / eta_)));
      for (size_t i = 0; i < top && i < ranked.size(); ++i) {
        if (!b.promoted[k].count(ranked[i].second) &&
            !ended_.count(ranked[i].second)) {
          *rung = k;
          return std::make_pair(&b, ranked[i].second);
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<int64_t> SyncHyperbandScheduler::NextPromotion() {
  size_t rung = 0;
  auto found = Find(&rung);
  if (!found) return std::nullopt;
  found->first->promoted[rung].insert(found->second);
  return found->second;
}

bool SyncHyperbandScheduler::HasPromotion() const {
  size_t rung = 0;
  return Find(&rung).has_value();
}

}  // namespace dial::searchers
