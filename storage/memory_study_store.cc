#include "storage/memory_study_store.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

namespace dial::storage {

absl::StatusOr<MemoryStudyStore::StudyData*> MemoryStudyStore::FindStudy(
    const std::string& name) {
  auto it = studies_.find(name);
  if (it == studies_.end()) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return &it->second;
}

absl::StatusOr<MemoryStudyStore::TrialData*> MemoryStudyStore::FindTrial(
    const std::string& study, int64_t number) {
  auto s = FindStudy(study);
  if (!s.ok()) return s.status();
  auto it = (*s)->trials.find(number);
  if (it == (*s)->trials.end()) {
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  return &it->second;
}

absl::Status MemoryStudyStore::CreateStudy(const v1::Study& study) {
  absl::MutexLock lock(&mu_);
  if (studies_.count(study.name())) {
    return absl::AlreadyExistsError(
        absl::StrCat("study '", study.name(), "' already exists"));
  }
  studies_[study.name()].study = study;
  return absl::OkStatus();
}

absl::StatusOr<v1::Study> MemoryStudyStore::GetStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto s = FindStudy(name);
  if (!s.ok()) return s.status();
  return (*s)->study;
}

absl::StatusOr<std::vector<v1::Study>> MemoryStudyStore::ListStudies() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Study> out;
  for (const auto& [name, data] : studies_) out.push_back(data.study);
  return out;
}

absl::Status MemoryStudyStore::UpdateStudy(const v1::Study& study) {
  absl::MutexLock lock(&mu_);
  auto s = FindStudy(study.name());
  if (!s.ok()) return s.status();
  v1::Study& stored = (*s)->study;
  *stored.mutable_spec() = study.spec();
  stored.set_state(study.state());
  *stored.mutable_update_time() = study.update_time();
  *stored.mutable_queue() = study.queue();
  stored.set_next_queue_id(study.next_queue_id());
  stored.set_note(study.note());
  return absl::OkStatus();
}

absl::Status MemoryStudyStore::DeleteStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (!studies_.erase(name)) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return absl::OkStatus();
}

absl::Status MemoryStudyStore::PutTrial(const v1::Trial& trial) {
  absl::MutexLock lock(&mu_);
  auto s = FindStudy(trial.study());
  if (!s.ok()) return s.status();
  v1::Trial& stored = (*s)->trials[trial.number()].trial;
  stored = trial;
  stored.clear_metric_history();
  return absl::OkStatus();
}

absl::StatusOr<v1::Trial> MemoryStudyStore::GetTrial(const std::string& study,
                                                     int64_t number) {
  absl::MutexLock lock(&mu_);
  auto t = FindTrial(study, number);
  if (!t.ok()) return t.status();
  return (*t)->trial;
}

absl::StatusOr<std::vector<v1::Trial>> MemoryStudyStore::ListTrials(
    const std::string& study, const TrialQuery& query) {
  absl::MutexLock lock(&mu_);
  auto s = FindStudy(study);
  if (!s.ok()) return s.status();
  std::vector<v1::Trial> out;
  for (auto it = (*s)->trials.upper_bound(query.after_number);
       it != (*s)->trials.end(); ++it) {
    const v1::Trial& t = it->second.trial;
    if (!query.states.empty() &&
        std::find(query.states.begin(), query.states.end(), t.state()) ==
            query.states.end()) {
      continue;
    }
    out.push_back(t);
    if (query.limit > 0 && int(out.size()) >= query.limit) break;
  }
  return out;
}

absl::Status MemoryStudyStore::RecordReport(const v1::Trial& trial,
                                            const v1::MetricPoint& point) {
  absl::MutexLock lock(&mu_);
  auto t = FindTrial(trial.study(), trial.number());
  if (!t.ok()) return t.status();
  if ((*t)->history.count(point.step())) {
    return absl::AlreadyExistsError(absl::StrCat(
        "step ", point.step(), " of trial ", trial.number(), " is recorded"));
  }
  (*t)->history[point.step()] = point;
  (*t)->trial.set_last_step(trial.last_step());
  (*t)->trial.set_checkpoint(trial.checkpoint());
  (*t)->trial.set_checkpoint_step(trial.checkpoint_step());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::MetricPoint>> MemoryStudyStore::GetMetricHistory(
    const std::string& study, int64_t number, const HistoryQuery& query) {
  absl::MutexLock lock(&mu_);
  auto t = FindTrial(study, number);
  if (!t.ok()) return t.status();
  std::vector<v1::MetricPoint> out;
  size_t bytes = 0;
  const auto& history = (*t)->history;
  for (auto it = history.upper_bound(query.after_step); it != history.end();
       ++it) {
    if (query.limit > 0 && out.size() >= static_cast<size_t>(query.limit)) {
      break;
    }
    if (query.max_bytes > 0 && bytes >= query.max_bytes) break;
    out.push_back(it->second);
    bytes += it->second.ByteSizeLong();
  }
  return out;
}

absl::Status MemoryStudyStore::PutCheckpoint(const CheckpointRecord& record) {
  absl::MutexLock lock(&mu_);
  auto t = FindTrial(record.study, record.trial);
  if (!t.ok()) return t.status();
  CheckpointRecord& stored = (*t)->checkpoints[record.step];
  stored = record;
  if (std::isnan(stored.score)) {
    stored.score = -std::numeric_limits<double>::infinity();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointRecord>> MemoryStudyStore::ListCheckpoints(
    const std::string& study) {
  absl::MutexLock lock(&mu_);
  auto s = FindStudy(study);
  if (!s.ok()) return s.status();
  std::vector<CheckpointRecord> out;
  for (const auto& [number, trial] : (*s)->trials) {
    for (const auto& [step, record] : trial.checkpoints) out.push_back(record);
  }
  return out;
}

absl::Status MemoryStudyStore::DeleteCheckpoint(const std::string& study,
                                                int64_t number, int64_t step) {
  absl::MutexLock lock(&mu_);
  auto t = FindTrial(study, number);
  if (!t.ok()) return t.status();
  (*t)->checkpoints.erase(step);
  return absl::OkStatus();
}

absl::Status MemoryStudyStore::PutWorker(const v1::Worker& worker) {
  absl::MutexLock lock(&mu_);
  workers_[worker.id()] = worker;
  return absl::OkStatus();
}

absl::Status MemoryStudyStore::AppendUsage(const v1::UsageRecord& record) {
  absl::MutexLock lock(&mu_);
  usage_.push_back(record);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::UsageRecord>> MemoryStudyStore::ListUsage(
    int64_t since_ms) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::UsageRecord> out;
  for (const v1::UsageRecord& r : usage_) {
    if (google::protobuf::util::TimeUtil::TimestampToMilliseconds(
            r.end_time()) >= since_ms) {
      out.push_back(r);
    }
  }
  return out;
}

absl::Status MemoryStudyStore::AppendAudit(const v1::AuditEvent& event) {
  absl::MutexLock lock(&mu_);
  audit_.push_back(event);
  audit_.back().set_id(static_cast<int64_t>(audit_.size()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::AuditEvent>> MemoryStudyStore::ListAudit(
    const std::string& study, int64_t before_id, int limit) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::AuditEvent> out;
  for (auto it = audit_.rbegin(); it != audit_.rend(); ++it) {
    if (int(out.size()) >= limit) break;
    if (before_id > 0 && it->id() >= before_id) continue;
    if (!study.empty() && it->study() != study) continue;
    out.push_back(*it);
  }
  return out;
}

}  // namespace dial::storage
