#include "scheduler/study_entry.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"

namespace dial::scheduler {

bool IsOpen(v1::TrialState state) {
  return state == v1::PENDING || state == v1::RUNNING || state == v1::PAUSED;
}

bool IsFinal(v1::TrialState state) {
  return state == v1::COMPLETED || state == v1::STOPPED || state == v1::FAILED;
}

absl::StatusOr<Stored<v1::Study>> Save::NewStudy(storage::StudyStore& store,
                                                 v1::Study study) {
  DIAL_RETURN_IF_ERROR(store.CreateStudy(study));
  return Stored<v1::Study>(std::move(study));
}

absl::StatusOr<Stored<v1::Study>> Save::Study(storage::StudyStore& store,
                                              v1::Study study) {
  DIAL_RETURN_IF_ERROR(store.UpdateStudy(study));
  return Stored<v1::Study>(std::move(study));
}

absl::StatusOr<Stored<v1::Trial>> Save::Trial(storage::StudyStore& store,
                                              v1::Trial trial) {
  DIAL_RETURN_IF_ERROR(store.PutTrial(trial));
  return Stored<v1::Trial>(std::move(trial));
}

absl::StatusOr<Stored<v1::Trial>> Save::Report(storage::StudyStore& store,
                                               v1::Trial trial,
                                               const v1::MetricPoint& point) {
  DIAL_RETURN_IF_ERROR(store.RecordReport(trial, point));
  return Stored<v1::Trial>(std::move(trial));
}

StudyEntry::StudyEntry(
    Stored<v1::Study> study, std::unique_ptr<searchers::Searcher> searcher,
    std::unique_ptr<searchers::TrialScheduler> trial_scheduler)
    : study_(std::move(study.value_)),
      space_(searchers::SearchSpace::Create(study_.spec())),
      searcher_(std::move(searcher)),
      trial_scheduler_(std::move(trial_scheduler)) {
  priors_.Swap(study_.mutable_prior_trials());
  wants_reports_ = searcher_->WantsReports();
}

absl::StatusOr<const searchers::SearchSpace*> StudyEntry::space() const {
  if (!space_.ok()) return space_.status();
  return &*space_;
}

void StudyEntry::Apply(Stored<v1::Study> study) {
  if (study->spec().budget().SerializeAsString() !=
      study_.spec().budget().SerializeAsString()) {
    exhausted_ = false;  // rediscovered on the next suggestion
  }
  study_ = std::move(study.value_);
  study_.clear_prior_trials();
}

void StudyEntry::Dequeue(int64_t queue_id) {
  auto* queue = study_.mutable_queue();
  if (!queue->empty() && queue->begin()->id() == queue_id) {
    queue->erase(queue->begin());
  }
}

void StudyEntry::ReplaceSearcher(
    std::unique_ptr<searchers::Searcher> searcher) {
  searcher_ = std::move(searcher);
  wants_reports_ = searcher_->WantsReports();
  exhausted_ = false;
}

void StudyEntry::Observe(const v1::Trial& finished) {
  unobserved_.trials.push_back(finished);
}

void StudyEntry::ObserveReport(const v1::Trial& trial, int64_t step,
                               const searchers::Metrics& metrics) {
  if (wants_reports_) unobserved_.reports.push_back({trial, step, metrics});
}

StudyEntry::Observations StudyEntry::TakeObservations() {
  return std::exchange(unobserved_, Observations());
}

void StudyEntry::RememberDecision(int64_t trial, int64_t step,
                                  const v1::Decision& decision) {
  last_decision_[trial] = {step, decision};
}

const StudyEntry::Decided* StudyEntry::LastDecision(int64_t trial) const {
  auto it = last_decision_.find(trial);
  return it == last_decision_.end() ? nullptr : &it->second;
}

void StudyEntry::LeaveUnsaved(int64_t trial, int64_t step,
                              const v1::Decision& decision) {
  unsaved_decisions_[trial] = {step, decision};
}

const StudyEntry::Decided* StudyEntry::Unsaved(int64_t trial) const {
  auto it = unsaved_decisions_.find(trial);
  return it == unsaved_decisions_.end() ? nullptr : &it->second;
}

void StudyEntry::AddUpload(int64_t trial, int64_t step,
                           UploadingCheckpoint upload) {
  uploading_[{trial, step}] = std::move(upload);
  auto first = uploading_.lower_bound({trial, INT64_MIN});
  int count = 0;
  for (auto it = first; it != uploading_.end() && it->first.first == trial;
       ++it) {
    ++count;
  }
  if (count > 8) uploading_.erase(first);
}

const StudyEntry::UploadingCheckpoint* StudyEntry::FindUpload(
    int64_t trial, int64_t step) const {
  auto it = uploading_.find({trial, step});
  return it == uploading_.end() ? nullptr : &it->second;
}

bool StudyEntry::Uploading(int64_t trial) const {
  auto it = uploading_.lower_bound({trial, INT64_MIN});
  return it != uploading_.end() && it->first.first == trial;
}

void StudyEntry::ForgetUploads(int64_t trial, int64_t step) {
  auto it = uploading_.lower_bound({trial, INT64_MIN});
  while (it != uploading_.end() && it->first.first == trial &&
         it->first.second <= step) {
    it = uploading_.erase(it);
  }
}

void StudyEntry::ForgetUploadsOf(const std::string& worker_id) {
  for (auto it = uploading_.begin(); it != uploading_.end();) {
    it = it->second.worker_id == worker_id ? uploading_.erase(it) : ++it;
  }
}

bool StudyEntry::QueueFill() {
  if (fill_queued_ || !worker_run()) return false;
  fill_queued_ = true;
  return true;
}

void StudyEntry::Mirror(Stored<v1::Trial> stored_trial) {
  v1::Trial trial = std::move(stored_trial.value_);
  auto active = [](v1::TrialState s) {
    return s == v1::PENDING || s == v1::RUNNING;
  };
  const bool maximize = study_.spec().objective().goal() == v1::MAXIMIZE;
  // Best first: the highest value when maximising, the lowest otherwise;
  // the lower trial number on ties.
  auto rank_key = [maximize, this](const v1::Trial& t) {
    double value = t.objective_value();
    auto runs = reruns_.find(t.number());
    if (runs != reruns_.end() && !runs->second.empty()) {
      for (const auto& [n, v] : runs->second) value += v;
      value /= double(runs->second.size() + 1);
    }
    return std::make_pair(maximize ? -value : value, t.number());
  };
  const v1::StudySpec& spec = study_.spec();
  auto is_ranked = [&spec](const v1::Trial& t) {
    return t.state() == v1::COMPLETED && t.has_objective_value() &&
           !t.has_origin() && searchers::IsFeasible(spec, t.final_metrics());
  };
  const int64_t number = trial.number();
  if (trial.has_origin()) {
    // A re-evaluation moves its origin's rank (the mean over its runs).
    auto origin = trials_.find(trial.origin());
    const bool origin_ranked =
        origin != trials_.end() && is_ranked(origin->second);
    if (origin_ranked) ranked_.erase(rank_key(origin->second));
    auto& runs = reruns_[trial.origin()];
    runs.erase(number);
    if (trial.state() == v1::COMPLETED && trial.has_objective_value()) {
      runs[number] = trial.objective_value();
    }
    if (origin_ranked) {
      ranked_.insert(rank_key(origin->second));
      front_.reset();
    }
  }
  auto it = trials_.find(number);
  if (it != trials_.end()) {
    const v1::Trial& old = it->second;
    if (active(old.state())) --active_trials_;
    if (IsOpen(old.state())) {
      --open_trials_;
      open_.erase(number);
      if (!old.client_id().empty()) {
        open_by_client_[old.client_id()].erase(number);
      }
    }
    if (old.state() == v1::PENDING) pending_.erase(number);
    if (is_ranked(old)) {
      ranked_.erase(rank_key(old));
      front_.reset();
    }
    --state_counts_[old.state()];
  }
  v1::Trial& stored = trials_[number];
  stored = std::move(trial);
  stored.clear_metric_history();
  const v1::Trial& now = stored;
  if (active(now.state())) ++active_trials_;
  if (IsOpen(now.state())) {
    ++open_trials_;
    open_.insert(number);
    if (!now.client_id().empty()) {
      open_by_client_[now.client_id()].insert(number);
    }
  }
  if (now.state() == v1::PENDING) pending_.insert(number);
  if (is_ranked(now)) {
    ranked_.insert(rank_key(now));
    front_.reset();
  }
  ++state_counts_[now.state()];
}

v1::Study StudyEntry::WithCounts() const {
  v1::Study out = study_;
  auto& counts = *out.mutable_trial_counts();
  for (const auto& [state, n] : state_counts_) {
    if (n > 0) counts[v1::TrialState_Name(state)] = n;
  }
  out.set_trials_created(static_cast<int32_t>(trials_.size()));
  out.clear_prior_trials();
  return out;
}

std::optional<v1::SeedRuns> StudyEntry::Runs(int64_t number) const {
  auto runs = reruns_.find(number);
  auto trial = trials_.find(number);
  if (runs == reruns_.end() || runs->second.empty() || trial == trials_.end() ||
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
  if (ranked_.empty()) return nullptr;
  if (searchers::IsMultiObjective(study_.spec())) {
    const auto& front_trials = ParetoFront().trials;
    return front_trials.empty() ? nullptr : &trials_.at(front_trials.front());
  }
  return &trials_.at(ranked_.begin()->second);
}

const StudyEntry::Front& StudyEntry::ParetoFront() const {
  if (front_) return *front_;
  const v1::StudySpec& spec = study_.spec();
  std::vector<int64_t> numbers;
  std::vector<searchers::Point> points;
  for (const auto& [value, number] : ranked_) {
    if (auto p = searchers::MinimizedObjectives(spec, trials_.at(number))) {
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
  front_ = std::move(out);
  return *front_;
}

bool StudyEntry::CanCreate() const {
  const auto& budget = study_.spec().budget();
  return !deleted_ && study_.state() == v1::STUDY_ACTIVE &&
         (!exhausted_ || !study_.queue().empty()) &&
         int64_t(trials_.size()) < budget.max_trials() &&
         active_trials_ < budget.max_parallel_trials();
}

}  // namespace dial::scheduler
