// StudyStore on SQLite: WAL mode, foreign keys on, prepared statements only
// (cached), forward migrations recorded in `schema_version`
// (sqlite_schema.h). Only one process may open a database (the scheduler).
// Thread-safe: one mutex serialises access to the connection; group commit
// (sqlite_group_committer.h) and WAL checkpoints (sqlite_wal_checkpointer.h)
// run on threads of their own, and Backup (sqlite_backup.h) reads through a
// connection of its own without taking the mutex.
//
// Errors carry the database's path and the cause. A full disk, an I/O error
// and a busy, locked or read-only file are UNAVAILABLE: the transaction is
// rolled back, nothing of it is on disk, and the same call succeeds once the
// condition is gone. A damaged file is DATA_LOSS.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "storage/durability.h"
#include "storage/study_store.h"

namespace dial::storage {

class GroupCommitter;
class SqliteConnection;
class Statement;
class WalCheckpointer;
struct CommittedGroup;

struct SqliteStudyStoreOptions {
  std::string path;  // database file; created if missing
  // synchronous=FULL (the default): every commit fsyncs the write-ahead log
  // before it returns, so an acknowledged change survives power loss or an
  // OS crash. NORMAL skips that fsync (the log is synced at checkpoints
  // only): commits are faster and survive a crash of the process, but the
  // last ones before a power loss can vanish after they were acknowledged.
  // The file stays consistent either way.
  bool full_sync = true;
  // Group commit: writes join one open transaction that a committer thread
  // commits as soon as the previous commit is done, so one fsync covers
  // every write that arrived meanwhile. Callers learn when theirs is
  // durable through WhenDurable. Off: every call commits before returning.
  bool group_commit = false;
  // Group commit's timings (dial_db_commit_seconds, dial_db_fsync_seconds,
  // dial_db_group_writes); null: none. Not owned; outlives the store.
  metrics::Registry* metrics = nullptr;
};

class SqliteStudyStore : public StudyStore, public Durability {
 public:
  // Opens (creating and migrating as needed). UNAVAILABLE if the file cannot
  // be opened; FAILED_PRECONDITION if it is from a newer Dial, another
  // process has it open, or it cannot be put in WAL mode.
  static absl::StatusOr<std::unique_ptr<SqliteStudyStore>> Create(
      const SqliteStudyStoreOptions& options);
  ~SqliteStudyStore() override;

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
  absl::Status ForEachReport(
      const std::string& study, const std::vector<int64_t>& steps,
      const std::string& metric,
      const std::function<void(int64_t number, const v1::MetricPoint& point)>&
          fn) override;
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
  // An online backup through a read-only connection of its own: in WAL mode
  // it sees one committed snapshot and blocks no writer. See
  // StudyStore::Backup for the contract; the copy has mode 0600.
  absl::StatusOr<int64_t> Backup(const std::string& path) override;

  // Durability: this store with group commit; null without (every write is
  // durable on return). Called without group commit, the methods below
  // answer as if every write were durable: WrittenSeq() stays 0 and
  // WhenDurable answers at once.
  Durability* durability() override;
  uint64_t WrittenSeq() const override;
  void WhenDurable(uint64_t seq,
                   std::function<void(absl::Status)> done) override;
  void SetLostHandler(std::function<void()> handler) override;
  void Recover() override;
  // Commits what is applied now and waits for it (group commit); the
  // commit's status.
  absl::Status Flush();
  // Group commits made so far.
  uint64_t commits() const;
  // For tests (group commit): while held, nothing is committed; writes
  // still apply and join the open group.
  void HoldCommitsForTesting(bool hold);

  // Schema version of the open database.
  int schema_version();
  // The connection's PRAGMA synchronous: 2 (FULL) or 1 (NORMAL).
  int synchronous();
  // Absolute path of the database file.
  const std::string& path() const { return path_; }

 private:
  SqliteStudyStore(std::unique_ptr<SqliteConnection> conn, int lock_fd);
  // Runs `body` as one atomic write (see the .cc).
  absl::Status Transaction(const std::function<absl::Status()>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the writes applied since the last commit lost.
  void LoseGroup(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The committer's calls (group commit).
  CommittedGroup CommitGroup() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SyncGroup() ABSL_LOCKS_EXCLUDED(mu_);
  // After a failed sync of the log.
  void Break(const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<int64_t> StudyId(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> TrialId(const std::string& study, int64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutTrialLocked(const v1::Trial& trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trial in `row` (DIAL_TRIAL_COLUMNS) with its params.
  absl::StatusOr<v1::Trial> ReadTrialWithParams(const Statement& row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports from `rows` (see ReadReports), read through a memory map.
  absl::Status EmitReports(
      Statement& rows,
      const std::function<void(int64_t number, const v1::MetricPoint& point)>&
          fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Immutable after Create.
  const std::string path_;
  const int lock_fd_;  // flock on "<path>-lock": one process per database
  bool full_sync_ = true;
  int wal_fd_ = -1;  // the committer's handle on "<path>-wal"

  absl::Mutex mu_;
  std::unique_ptr<SqliteConnection> conn_ ABSL_PT_GUARDED_BY(mu_);
  std::map<std::string, int64_t> study_ids_ ABSL_GUARDED_BY(mu_);
  // Group commit: the group's transaction is open.
  bool txn_open_ ABSL_GUARDED_BY(mu_) = false;
  // Set when a group is lost; writes fail with it until Recover().
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  bool lost_pending_ ABSL_GUARDED_BY(mu_) = false;  // not yet reported
  // Set when a sync failed; writes fail with it for good.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);

  // Group commit only (null without). Destroyed first: their threads call
  // into the store and its connection.
  std::unique_ptr<WalCheckpointer> wal_checkpointer_;
  std::unique_ptr<GroupCommitter> committer_;
};

}  // namespace dial::storage
