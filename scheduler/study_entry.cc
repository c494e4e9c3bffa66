#include "scheduler/study_entry.h"

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
  auto rank_key = [maximize](const v1::Trial& t) {
    return std::make_pair(maximize ? -t.objective_value() : t.objective_value(),
                          t.number());
  };
  auto is_ranked = [](const v1::Trial& t) {
    return t.state() == v1::COMPLETED && t.has_objective_value();
  };
  const int64_t number = trial.number();
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
    if (is_ranked(old)) ranked.erase(rank_key(old));
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
  if (is_ranked(now)) ranked.insert(rank_key(now));
  ++state_counts[now.state()];
}

v1::Study StudyEntry::WithCounts() const {
  v1::Study out = study;
  auto& counts = *out.mutable_trial_counts();
  for (const auto& [state, n] : state_counts) {
    if (n > 0) counts[v1::TrialState_Name(state)] = n;
  }
  out.set_trials_created(static_cast<int32_t>(trials.size()));
  return out;
}

const v1::Trial* StudyEntry::Best() const {
  if (ranked.empty()) return nullptr;
  return &trials.at(ranked.begin()->second);
}

bool StudyEntry::CanCreate() const {
  const auto& budget = study.spec().budget();
  return !deleted && study.state() == v1::STUDY_ACTIVE && !exhausted &&
         int64_t(trials.size()) < budget.max_trials() &&
         active_trials < budget.max_parallel_trials();
}

}  // namespace dial::scheduler
