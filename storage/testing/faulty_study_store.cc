#include "storage/testing/faulty_study_store.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dial::storage::testing {
namespace {

absl::Status Lost() { return absl::UnavailableError("the commit failed"); }

}  // namespace

void FaultyStudyStore::FailWritesAfter(int n) {
  absl::MutexLock lock(&mu_);
  allowed_ = n;
}

int FaultyStudyStore::failed_writes() {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void FaultyStudyStore::MakeUnreadable(const std::string& study) {
  absl::MutexLock lock(&mu_);
  unreadable_ = study;
}

void FaultyStudyStore::GateBackups(absl::Notification* started,
                                   absl::Notification* release) {
  absl::MutexLock lock(&mu_);
  backup_started_ = started;
  backup_release_ = release;
}

absl::Status FaultyStudyStore::Write(
    const std::function<absl::Status()>& write) {
  absl::MutexLock lock(&mu_);
  if (refusing_) return Lost();
  if (allowed_ == 0) {
    ++failed_;
    return absl::UnavailableError(
        "database /fake/dial.db: database or disk is full; free disk space "
        "and retry");
  }
  if (allowed_ > 0) --allowed_;
  absl::Status status = write();
  if (status.ok()) ++written_;
  return status;
}

void FaultyStudyStore::Lose() {
  std::function<void()> handler;
  {
    absl::MutexLock lock(&mu_);
    refusing_ = true;
    handler = handler_;
    for (const auto& [study, trial, step] : uncommitted_) {
      inner_->DeleteCheckpoint(study, trial, step).IgnoreError();
    }
    uncommitted_.clear();
  }
  if (handler) handler();
  Answer(Lost());
}

void FaultyStudyStore::Answer(const absl::Status& status) {
  std::vector<std::function<void(absl::Status)>> answer;
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok()) lost_.push_back({answered_, written_});
    answered_ = written_;
    uncommitted_.clear();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->first > answered_) {
        ++it;
        continue;
      }
      answer.push_back(std::move(it->second));
      it = waiters_.erase(it);
    }
  }
  for (auto& done : answer) done(status);
}

absl::Status FaultyStudyStore::CreateStudy(const v1::Study& study) {
  return Write([&] { return inner_->CreateStudy(study); });
}

absl::StatusOr<v1::Study> FaultyStudyStore::GetStudy(const std::string& name) {
  return inner_->GetStudy(name);
}

absl::StatusOr<std::vector<v1::Study>> FaultyStudyStore::ListStudies() {
  return inner_->ListStudies();
}

absl::Status FaultyStudyStore::UpdateStudy(const v1::Study& study) {
  return Write([&] { return inner_->UpdateStudy(study); });
}

absl::Status FaultyStudyStore::DeleteStudy(const std::string& name) {
  return Write([&] { return inner_->DeleteStudy(name); });
}

absl::Status FaultyStudyStore::PutTrial(const v1::Trial& trial) {
  return Write([&] { return inner_->PutTrial(trial); });
}

absl::StatusOr<v1::Trial> FaultyStudyStore::GetTrial(const std::string& study,
                                                     int64_t number) {
  return inner_->GetTrial(study, number);
}

absl::StatusOr<std::vector<v1::Trial>> FaultyStudyStore::ListTrials(
    const std::string& study, const TrialQuery& query) {
  {
    absl::MutexLock lock(&mu_);
    if (!unreadable_.empty() && study == unreadable_) {
      return absl::UnavailableError(absl::StrCat("cannot read ", study));
    }
  }
  return inner_->ListTrials(study, query);
}

absl::Status FaultyStudyStore::RecordReport(const v1::Trial& trial,
                                            const v1::MetricPoint& point) {
  return Write([&] { return inner_->RecordReport(trial, point); });
}

absl::StatusOr<std::vector<v1::MetricPoint>> FaultyStudyStore::GetMetricHistory(
    const std::string& study, int64_t number, const HistoryQuery& query) {
  return inner_->GetMetricHistory(study, number, query);
}

absl::Status FaultyStudyStore::PutCheckpoint(const CheckpointRecord& record) {
  DIAL_RETURN_IF_ERROR(Write([&] { return inner_->PutCheckpoint(record); }));
  absl::MutexLock lock(&mu_);
  if (options_.group_commit) {
    uncommitted_.emplace_back(record.study, record.trial, record.step);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointRecord>> FaultyStudyStore::ListCheckpoints(
    const std::string& study) {
  return inner_->ListCheckpoints(study);
}

absl::Status FaultyStudyStore::DeleteCheckpoint(const std::string& study,
                                                int64_t number, int64_t step) {
  return Write([&] { return inner_->DeleteCheckpoint(study, number, step); });
}

absl::Status FaultyStudyStore::PutWorker(const v1::Worker& worker) {
  return Write([&] { return inner_->PutWorker(worker); });
}

absl::Status FaultyStudyStore::PurgeDeleted() {
  // Background upkeep: not one of the writes a test counts or fails (the
  // core purges at start-up, on a thread of its own).
  return inner_->PurgeDeleted();
}

absl::Status FaultyStudyStore::AppendUsage(const v1::UsageRecord& record) {
  return Write([&] { return inner_->AppendUsage(record); });
}

absl::StatusOr<std::vector<v1::UsageRecord>> FaultyStudyStore::ListUsage(
    int64_t since_ms) {
  return inner_->ListUsage(since_ms);
}

absl::Status FaultyStudyStore::AppendAudit(const v1::AuditEvent& event) {
  return Write([&] { return inner_->AppendAudit(event); });
}

absl::StatusOr<std::vector<v1::AuditEvent>> FaultyStudyStore::ListAudit(
    const std::string& study, int64_t before_id, int limit) {
  return inner_->ListAudit(study, before_id, limit);
}

absl::StatusOr<int64_t> FaultyStudyStore::Backup(const std::string& path) {
  absl::Notification* started;
  absl::Notification* release;
  {
    absl::MutexLock lock(&mu_);
    started = backup_started_;
    release = backup_release_;
  }
  if (started && !started->HasBeenNotified()) started->Notify();
  if (release) release->WaitForNotification();
  return static_cast<int64_t>(path.size());
}

uint64_t FaultyStudyStore::WrittenSeq() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

void FaultyStudyStore::WhenDurable(uint64_t seq,
                                   std::function<void(absl::Status)> done) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (seq > answered_) {
      waiters_.push_back({seq, std::move(done)});
      return;
    }
    for (const auto& [first, last] : lost_) {
      if (seq > first && seq <= last) status = Lost();
    }
  }
  done(status);
}

void FaultyStudyStore::SetLostHandler(std::function<void()> handler) {
  absl::MutexLock lock(&mu_);
  handler_ = std::move(handler);
}

void FaultyStudyStore::Recover() {
  absl::MutexLock lock(&mu_);
  refusing_ = false;
}

}  // namespace dial::storage::testing
