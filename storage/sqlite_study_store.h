// StudyStore on SQLite: WAL mode, foreign keys on, prepared statements only
// (cached), forward migrations recorded in `schema_version`. Only one
// process may open a database (the scheduler). Thread-safe: one mutex
// serialises access to the connection; Backup reads through a connection of
// its own and does not take it.
//
// Errors carry the database's path and the cause. A full disk, an I/O error
// and a busy, locked or read-only file are UNAVAILABLE: the transaction is
// rolled back, nothing of it is on disk, and the same call succeeds once the
// condition is gone. A damaged file is DATA_LOSS.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "storage/study_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace dial::storage {

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
  absl::StatusOr<std::vector<v1::MetricPoint>> GetMetricHistory(
      const std::string& study, int64_t number) override;
  absl::Status ForEachReport(
      const std::string& study, const std::vector<int64_t>& steps,
      const std::string& metric,
      const std::function<void(int64_t number, const v1::MetricPoint& point)>&
          fn) override;
  absl::Status PutCheckpoint(const CheckpointRecord& record) override;
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(
      const std::string& study, int64_t number) override;
  absl::Status DeleteCheckpoint(const std::string& study, int64_t number,
                                int64_t step) override;
  absl::Status PutWorker(const v1::Worker& worker) override;
  absl::StatusOr<std::vector<v1::Worker>> ListWorkers() override;
  // An online backup (SQLite's backup API) through a read-only connection
  // of its own: in WAL mode it sees one committed snapshot and blocks no
  // writer. See StudyStore::Backup for the contract; the copy has mode 0600.
  absl::StatusOr<int64_t> Backup(const std::string& path) override;

  Durability* durability() override { return this; }
  uint64_t WrittenSeq() const override { return applied_seq_.load(); }
  void WhenDurable(uint64_t seq,
                   std::function<void(absl::Status)> done) override;
  void SetLostHandler(std::function<void()> handler) override;
  void Recover() override;
  // Commits what is applied now and waits for it (group commit); the
  // commit's status.
  absl::Status Flush();
  // Group commits made so far.
  uint64_t commits() const { return commits_.load(); }

  // Schema version of the open database.
  int schema_version();
  // The connection's PRAGMA synchronous: 2 (FULL) or 1 (NORMAL).
  int synchronous();
  // Absolute path of the database file.
  const std::string& path() const { return path_; }

 private:
  class Statement;
  SqliteStudyStore(sqlite3* db, int lock_fd, std::string path)
      : db_(db), lock_fd_(lock_fd), path_(std::move(path)) {}
  absl::Status Transaction(const std::function<absl::Status()>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseGroup(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed sync of the log (committer thread, mu_ not held).
  void Break(const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu_);
  // The committer thread's loop.
  void CommitLoop();
  // The checkpointer thread's loop (group commit).
  void CheckpointLoop();
  // fdatasync of the write-ahead log (committer thread only).
  absl::Status SyncWal();
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Statement Prepare(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a cached statement without parameters.
  absl::Status Run(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> StudyId(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> TrialId(const std::string& study, int64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutTrialLocked(const v1::Trial& trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Trial> ReadTrial(Statement& stmt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EmitReports(
      Statement& stmt,
      const std::function<void(int64_t number, const v1::MetricPoint& point)>&
          fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  // flock on "<path>-lock": one process per database.
  int lock_fd_;
  const std::string path_;
  std::map<const char*, sqlite3_stmt*> statements_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> study_ids_ ABSL_GUARDED_BY(mu_);

  // Group commit (all unused without it).
  bool group_commit_ = false;
  bool full_sync_ = true;
  int wal_fd_ = -1;  // the committer's handle on "<path>-wal"
  bool txn_open_ ABSL_GUARDED_BY(mu_) = false;
  // Set when a group is lost; writes fail with it until Recover().
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  // Set when a sync failed; writes fail with it for good.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool lost_pending_ ABSL_GUARDED_BY(mu_) = false;  // not yet reported
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool committer_idle_ ABSL_GUARDED_BY(mu_) = false;  // waiting for work
  absl::CondVar commit_cv_;  // with mu_: work for the committer
  std::atomic<uint64_t> applied_seq_{0};
  std::atomic<uint64_t> commits_{0};
  // Who waits for what; durable_seq_ and the lost ranges answer them.
  absl::Mutex durable_mu_;
  uint64_t durable_seq_ ABSL_GUARDED_BY(durable_mu_) = 0;
  std::vector<std::pair<uint64_t, uint64_t>> lost_ranges_
      ABSL_GUARDED_BY(durable_mu_);  // (first, last] sequence numbers
  absl::Status lost_status_ ABSL_GUARDED_BY(durable_mu_);
  std::vector<std::pair<uint64_t, std::function<void(absl::Status)>>> waiters_
      ABSL_GUARDED_BY(durable_mu_);
  std::function<void()> lost_handler_ ABSL_GUARDED_BY(durable_mu_);
  bool handler_running_ ABSL_GUARDED_BY(durable_mu_) = false;
  std::thread committer_;
  // Checkpoints on a connection of their own (group commit only).
  sqlite3* ckpt_db_ = nullptr;
  std::atomic<int> wal_pages_{0};  // in the log after the last commit
  absl::Mutex ckpt_mu_;
  absl::CondVar ckpt_cv_;
  bool ckpt_wanted_ ABSL_GUARDED_BY(ckpt_mu_) = false;
  bool ckpt_stop_ ABSL_GUARDED_BY(ckpt_mu_) = false;
  std::thread checkpointer_;
};

}  // namespace dial::storage
