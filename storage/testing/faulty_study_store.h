// FaultyStudyStore: a StudyStore for tests that fails when told. It wraps a
// MemoryStudyStore (inner()), so a refused write leaves it as it was.
//  - Writes fail with UNAVAILABLE ("disk is full") when told, the way
//    SqliteStudyStore's do on a full disk: FailWritesAfter / FailWrites /
//    Heal.
//  - Reads of one study's trials fail with UNAVAILABLE (MakeUnreadable):
//    a reload of that study fails.
//  - Backup can be held at its start (GateBackups); it writes nothing and
//    returns the length of the path.
//  - With group_commit, durability() is the test's to drive: writes apply at
//    once and are numbered; Commit() makes those applied so far durable;
//    Lose() loses them as a failed commit does (the lost handler runs, then
//    their waiters hear UNAVAILABLE) and refuses writes until Recover(). The
//    lost writes stay in memory, except checkpoint index rows added since
//    the last Commit(), which go as SQLite's rollback takes them (the core
//    restores retention from the index when it reloads).
// Thread-safe (one mutex; never held while calling the lost handler or a
// waiter).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "storage/durability.h"
#include "storage/memory_study_store.h"
#include "storage/study_store.h"

namespace dial::storage::testing {

struct FaultyStudyStoreOptions {
  bool group_commit = false;  // see the header comment
};

class FaultyStudyStore : public StudyStore, public Durability {
 public:
  static std::unique_ptr<FaultyStudyStore> Create(
      const FaultyStudyStoreOptions& options = {}) {
    return std::make_unique<FaultyStudyStore>(options);
  }
  explicit FaultyStudyStore(const FaultyStudyStoreOptions& options = {})
      : options_(options) {}

  // The next `n` writes succeed and the ones after fail; -1: none fails.
  void FailWritesAfter(int n);
  void FailWrites() { FailWritesAfter(0); }
  void Heal() { FailWritesAfter(-1); }
  // Writes refused so far (by FailWritesAfter).
  int failed_writes();
  // ListTrials of `study` fails (and so does the default ForEachReport,
  // which reads through it); "" for none.
  void MakeUnreadable(const std::string& study);
  // Backup notifies `started` (once), then waits for `release`; null: no
  // gate.
  void GateBackups(absl::Notification* started, absl::Notification* release);
  // The store beneath, to look at what was written, past every fault.
  StudyStore& inner() { return *inner_; }

  // Group commit (see the header comment).
  void Commit() { Answer(absl::OkStatus()); }
  void Lose();

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
  absl::Status PurgeDeleted() override;
  absl::Status PutWorker(const v1::Worker& worker) override;
  absl::Status AppendAudit(const v1::AuditEvent& event) override;
  absl::Status AppendUsage(const v1::UsageRecord& record) override;
  absl::StatusOr<std::vector<v1::UsageRecord>> ListUsage(
      int64_t since_ms) override;
  absl::StatusOr<std::vector<v1::AuditEvent>> ListAudit(
      const std::string& study, int64_t before_id, int limit) override;
  absl::StatusOr<int64_t> Backup(const std::string& path) override;

  Durability* durability() override {
    return options_.group_commit ? this : nullptr;
  }
  uint64_t WrittenSeq() const override;
  void WhenDurable(uint64_t seq,
                   std::function<void(absl::Status)> done) override;
  void SetLostHandler(std::function<void()> handler) override;
  void Recover() override;

 private:
  // Applies `write` unless writes are refused or failing.
  absl::Status Write(const std::function<absl::Status()>& write);
  // Answers every waiter up to the last write with `status`.
  void Answer(const absl::Status& status);

  const FaultyStudyStoreOptions options_;
  const std::unique_ptr<MemoryStudyStore> inner_ = MemoryStudyStore::Create();
  mutable absl::Mutex mu_;
  int allowed_ ABSL_GUARDED_BY(mu_) = -1;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::string unreadable_ ABSL_GUARDED_BY(mu_);
  absl::Notification* backup_started_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Notification* backup_release_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Group commit.
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t answered_ ABSL_GUARDED_BY(mu_) = 0;
  // Checkpoint index rows added since the last commit: (study, trial, step).
  std::vector<std::tuple<std::string, int64_t, int64_t>> uncommitted_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> lost_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, std::function<void(absl::Status)>>> waiters_
      ABSL_GUARDED_BY(mu_);
  std::function<void()> handler_ ABSL_GUARDED_BY(mu_);
  bool refusing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dial::storage::testing
