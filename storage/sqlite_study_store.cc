#include "storage/sqlite_study_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "storage/sqlite_backup.h"
#include "storage/sqlite_codecs.h"
#include "storage/sqlite_connection.h"
#include "storage/sqlite_group_committer.h"
#include "storage/sqlite_schema.h"
#include "storage/sqlite_wal_checkpointer.h"

// A deleted study's row is renamed to this prefix plus its id (a name no
// study can have) until PurgeDeleted removes it with its trials.
#define DIAL_DELETED_PREFIX "~deleted~"

namespace dial::storage {

// The cached statement `sql` as `var`, or return its error.
#define DIAL_PREPARE(var, sql) \
  DIAL_ASSIGN_OR_RETURN(Statement var, conn_->Prepare(sql))

SqliteStudyStore::SqliteStudyStore(std::unique_ptr<SqliteConnection> conn,
                                   int lock_fd)
    : path_(conn->path()), lock_fd_(lock_fd), conn_(std::move(conn)) {}

absl::StatusOr<std::unique_ptr<SqliteStudyStore>> SqliteStudyStore::Create(
    const SqliteStudyStoreOptions& options) {
  const std::string lock_path = options.path + "-lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", options.path,
        " is in use by another process (only one dial-scheduler may open "
        "it)"));
  }
  // NOMUTEX: every use of the connection is under mu_ already; SQLite's
  // own mutex would be taken again on every step and column read.
  auto conn = SqliteConnection::Open(options.path, SQLITE_OPEN_READWRITE |
                                                       SQLITE_OPEN_CREATE |
                                                       SQLITE_OPEN_NOMUTEX);
  if (!conn.ok()) {
    ::close(lock_fd);
    return conn.status();
  }
  std::unique_ptr<SqliteStudyStore> store(
      new SqliteStudyStore(std::move(*conn), lock_fd));
  store->full_sync_ = options.full_sync;
  absl::MutexLock lock(&store->mu_);
  SqliteConnection& db = *store->conn_;
  // journal_mode answers with the mode it is in, which stays the old one
  // (without an error) where WAL is impossible, e.g. on some network
  // filesystems.
  DIAL_ASSIGN_OR_RETURN(std::string mode,
                        db.QueryText("PRAGMA journal_mode=WAL"));
  if (mode != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", store->path_,
                     " cannot use write-ahead logging (its "
                     "journal mode stays '",
                     mode, "'); put it on a local filesystem"));
  }
  DIAL_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys=ON"));
  DIAL_RETURN_IF_ERROR(db.Exec(options.full_sync
                                   ? "PRAGMA synchronous=FULL"
                                   : "PRAGMA synchronous=NORMAL"));
  DIAL_RETURN_IF_ERROR(MigrateSchema(db));
  if (options.group_commit) {
    // The committer syncs the log itself, outside the lock (SyncGroup);
    // WAL checkpoints still sync the log and the database file as in FULL.
    DIAL_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous=NORMAL"));
    // WAL checkpoints would otherwise run inside a COMMIT now and then,
    // holding the lock for milliseconds.
    DIAL_ASSIGN_OR_RETURN(store->wal_checkpointer_,
                          WalCheckpointer::Create({store->path_}));
    store->wal_checkpointer_->Watch(db);
    SqliteStudyStore* s = store.get();
    GroupCommitterOptions committer{[s] { return s->CommitGroup(); },
                                    [s] { return s->SyncGroup(); }};
    if (options.metrics != nullptr) {
      MeasureCommits(*options.metrics,
                     "Time to commit one group of writes (SQLite COMMIT, "
                     "under the store's lock)",
                     "Time to make one committed group durable (fsync of "
                     "the write-ahead log)",
                     committer);
    }
    store->committer_ = GroupCommitter::Create(committer);
  }
  return store;
}

SqliteStudyStore::~SqliteStudyStore() {
  // The threads call into the store: stop them first. The committer commits
  // what was applied.
  if (committer_) committer_->Stop();
  {
    absl::MutexLock lock(&mu_);
    if (wal_checkpointer_) sqlite3_wal_hook(conn_->handle(), nullptr, nullptr);
  }
  wal_checkpointer_.reset();
  {
    absl::MutexLock lock(&mu_);
    conn_.reset();
  }
  if (wal_fd_ >= 0) ::close(wal_fd_);
  ::close(lock_fd_);
}

// Runs `body` as one atomic write. Without group commit: its own
// transaction, committed before returning. A failed COMMIT (disk full, I/O
// error, busy) may leave the transaction open: it is rolled back too, or the
// next BEGIN would fail and a later COMMIT would write this transaction's
// changes after its caller was told they failed. SQLite may already have
// rolled back on its own, in which case ROLLBACK fails harmlessly.
//
// With group commit: a savepoint inside the shared open transaction, which
// the committer thread commits (see WhenDurable). A failing `body` is
// rolled back to its savepoint, leaving the group's other writes in place;
// if SQLite rolled back the whole transaction itself (it may on I/O errors
// and a full disk), every write of the group is lost, and the store is
// marked lost until Recover().
absl::Status SqliteStudyStore::Transaction(
    const std::function<absl::Status()>& body) {
  if (!committer_) {
    DIAL_RETURN_IF_ERROR(conn_->Exec("BEGIN IMMEDIATE"));
    absl::Status status = body();
    if (status.ok()) status = conn_->Exec("COMMIT");
    if (!status.ok() && conn_->in_transaction()) {
      conn_->Exec("ROLLBACK").IgnoreError();
    }
    return status;
  }
  if (!broken_.ok()) return broken_;
  if (!lost_.ok()) return lost_;
  if (txn_open_ && !conn_->in_transaction()) {
    // A statement that failed since (a read's I/O error, say) made SQLite
    // roll back the open transaction: the group's writes are gone. Not
    // noticed here, this write's SAVEPOINT would begin a transaction of its
    // own, and its RELEASE commit it, unsynced.
    txn_open_ = false;
    LoseGroup(absl::UnavailableError(
        absl::StrCat("database ", path_,
                     ": the open transaction was rolled back after an "
                     "error")));
    return lost_;
  }
  if (!txn_open_) {
    DIAL_RETURN_IF_ERROR(conn_->Run("BEGIN IMMEDIATE"));
    txn_open_ = true;
  }
  // Cached statements: this runs for every write.
  absl::Status status = conn_->Run("SAVEPOINT write");
  if (status.ok()) status = body();
  if (status.ok()) status = conn_->Run("RELEASE write");
  if (status.ok()) {
    committer_->Applied();
    return status;
  }
  if (!conn_->in_transaction()) {
    // SQLite ended the whole transaction: the group's earlier writes too.
    txn_open_ = false;
    LoseGroup(status);
    return status;
  }
  if (conn_->Run("ROLLBACK TO write").ok() &&
      conn_->Run("RELEASE write").ok()) {
    return status;
  }
  conn_->Exec("ROLLBACK").IgnoreError();
  txn_open_ = false;
  LoseGroup(status);
  return status;
}

// Marks the writes applied since the last commit as lost; the committer
// tells their waiters and the lost handler.
void SqliteStudyStore::LoseGroup(const absl::Status& cause) {
  study_ids_.clear();
  lost_ = absl::UnavailableError(absl::StrCat(
      cause.message(),
      "; the uncommitted writes before it are lost too, and writes are "
      "refused until the scheduler reloads its state"));
  lost_pending_ = true;
  committer_->Lost();
}

CommittedGroup SqliteStudyStore::CommitGroup() {
  absl::MutexLock lock(&mu_);
  CommittedGroup group;
  group.seq = committer_->WrittenSeq();
  if (lost_pending_) {
    lost_pending_ = false;
    group.lost = lost_;
  } else if (txn_open_) {
    absl::Status status = conn_->Run("COMMIT");
    if (!status.ok()) {
      if (conn_->in_transaction()) conn_->Exec("ROLLBACK").IgnoreError();
      LoseGroup(status);
      lost_pending_ = false;
      group.lost = lost_;
    }
    txn_open_ = false;
    group.committed = status.ok();
  }
  return group;
}

// The commit wrote the group's frames to the write-ahead log without
// syncing it (synchronous=NORMAL); with full_sync the log is synced here,
// outside the lock.
absl::Status SqliteStudyStore::SyncGroup() {
  absl::Status status;
  if (full_sync_) {
    if (wal_fd_ < 0) {
      wal_fd_ = ::open((path_ + "-wal").c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (wal_fd_ < 0) {
      status = absl::UnavailableError(absl::StrCat(
          "database ", path_,
          ": cannot open its log to sync it: ", std::strerror(errno)));
    } else if (::fdatasync(wal_fd_) != 0) {
      status = absl::UnavailableError(absl::StrCat(
          "database ", path_, ": cannot sync its log: ", std::strerror(errno)));
    }
  }
  if (!status.ok()) Break(status);
  wal_checkpointer_->AfterCommit();
  return status;
}

// After a failed fdatasync of the log the kernel may have dropped its dirty
// pages, and later syncs succeed without writing them ("fsyncgate"): no
// later commit can be promised durable, since recovery stops at the first
// missing frame. So every further write is refused until the process
// restarts, and the writes applied meanwhile (the next group) are rolled
// back and lost. After the failed sync memory and file agree, so nothing is
// reloaded for the group whose sync failed.
void SqliteStudyStore::Break(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  broken_ = absl::UnavailableError(absl::StrCat(
      cause.message(),
      "; every write is refused until dial-scheduler restarts, since after "
      "a failed sync the system may have dropped writes it reported done"));
  spdlog::error("{}", std::string(broken_.message()));
  if (txn_open_) {
    conn_->Exec("ROLLBACK").IgnoreError();
    txn_open_ = false;
    LoseGroup(broken_);
  }
}

Durability* SqliteStudyStore::durability() {
  return committer_ ? this : nullptr;
}

uint64_t SqliteStudyStore::WrittenSeq() const {
  return committer_ ? committer_->WrittenSeq() : 0;
}

void SqliteStudyStore::WhenDurable(uint64_t seq,
                                   std::function<void(absl::Status)> done) {
  if (!committer_) return done(absl::OkStatus());
  committer_->WhenDurable(seq, std::move(done));
}

void SqliteStudyStore::SetLostHandler(std::function<void()> handler) {
  if (committer_) committer_->SetLostHandler(std::move(handler));
}

void SqliteStudyStore::Recover() {
  absl::MutexLock lock(&mu_);
  lost_ = absl::OkStatus();
}

absl::Status SqliteStudyStore::Flush() {
  if (!committer_) return absl::OkStatus();
  absl::Notification done;
  absl::Status result;
  WhenDurable(WrittenSeq(), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

uint64_t SqliteStudyStore::commits() const {
  return committer_ ? committer_->commits() : 0;
}

void SqliteStudyStore::HoldCommitsForTesting(bool hold) {
  if (committer_) committer_->HoldForTesting(hold);
}

int SqliteStudyStore::schema_version() {
  absl::MutexLock lock(&mu_);
  auto version = ReadSchemaVersion(*conn_);
  return version.ok() ? *version : 0;
}

int SqliteStudyStore::synchronous() {
  absl::MutexLock lock(&mu_);
  auto level = conn_->QueryText("PRAGMA synchronous");
  int out = 0;
  return level.ok() && absl::SimpleAtoi(*level, &out) ? out : -1;
}

absl::StatusOr<int64_t> SqliteStudyStore::Backup(const std::string& path) {
  return BackupDatabase(path_, path);
}

absl::StatusOr<int64_t> SqliteStudyStore::StudyId(const std::string& name) {
  auto cached = study_ids_.find(name);
  if (cached != study_ids_.end()) return cached->second;
  DIAL_PREPARE(stmt, "SELECT id FROM studies WHERE name = ?");
  stmt.Bind(1, name);
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  // Rows are never renumbered. DeleteStudy forgets the name, and a lost
  // group (which may have created the study) forgets them all.
  study_ids_[name] = stmt.Int(0);
  return stmt.Int(0);
}

absl::StatusOr<int64_t> SqliteStudyStore::TrialId(const std::string& study,
                                                  int64_t number) {
  DIAL_ASSIGN_OR_RETURN(int64_t study_id, StudyId(study));
  DIAL_PREPARE(stmt, "SELECT id FROM trials WHERE study_id = ? AND number = ?");
  stmt.Bind(1, study_id).Bind(2, number);
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  return stmt.Int(0);
}

absl::Status SqliteStudyStore::CreateStudy(const v1::Study& study) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt, "INSERT INTO studies(" DIAL_STUDY_COLUMNS
                       ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    BindStudy(stmt, study);
    absl::Status status = stmt.Run();
    if (absl::IsAlreadyExists(status)) {
      return absl::AlreadyExistsError(
          absl::StrCat("study '", study.name(), "' already exists"));
    }
    return status;
  });
}

absl::StatusOr<v1::Study> SqliteStudyStore::GetStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt,
               "SELECT " DIAL_STUDY_COLUMNS " FROM studies WHERE name = ?");
  stmt.Bind(1, name);
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return ReadStudy(stmt);
}

absl::StatusOr<std::vector<v1::Study>> SqliteStudyStore::ListStudies() {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt, "SELECT " DIAL_STUDY_COLUMNS
                     " FROM studies WHERE name NOT LIKE '" DIAL_DELETED_PREFIX
                     "%' ORDER BY id");
  std::vector<v1::Study> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(ReadStudy(stmt));
  }
  return out;
}

absl::Status SqliteStudyStore::UpdateStudy(const v1::Study& study) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt,
                 "UPDATE studies SET spec = ?, state = ?, update_ms = ?, "
                 "extra = ? WHERE name = ?");
    stmt.BindBlob(1, study.spec().SerializeAsString())
        .Bind(2, int64_t{study.state()})
        .Bind(3, ToMs(study.update_time()))
        .BindBlob(4, StudyExtra(study))
        .Bind(5, study.name());
    DIAL_RETURN_IF_ERROR(stmt.Run());
    if (conn_->changes() == 0) {
      return absl::NotFoundError(
          absl::StrCat("study '", study.name(), "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteStudyStore::DeleteStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
  study_ids_.erase(name);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt, "UPDATE studies SET name = '" DIAL_DELETED_PREFIX
                       "' || id WHERE name = ?");
    stmt.Bind(1, name);
    DIAL_RETURN_IF_ERROR(stmt.Run());
    if (conn_->changes() == 0) {
      return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteStudyStore::PurgeDeleted() {
  // 256 trials (with their params, metrics and checkpoint rows, by
  // cascade) per transaction: the store's lock is let go between them.
  while (true) {
    absl::MutexLock lock(&mu_);
    int changes = 0;
    DIAL_RETURN_IF_ERROR(Transaction([&]() -> absl::Status {
      DIAL_PREPARE(stmt,
                   "DELETE FROM trials WHERE id IN (SELECT t.id FROM trials t "
                   "JOIN studies s ON t.study_id = s.id WHERE s.name LIKE "
                   "'" DIAL_DELETED_PREFIX "%' LIMIT 256)");
      DIAL_RETURN_IF_ERROR(stmt.Run());
      changes = conn_->changes();
      if (changes > 0) return absl::OkStatus();
      DIAL_PREPARE(studies,
                   "DELETE FROM studies WHERE name LIKE '" DIAL_DELETED_PREFIX
                   "%'");
      return studies.Run();
    }));
    if (changes == 0) return absl::OkStatus();
  }
}

absl::Status SqliteStudyStore::PutTrialLocked(const v1::Trial& trial) {
  DIAL_ASSIGN_OR_RETURN(int64_t study_id, StudyId(trial.study()));
  int64_t trial_id = 0;
  {
    DIAL_PREPARE(
        stmt,
        "INSERT INTO trials(study_id, number, state, client_id, "
        "objective, error, last_step, checkpoint, attempt, failures, "
        "worker_id, create_ms, start_ms, end_ms, detail) VALUES "
        "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
        "?15) ON CONFLICT(study_id, number) DO UPDATE SET "
        "state = ?3, client_id = ?4, objective = ?5, error = ?6, "
        "last_step = ?7, checkpoint = ?8, attempt = ?9, failures = ?10, "
        "worker_id = ?11, create_ms = ?12, start_ms = ?13, end_ms = ?14, "
        "detail = ?15 RETURNING id");
    BindTrial(stmt, study_id, trial);
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::InternalError("trial upsert returned no id");
    trial_id = stmt.Int(0);
    DIAL_RETURN_IF_ERROR(stmt.Step().status());  // finish the statement
  }
  DIAL_PREPARE(clear, "DELETE FROM params WHERE trial_id = ?");
  DIAL_RETURN_IF_ERROR(clear.Bind(1, trial_id).Run());
  for (const auto& [name, value] : trial.params()) {
    DIAL_PREPARE(insert, "INSERT INTO params(trial_id, " DIAL_PARAM_COLUMNS
                         ") VALUES (?, ?, ?, ?, ?)");
    BindParam(insert, trial_id, name, value);
    DIAL_RETURN_IF_ERROR(insert.Run());
  }
  return absl::OkStatus();
}

absl::Status SqliteStudyStore::PutTrial(const v1::Trial& trial) {
  absl::MutexLock lock(&mu_);
  return Transaction([&] { return PutTrialLocked(trial); });
}

absl::StatusOr<v1::Trial> SqliteStudyStore::ReadTrialWithParams(
    const Statement& row) {
  int64_t trial_id = 0;
  v1::Trial trial = ReadTrial(row, &trial_id);
  DIAL_PREPARE(params,
               "SELECT " DIAL_PARAM_COLUMNS " FROM params WHERE trial_id = ?");
  params.Bind(1, trial_id);
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool more, params.Step());
    if (!more) break;
    ReadParam(params, &trial);
  }
  return trial;
}

absl::StatusOr<v1::Trial> SqliteStudyStore::GetTrial(const std::string& study,
                                                     int64_t number) {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt, "SELECT " DIAL_TRIAL_COLUMNS
                     " FROM trials t JOIN studies s ON s.id = t.study_id "
                     "WHERE s.name = ? AND t.number = ?");
  stmt.Bind(1, study).Bind(2, number);
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    DIAL_RETURN_IF_ERROR(StudyId(study).status());
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  return ReadTrialWithParams(stmt);
}

absl::StatusOr<std::vector<v1::Trial>> SqliteStudyStore::ListTrials(
    const std::string& study, const TrialQuery& query) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(int64_t study_id, StudyId(study));
  // States as a bit mask keeps one cached statement for every filter.
  int64_t mask = 0;
  for (auto s : query.states) mask |= int64_t{1} << s;
  DIAL_PREPARE(stmt, "SELECT " DIAL_TRIAL_COLUMNS
                     " FROM trials t JOIN studies s ON s.id = t.study_id "
                     "WHERE t.study_id = ? AND t.number > ? AND "
                     "(? = 0 OR ((1 << t.state) & ?) != 0) "
                     "ORDER BY t.number LIMIT ?");
  stmt.Bind(1, study_id)
      .Bind(2, query.after_number)
      .Bind(3, mask)
      .Bind(4, mask)
      .Bind(5, int64_t{query.limit > 0 ? query.limit : -1});
  std::vector<v1::Trial> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    DIAL_ASSIGN_OR_RETURN(v1::Trial trial, ReadTrialWithParams(stmt));
    out.push_back(std::move(trial));
  }
  return out;
}

absl::Status SqliteStudyStore::RecordReport(const v1::Trial& trial,
                                            const v1::MetricPoint& point) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(int64_t trial_id,
                          TrialId(trial.study(), trial.number()));
    {
      DIAL_PREPARE(exists,
                   "SELECT 1 FROM metrics WHERE trial_id = ? AND step = ? "
                   "LIMIT 1");
      exists.Bind(1, trial_id).Bind(2, point.step());
      DIAL_ASSIGN_OR_RETURN(bool row, exists.Step());
      if (row) {
        return absl::AlreadyExistsError(
            absl::StrCat("step ", point.step(), " of trial ", trial.number(),
                         " is recorded"));
      }
    }
    const int64_t time_ms = ToMs(point.time());
    for (const auto& [name, value] : point.metrics()) {
      DIAL_PREPARE(insert,
                   "INSERT INTO metrics(trial_id, step, name, value, time_ms) "
                   "VALUES (?, ?, ?, ?, ?)");
      insert.Bind(1, trial_id)
          .Bind(2, point.step())
          .Bind(3, name)
          .Bind(4, value)
          .Bind(5, time_ms);
      DIAL_RETURN_IF_ERROR(insert.Run());
    }
    // Only what a report changes: the params stay as they are.
    DIAL_PREPARE(update,
                 "UPDATE trials SET last_step = ?, checkpoint = ?, detail = ? "
                 "WHERE id = ?");
    return update.Bind(1, trial.last_step())
        .Bind(2, trial.checkpoint())
        .BindBlob(3, TrialDetail(trial))
        .Bind(4, trial_id)
        .Run();
  });
}

absl::StatusOr<std::vector<v1::MetricPoint>> SqliteStudyStore::GetMetricHistory(
    const std::string& study, int64_t number, const HistoryQuery& query) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(int64_t trial_id, TrialId(study, number));
  // The page's steps along the primary key (trial_id, step, name), then
  // their rows; a negative LIMIT is none.
  DIAL_PREPARE(stmt,
               "SELECT step, name, value, time_ms FROM metrics WHERE "
               "trial_id = ?1 AND step > ?2 AND step IN (SELECT DISTINCT step "
               "FROM metrics WHERE trial_id = ?1 AND step > ?2 ORDER BY step "
               "LIMIT ?3) ORDER BY step");
  stmt.Bind(1, trial_id)
      .Bind(2, query.after_step)
      .Bind(3, int64_t{query.limit > 0 ? query.limit : -1});
  // Rows to points here rather than with ReadReports: the page stops
  // reading rows once it holds max_bytes.
  std::vector<v1::MetricPoint> out;
  size_t bytes = 0;
  auto close = [&](v1::MetricPoint& point) {
    bytes += point.ByteSizeLong();
    out.push_back(std::move(point));
    point.Clear();
  };
  v1::MetricPoint point;
  bool open = false;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (open && (!row || stmt.Int(0) != point.step())) {
      close(point);
      open = false;
      if (query.max_bytes > 0 && bytes >= query.max_bytes) break;
    }
    if (!row) break;
    if (!open) {
      point.set_step(stmt.Int(0));
      *point.mutable_time() = FromMs(stmt.Int(3));
      open = true;
    }
    (*point.mutable_metrics())[stmt.Text(1)] = stmt.Double(2);
  }
  return out;
}

absl::Status SqliteStudyStore::EmitReports(
    Statement& rows,
    const std::function<void(int64_t number, const v1::MetricPoint& point)>&
        fn) {
  // A bulk read of the whole history (at start-up): pages read through a
  // memory map cost no system call each. Only for this read: an I/O error
  // under a map is a signal, not an error code, so the map is off again
  // for normal work.
  conn_->Exec("PRAGMA mmap_size=2147418112").IgnoreError();
  absl::Status status = ReadReports(rows, fn);
  conn_->Exec("PRAGMA mmap_size=0").IgnoreError();
  return status;
}

absl::Status SqliteStudyStore::ForEachReport(
    const std::string& study, const std::vector<int64_t>& steps,
    const std::string& metric,
    const std::function<void(int64_t number, const v1::MetricPoint& point)>&
        fn) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(int64_t study_id, StudyId(study));
  if (steps.empty()) {
    // Trials along the (study_id, number) index, each one's rows along the
    // metrics primary key (trial_id, step, name): one pass, no sort.
    DIAL_PREPARE(all,
                 "SELECT t.number, m.step, m.name, m.value, m.time_ms FROM "
                 "trials t JOIN metrics m ON m.trial_id = t.id WHERE "
                 "t.study_id = ? ORDER BY t.number, m.step");
    all.Bind(1, study_id);
    return EmitReports(all, fn);
  }
  // The wanted (trial, step) pairs: per trial and step an index seek to the
  // first step at or after it with a finite value of the metric (NaN is
  // stored as NULL), and each trial's last such step; then those rows only,
  // in (trial, step) order.
  DIAL_PREPARE(
      some,
      "WITH wanted(trial_id, number, step) AS ("
      " SELECT t.id, t.number, (SELECT m.step FROM metrics m"
      "  WHERE m.trial_id = t.id AND m.step >= s.value AND m.name = ?3"
      "  AND abs(m.value) <= 1.7976931348623157e308 ORDER BY m.step LIMIT 1)"
      " FROM trials t, json_each(?2) s WHERE t.study_id = ?1"
      " UNION"
      " SELECT t.id, t.number, (SELECT m.step FROM metrics m"
      "  WHERE m.trial_id = t.id AND m.name = ?3"
      "  AND abs(m.value) <= 1.7976931348623157e308"
      "  ORDER BY m.step DESC LIMIT 1)"
      " FROM trials t WHERE t.study_id = ?1)"
      "SELECT w.number, m.step, m.name, m.value, m.time_ms FROM"
      " wanted w JOIN metrics m ON m.trial_id = w.trial_id AND"
      " m.step = w.step ORDER BY w.number, m.step");
  some.Bind(1, study_id)
      .Bind(2, absl::StrCat("[", absl::StrJoin(steps, ","), "]"))
      .Bind(3, metric);
  return EmitReports(some, fn);
}

absl::Status SqliteStudyStore::PutCheckpoint(const CheckpointRecord& record) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(int64_t trial_id,
                          TrialId(record.study, record.trial));
    DIAL_PREPARE(stmt,
                 "INSERT OR REPLACE INTO checkpoints(trial_id, step, "
                 "checkpoint_id, size_bytes, checksum, score) VALUES (?, ?, "
                 "?, ?, ?, ?)");
    BindCheckpoint(stmt, trial_id, record);
    return stmt.Run();
  });
}

absl::StatusOr<std::vector<CheckpointRecord>> SqliteStudyStore::ListCheckpoints(
    const std::string& study) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(int64_t study_id, StudyId(study));
  DIAL_PREPARE(stmt, "SELECT " DIAL_CHECKPOINT_COLUMNS
                     " FROM trials t JOIN checkpoints c ON c.trial_id = t.id "
                     "WHERE t.study_id = ? ORDER BY t.number, c.step");
  stmt.Bind(1, study_id);
  std::vector<CheckpointRecord> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(ReadCheckpoint(stmt, study));
  }
  return out;
}

absl::Status SqliteStudyStore::DeleteCheckpoint(const std::string& study,
                                                int64_t number, int64_t step) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(int64_t trial_id, TrialId(study, number));
    DIAL_PREPARE(stmt,
                 "DELETE FROM checkpoints WHERE trial_id = ? AND step = ?");
    return stmt.Bind(1, trial_id).Bind(2, step).Run();
  });
}

absl::Status SqliteStudyStore::PutWorker(const v1::Worker& worker) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt,
                 "INSERT OR REPLACE INTO workers(id, host, resources, "
                 "last_seen_ms) VALUES (?, ?, ?, ?)");
    BindWorker(stmt, worker);
    return stmt.Run();
  });
}

absl::Status SqliteStudyStore::AppendUsage(const v1::UsageRecord& record) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt,
                 "INSERT INTO usage(end_ms, owner, study, record) VALUES "
                 "(?, ?, ?, ?)");
    return stmt.Bind(1, ToMs(record.end_time()))
        .Bind(2, record.owner())
        .Bind(3, record.study())
        .BindBlob(4, record.SerializeAsString())
        .Run();
  });
}

absl::StatusOr<std::vector<v1::UsageRecord>> SqliteStudyStore::ListUsage(
    int64_t since_ms) {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt, "SELECT record FROM usage WHERE end_ms >= ? ORDER BY id");
  stmt.Bind(1, since_ms);
  std::vector<v1::UsageRecord> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    if (!out.emplace_back().ParseFromString(stmt.Text(0))) {
      return absl::DataLossError("usage: a record cannot be read");
    }
  }
  return out;
}

absl::Status SqliteStudyStore::AppendAudit(const v1::AuditEvent& event) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt,
                 "INSERT INTO audit(time_ms, principal, role, action, study, "
                 "detail) VALUES (?, ?, ?, ?, ?, ?)");
    return stmt.Bind(1, ToMs(event.time()))
        .Bind(2, event.principal())
        .Bind(3, event.role())
        .Bind(4, event.action())
        .Bind(5, event.study())
        .Bind(6, event.detail())
        .Run();
  });
}

absl::StatusOr<std::vector<v1::AuditEvent>> SqliteStudyStore::ListAudit(
    const std::string& study, int64_t before_id, int limit) {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt,
               "SELECT id, time_ms, principal, role, action, study, detail "
               "FROM audit WHERE (?1 = '' OR study = ?1) AND (?2 <= 0 OR id "
               "< ?2) ORDER BY id DESC LIMIT ?3");
  stmt.Bind(1, study).Bind(2, before_id).Bind(3, int64_t{limit});
  std::vector<v1::AuditEvent> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    v1::AuditEvent& event = out.emplace_back();
    event.set_id(stmt.Int(0));
    *event.mutable_time() = FromMs(stmt.Int(1));
    event.set_principal(stmt.Text(2));
    event.set_role(stmt.Text(3));
    event.set_action(stmt.Text(4));
    event.set_study(stmt.Text(5));
    event.set_detail(stmt.Text(6));
  }
  return out;
}

}  // namespace dial::storage
