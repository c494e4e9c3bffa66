#include "scheduler/study_entry.h"

#include <algorithm>
#include <cmath>

namespace dial::scheduler {

bool IsOpen(v1::TrialState state) {
  return state == v1::PENDING || state == v1::RUNNING || state == v1::PAUSED;
}

bool IsFinal(v1::TrialState state) {
  return state == v1::COMPLETED || state == v1::STOPPED || state == v1::FAILED;
}

void StudyEntry::Mirror(v1::Trial trial) {
  auto active = [](v1::TrialState s) {
    return s == v1::PENDING || s == v1::RUNNING;
  };
  const bool maximize = study.spec().objective().goal() == v1::MAXIMIZE;
  // Best first: the highest value when maximising, the lowest otherwise;
  // the lower trial number on ties.
  auto rank_key = [maximize, this](const v1::Trial& t) {
    double value = t.objective_value();
    auto runs = reruns.find(t.number());
    if (runs != reruns.end() && !runs->second.empty()) {
      for (const auto& [n, v] : runs->second) value += v;
      value /= double(runs->second.size() + 1);
    }
    return std::make_pair(maximize ? -value : value, t.number());
  };
  const v1::StudySpec& spec = study.spec();
  auto is_ranked = [&spec](const v1::Trial& t) {
    return t.state() == v1::COMPLETED && t.has_objective_value() &&
           !t.has_origin() && searchers::IsFeasible(spec, t.final_metrics());
  };
  const int64_t number = trial.number();
  if (trial.has_origin()) {
    // A re-evaluation moves its origin's rank (the mean over its runs).
    auto origin = trials.find(trial.origin());
    const bool origin_ranked =
        origin != trials.end() && is_ranked(origin->second);
    if (origin_ranked) ranked.erase(rank_key(origin->second));
    auto& runs = reruns[trial.origin()];
    runs.erase(number);
    if (trial.state() == v1::COMPLETED && trial.has_objective_value()) {
      runs[number] = trial.objective_value();
    }
    if (origin_ranked) {
      ranked.insert(rank_key(origin->second));
      front.reset();
    }
  }
  auto it = trials.find(number);
  if (it != trials.end()) {
    const v1::Trial& old = it->second;
    if (active(old.state())) --active_trials;
    if (IsOpen(old.state())) {
      --open_trials;
      open.erase(number);
      if (!old.client_id().empty()) {
        open_by_client[old.client_id()].erase(number);
      }
    }
    if (old.state() == v1::PENDING) pending.erase(number);
    if (is_ranked(old)) {
      ranked.erase(rank_key(old));
      front.reset();
    }
    --state_counts[old.state()];
  }
  v1::Trial& stored = trials[number];
  stored = std::move(trial);
  stored.clear_metric_history();
  const v1::Trial& now = stored;
  if (active(now.state())) ++active_trials;
  if (IsOpen(now.state())) {
    ++open_trials;
    open.insert(number);
    if (!now.client_id().empty()) {
      open_by_client[now.client_id()].insert(number);
    }
  }
  if (now.state() == v1::PENDING) pending.insert(number);
  if (is_ranked(now)) {
    ranked.insert(rank_key(now));
    front.reset();
  }
  ++state_counts[now.state()];
}

v1::Study StudyEntry::WithCounts() const {
  v1::Study out = study;
  auto& counts = *out.mutable_trial_counts();
  for (const auto& [state, n] : state_counts) {
    if (n > 0) counts[v1::TrialState_Name(state)] = n;
  }
  out.set_trials_created(static_cast<int32_t>(trials.size()));
  out.clear_prior_trials();
  return out;
}

std::optional<v1::SeedRuns> StudyEntry::Runs(int64_t number) const {
  auto runs = reruns.find(number);
  auto trial = trials.find(number);
  if (runs == reruns.end() || runs->second.empty() || trial == trials.end() ||
      !trial->second.has_objective_value()) {
    return std::nullopt;
  }
  std::vector<double> values = {trial->second.objective_value()};
  for (const auto& [n, v] : runs->second) values.push_back(v);
  double mean = 0;
  for (double v : values) mean += v;
  mean /= double(values.size());
  double ss = 0;
  for (double v : values) ss += (v - mean) * (v - mean);
  v1::SeedRuns out;
  out.set_trial(number);
  out.set_runs(static_cast<int32_t>(values.size()));
  out.set_mean(mean);
  out.set_stddev(std::sqrt(ss / double(values.size() - 1)));
  return out;
}

const v1::Trial* StudyEntry::Best() const {
  if (ranked.empty()) return nullptr;
  if (searchers::IsMultiObjective(study.spec())) {
    const auto& front_trials = ParetoFront().trials;
    return front_trials.empty() ? nullptr : &trials.at(front_trials.front());
  }
  return &trials.at(ranked.begin()->second);
}

const StudyEntry::Front& StudyEntry::ParetoFront() const {
  if (front) return *front;
  const v1::StudySpec& spec = study.spec();
  std::vector<int64_t> numbers;
  std::vector<searchers::Point> points;
  for (const auto& [value, number] : ranked) {
    if (auto p = searchers::MinimizedObjectives(spec, trials.at(number))) {
      numbers.push_back(number);
      points.push_back(std::move(*p));
    }
  }
  const std::vector<int> members = searchers::ParetoFront(points);
  const std::vector<double> crowding =
      searchers::CrowdingDistances(points, members);
  std::vector<size_t> order(members.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (crowding[a] != crowding[b]) return crowding[a] > crowding[b];
    return numbers[members[a]] < numbers[members[b]];
  });
  Front out;
  std::vector<searchers::Point> front_points;
  for (size_t k : order) {
    out.trials.push_back(numbers[members[k]]);
    front_points.push_back(points[members[k]]);
  }
  const auto objectives = searchers::Objectives(spec);
  const searchers::Point reference =
      searchers::ReferencePoint(objectives, points);
  out.hypervolume = searchers::Hypervolume(front_points, reference);
  for (size_t d = 0; d < reference.size(); ++d) {
    out.reference.push_back(
        objectives[d].goal() == v1::MAXIMIZE ? -reference[d] : reference[d]);
  }
  front = std::move(out);
  return *front;
}

bool StudyEntry::CanCreate() const {
  const auto& budget = study.spec().budget();
  return !deleted && study.state() == v1::STUDY_ACTIVE &&
         (!exhausted || !study.queue().empty()) &&
         int64_t(trials.size()) < budget.max_trials() &&
         active_trials < budget.max_parallel_trials();
}

}  // namespace dial::scheduler
