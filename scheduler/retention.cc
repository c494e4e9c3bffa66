#include "scheduler/retention.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "storage/checkpoint_store.h"

namespace dial::scheduler {

namespace {

// The trial a checkpoint id belongs to: <study>/<trial>/...
std::optional<int64_t> TrialOf(const std::string& id) {
  std::vector<absl::string_view> parts = absl::StrSplit(id, '/');
  int64_t trial = 0;
  if (parts.size() < 3 || !absl::SimpleAtoi(parts[1], &trial)) {
    return std::nullopt;
  }
  return trial;
}

}  // namespace

std::vector<DoomedCheckpoint> CheckpointRetention::Record(
    const v1::Study& study, int64_t trial, int64_t step, double score,
    const std::string& id) {
  PerStudy& state = studies_[study.name()];
  state.scores[trial][step] = {score, id};
  state.restore[trial] = step;
  return Retain(study, state, trial);
}

std::vector<DoomedCheckpoint> CheckpointRetention::Restore(
    const v1::Study& study,
    const std::vector<storage::CheckpointRecord>& records,
    const std::map<int64_t, v1::Trial>& trials) {
  PerStudy& state = studies_[study.name()];
  for (const auto& [number, trial] : trials) {
    // An index entry newer than the trial's restore point (its report was
    // not saved) must not cost the checkpoint the trial resumes from.
    if (trial.checkpoint() ==
        storage::CheckpointStore::MakeId(study.name(), number,
                                         trial.checkpoint_step())) {
      state.restore[number] = trial.checkpoint_step();
    }
  }
  for (const auto& [number, trial] : trials) {
    // A RUNNING trial whose last report got the exploit has not copied
    // its source yet (it would have reported again).
    if (trial.state() != v1::RUNNING || trial.lineage_size() == 0) continue;
    const v1::LineageEntry& last = trial.lineage(trial.lineage_size() - 1);
    if (last.step() != trial.last_step()) continue;
    state
        .pins[storage::CheckpointStore::MakeId(
            study.name(), last.source_trial(), last.source_step())]
        .insert(number);
  }
  std::set<int64_t> touched;
  for (const auto& record : records) {
    state.scores[record.trial][record.step] = {
        record.score, record.id.empty()
                          ? storage::CheckpointStore::MakeId(
                                study.name(), record.trial, record.step)
                          : record.id};
    touched.insert(record.trial);
  }
  std::vector<DoomedCheckpoint> doomed;
  for (int64_t trial : touched) {
    for (auto& d : Retain(study, state, trial)) doomed.push_back(std::move(d));
  }
  return doomed;
}

void CheckpointRetention::Pin(const std::string& study, const std::string& id,
                              int64_t trial) {
  studies_[study].pins[id].insert(trial);
}

std::vector<DoomedCheckpoint> CheckpointRetention::Release(
    const v1::Study& study, int64_t trial) {
  auto found = studies_.find(study.name());
  if (found == studies_.end()) return {};
  PerStudy& state = found->second;
  std::vector<DoomedCheckpoint> doomed;
  for (auto pin = state.pins.begin(); pin != state.pins.end();) {
    if (!pin->second.erase(trial) || !pin->second.empty()) {
      ++pin;
      continue;
    }
    std::optional<int64_t> source = TrialOf(pin->first);
    pin = state.pins.erase(pin);
    if (source) {
      for (auto& d : Retain(study, state, *source)) {
        doomed.push_back(std::move(d));
      }
    }
  }
  return doomed;
}

std::vector<DoomedCheckpoint> CheckpointRetention::Retain(
    const v1::Study& study, PerStudy& state, int64_t trial) {
  const int keep_best = study.spec().checkpoints().keep_best() == 0
                            ? 2
                            : study.spec().checkpoints().keep_best();
  auto it = state.scores.find(trial);
  if (keep_best < 0 || it == state.scores.end() || it->second.empty()) {
    return {};
  }
  auto& scores = it->second;
  std::set<int64_t> keep = {scores.rbegin()->first};  // the latest
  auto restore = state.restore.find(trial);
  if (restore != state.restore.end()) keep.insert(restore->second);
  std::vector<std::pair<double, int64_t>> ranked;
  for (const auto& [step, entry] : scores) {
    ranked.push_back({entry.score, -step});
  }
  std::sort(ranked.rbegin(), ranked.rend());  // best first, earlier on ties
  for (int i = 0; i < keep_best && i < static_cast<int>(ranked.size()); ++i) {
    keep.insert(-ranked[i].second);
  }
  // A path a kept step (or a pending exploit) names stays on disk, however
  // many other steps named it too.
  std::set<std::string> kept_ids;
  for (const auto& [step, entry] : scores) {
    if (keep.count(step) || state.pins.count(entry.id))
      kept_ids.insert(entry.id);
  }
  std::vector<DoomedCheckpoint> doomed;
  for (auto s = scores.begin(); s != scores.end();) {
    if (keep.count(s->first) || state.pins.count(s->second.id)) {
      ++s;
      continue;
    }
    doomed.push_back({s->second.id, study.name(), trial, s->first,
                      !kept_ids.count(s->second.id)});
    s = scores.erase(s);
  }
  return doomed;
}

}  // namespace dial::scheduler
