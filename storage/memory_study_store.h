// StudyStore held in memory, for tests and throwaway studies. Passes the
// same contract suite as SqliteStudyStore. Thread-safe (one mutex).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "storage/study_store.h"

namespace dial::storage {

class MemoryStudyStore : public StudyStore {
 public:
  static std::unique_ptr<MemoryStudyStore> Create() {
    return std::make_unique<MemoryStudyStore>();
  }

  absl::Status CreateStudy(const v1::Study& study) override;
  absl::StatusOr<v1::Study> GetStudy(const std::string& name) override;
  absl::StatusOr<std::vector<v1::Study>> ListStudies() override;
  absl::Status UpdateStudy(const v1::Study& study) override;
  absl::Status DeleteStudy(const std::string& name) override;
  absl::Status PutTrial(const v1::Trial& trial) override;
  absl::StatusOr<v1::Trial> GetTrial(const std::string& study,
                                     int64_t number) override;
  absl::StatusOr<std::vector<v1::Trial>> ListTrials(
      const std::string& study, const TrialQuery& query) override;
  absl::Status RecordReport(const v1::Trial& trial,
                            const v1::MetricPoint& point) override;
  using StudyStore::GetMetricHistory;
  absl::StatusOr<std::vector<v1::MetricPoint>> GetMetricHistory(
      const std::string& study, int64_t number,
      const HistoryQuery& query) override;
  absl::Status PutCheckpoint(const CheckpointRecord& record) override;
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(
      const std::string& study) override;
  absl::Status DeleteCheckpoint(const std::string& study, int64_t number,
                                int64_t step) override;
  absl::Status PutWorker(const v1::Worker& worker) override;
  absl::Status AppendAudit(const v1::AuditEvent& event) override;
  absl::Status AppendUsage(const v1::UsageRecord& record) override;
  absl::StatusOr<std::vector<v1::UsageRecord>> ListUsage(
      int64_t since_ms) override;
  absl::StatusOr<std::vector<v1::AuditEvent>> ListAudit(
      const std::string& study, int64_t before_id, int limit) override;

 private:
  struct TrialData {
    v1::Trial trial;
    std::map<int64_t, v1::MetricPoint> history;
    std::map<int64_t, CheckpointRecord> checkpoints;
  };
  struct StudyData {
    v1::Study study;
    std::map<int64_t, TrialData> trials;
  };
  absl::StatusOr<StudyData*> FindStudy(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TrialData*> FindTrial(const std::string& study, int64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, StudyData> studies_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::AuditEvent> audit_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::UsageRecord> usage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::storage
