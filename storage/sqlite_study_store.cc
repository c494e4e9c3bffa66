#include "storage/sqlite_study_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"

namespace dial::storage {
namespace {

using google::protobuf::util::TimeUtil;

// Forward migrations: entry i takes the schema from version i to i + 1.
// Never edit an entry once released; append a new one.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE studies(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  spec BLOB NOT NULL,
  state INTEGER NOT NULL,
  create_ms INTEGER NOT NULL,
  update_ms INTEGER NOT NULL);
CREATE TABLE trials(
  id INTEGER PRIMARY KEY,
  study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
  number INTEGER NOT NULL,
  state INTEGER NOT NULL,
  client_id TEXT NOT NULL,
  objective REAL,
  error TEXT NOT NULL,
  last_step INTEGER NOT NULL,
  checkpoint TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  failures INTEGER NOT NULL,
  worker_id TEXT NOT NULL,
  create_ms INTEGER,
  start_ms INTEGER,
  end_ms INTEGER,
  detail BLOB NOT NULL,
  UNIQUE(study_id, number));
CREATE INDEX trials_by_state ON trials(study_id, state, number);
CREATE INDEX trials_by_objective ON trials(study_id, objective);
CREATE TABLE params(
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  double_value REAL,
  int_value INTEGER,
  string_value TEXT,
  PRIMARY KEY(trial_id, name)) WITHOUT ROWID;
CREATE TABLE metrics(
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL,
  time_ms INTEGER NOT NULL,
  PRIMARY KEY(trial_id, step, name)) WITHOUT ROWID;
CREATE TABLE checkpoints(
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  checkpoint_id TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY(trial_id, step)) WITHOUT ROWID;
CREATE TABLE workers(
  id TEXT PRIMARY KEY,
  host TEXT NOT NULL,
  resources BLOB NOT NULL,
  last_seen_ms INTEGER NOT NULL);
)sql",
};
constexpr int kSchemaVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

// The canonical code for an SQLite result, chosen by what the caller should
// do. A full disk, a failed read or write, a busy or locked file and a file
// that became read-only are conditions an operator fixes while the scheduler
// runs, so callers retry (UNAVAILABLE). A damaged file will not heal.
absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      return absl::StatusCode::kAlreadyExists;
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_NOMEM:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

// `rc` from the last call on `db` as a status whose message names the
// database file and the cause, with the operating system's reason for I/O
// failures where SQLite kept it ("database /var/lib/dial/dial.db: database
// or disk is full; free disk space and retry").
absl::Status SqliteError(sqlite3* db, int rc, const char* message = nullptr) {
  const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
  std::string msg =
      absl::StrCat("database ", file && *file ? file : "(unnamed)", ": ",
                   message ? message
                   : db    ? sqlite3_errmsg(db)
                           : sqlite3_errstr(rc));
  const int primary = rc & 0xff;
  const int os_error = db ? sqlite3_system_errno(db) : 0;
  if ((primary == SQLITE_FULL || primary == SQLITE_IOERR ||
       primary == SQLITE_CANTOPEN) &&
      os_error != 0) {
    absl::StrAppend(&msg, " (", std::strerror(os_error), ")");
  }
  if (primary == SQLITE_FULL || os_error == ENOSPC || os_error == EDQUOT ||
      os_error == EFBIG) {
    absl::StrAppend(&msg, "; free disk space and retry");
  }
  return absl::Status(CodeFor(rc), msg);
}

// The first column of the first row of a one-off statement (a PRAGMA).
absl::StatusOr<std::string> QueryText(sqlite3* db, const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc);
  rc = sqlite3_step(stmt);
  std::string out;
  if (rc == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    if (text) out = reinterpret_cast<const char*>(text);
  }
  absl::Status status = rc == SQLITE_ROW || rc == SQLITE_DONE
                            ? absl::OkStatus()
                            : SqliteError(db, rc);
  sqlite3_finalize(stmt);
  if (!status.ok()) return status;
  return out;
}

int64_t ToMs(const google::protobuf::Timestamp& t) {
  return TimeUtil::TimestampToMilliseconds(t);
}
google::protobuf::Timestamp FromMs(int64_t ms) {
  return TimeUtil::MillisecondsToTimestamp(ms);
}

}  // namespace

// A cached prepared statement, reset and unbound when it goes out of scope.
class SqliteStudyStore::Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(const Statement&) = delete;
  ~Statement() {
    if (stmt_) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  bool ok() const { return stmt_ != nullptr; }
  Statement& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& Bind(int i, double v) {
    if (std::isnan(v)) {
      sqlite3_bind_null(stmt_, i);  // SQLite stores NaN as NULL anyway
    } else {
      sqlite3_bind_double(stmt_, i, v);
    }
    return *this;
  }
  Statement& Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  Statement& BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  Statement& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // Next row: true with a row, false when done; errors as status.
  absl::StatusOr<bool> Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Error(rc);
  }
  absl::Status Run() {
    auto r = Step();
    return r.ok() ? absl::OkStatus() : r.status();
  }
  absl::Status Error(int rc) const { return SqliteError(db_, rc); }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const {
    return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
  }
  double Double(int col) const {
    return IsNull(col) ? std::numeric_limits<double>::quiet_NaN()
                       : sqlite3_column_double(stmt_, col);
  }
  std::string Text(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

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
  sqlite3* db = nullptr;
  // NOMUTEX: every use of the connection is under mu_ already; SQLite's
  // own mutex would be taken again on every step and column read.
  int rc = sqlite3_open_v2(
      options.path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    ::close(lock_fd);
    return absl::UnavailableError(
        absl::StrCat("cannot open database ", options.path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  const char* full_path = sqlite3_db_filename(db, "main");
  std::unique_ptr<SqliteStudyStore> store(new SqliteStudyStore(
      db, lock_fd, full_path && *full_path ? full_path : options.path));
  absl::MutexLock lock(&store->mu_);
  // journal_mode answers with the mode it is in, which stays the old one
  // (without an error) where WAL is impossible, e.g. on some network
  // filesystems.
  DIAL_ASSIGN_OR_RETURN(std::string mode,
                        QueryText(db, "PRAGMA journal_mode=WAL"));
  if (mode != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", store->path_,
                     " cannot use write-ahead logging (its "
                     "journal mode stays '",
                     mode, "'); put it on a local filesystem"));
  }
  DIAL_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  DIAL_RETURN_IF_ERROR(store->Exec(options.full_sync
                                       ? "PRAGMA synchronous=FULL"
                                       : "PRAGMA synchronous=NORMAL"));
  DIAL_RETURN_IF_ERROR(store->Migrate());
  if (options.group_commit) {
    // The committer syncs the log itself, outside the lock (CommitLoop);
    // checkpoints still sync the log and the database file as in FULL.
    DIAL_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
    store->full_sync_ = options.full_sync;
    store->group_commit_ = true;
    // Checkpoints (copying the log into the file, with two fsyncs) would
    // otherwise run inside a COMMIT now and then, holding the lock for
    // milliseconds: a connection of their own runs them beside the
    // commits. Our hook replaces SQLite's automatic checkpoints.
    rc =
        sqlite3_open_v2(store->path_.c_str(), &store->ckpt_db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) return SqliteError(store->ckpt_db_, rc);
    sqlite3_exec(store->ckpt_db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr,
                 nullptr);
    sqlite3_wal_hook(
        db,
        [](void* self, sqlite3*, const char*, int pages) {
          static_cast<SqliteStudyStore*>(self)->wal_pages_.store(pages);
          return SQLITE_OK;
        },
        store.get());
    store->committer_ = std::thread([s = store.get()] { s->CommitLoop(); });
    store->checkpointer_ =
        std::thread([s = store.get()] { s->CheckpointLoop(); });
  }
  return store;
}

void SqliteStudyStore::CheckpointLoop() {
  while (true) {
    {
      absl::MutexLock lock(&ckpt_mu_);
      while (!ckpt_wanted_ && !ckpt_stop_) ckpt_cv_.Wait(&ckpt_mu_);
      if (ckpt_stop_) return;
      ckpt_wanted_ = false;
    }
    // PASSIVE: copies what no reader needs, never blocks the writer. A
    // failure (say a full disk) leaves the log to the next try.
    sqlite3_wal_checkpoint_v2(ckpt_db_, nullptr, SQLITE_CHECKPOINT_PASSIVE,
                              nullptr, nullptr);
  }
}

SqliteStudyStore::~SqliteStudyStore() {
  if (committer_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      commit_cv_.Signal();
    }
    committer_.join();  // commits what was applied first
    {
      absl::MutexLock lock(&ckpt_mu_);
      ckpt_stop_ = true;
      ckpt_cv_.Signal();
    }
    checkpointer_.join();
  }
  // Also when Create failed after opening it (a failed open leaves a
  // handle to close too); no-op when null.
  sqlite3_close(ckpt_db_);
  absl::MutexLock lock(&mu_);
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
  if (wal_fd_ >= 0) ::close(wal_fd_);
  ::close(lock_fd_);
}

absl::Status SqliteStudyStore::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteError(db_, rc, err);
    sqlite3_free(err);
    return status;
  }
  return absl::OkStatus();
}

SqliteStudyStore::Statement SqliteStudyStore::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return Statement(db_, it->second);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt,
                         nullptr) != SQLITE_OK) {
    return Statement(db_, nullptr);
  }
  statements_[sql] = stmt;
  return Statement(db_, stmt);
}

absl::Status SqliteStudyStore::Run(const char* sql) {
  Statement stmt = Prepare(sql);
  if (!stmt.ok()) return SqliteError(db_, sqlite3_errcode(db_));
  return stmt.Run();
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
  if (!group_commit_) {
    DIAL_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    absl::Status status = body();
    if (status.ok()) status = Exec("COMMIT");
    if (!status.ok() && !sqlite3_get_autocommit(db_)) {
      Exec("ROLLBACK").IgnoreError();
    }
    return status;
  }
  if (!broken_.ok()) return broken_;
  if (!lost_.ok()) return lost_;
  if (txn_open_ && sqlite3_get_autocommit(db_)) {
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
    DIAL_RETURN_IF_ERROR(Run("BEGIN IMMEDIATE"));
    txn_open_ = true;
  }
  // Cached statements: this runs for every write.
  absl::Status status = Run("SAVEPOINT write");
  if (status.ok()) status = body();
  if (status.ok()) status = Run("RELEASE write");
  if (status.ok()) {
    applied_seq_.fetch_add(1);
    if (committer_idle_) commit_cv_.Signal();  // else it looks when done
    return status;
  }
  if (sqlite3_get_autocommit(db_)) {
    // SQLite ended the whole transaction: the group's earlier writes too.
    txn_open_ = false;
    LoseGroup(status);
    return status;
  }
  if (Run("ROLLBACK TO write").ok() && Run("RELEASE write").ok()) {
    return status;
  }
  Exec("ROLLBACK").IgnoreError();
  txn_open_ = false;
  LoseGroup(status);
  return status;
}

// After a failed fdatasync of the log the kernel may have dropped its dirty
// pages, and later syncs succeed without writing them ("fsyncgate"): no
// later commit can be promised durable, since recovery stops at the first
// missing frame. So every further write is refused until the process
// restarts, and the writes applied meanwhile (the next group) are rolled
// back and lost.
void SqliteStudyStore::Break(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  broken_ = absl::UnavailableError(absl::StrCat(
      cause.message(),
      "; every write is refused until dial-scheduler restarts, since after "
      "a failed sync the system may have dropped writes it reported done"));
  spdlog::error("{}", std::string(broken_.message()));
  if (txn_open_) {
    Exec("ROLLBACK").IgnoreError();
    txn_open_ = false;
    LoseGroup(broken_);
  }
}

// Marks the writes applied since the last commit as lost (mu_ held); the
// committer tells their waiters and the lost handler.
void SqliteStudyStore::LoseGroup(const absl::Status& cause) {
  study_ids_.clear();
  lost_ = absl::UnavailableError(absl::StrCat(
      cause.message(),
      "; the uncommitted writes before it are lost too, and writes are "
      "refused until the scheduler reloads its state"));
  lost_pending_ = true;
  commit_cv_.Signal();
}

#define DIAL_PREPARE(var, sql)  \
  Statement var = Prepare(sql); \
  if (!var.ok()) return SqliteError(db_, sqlite3_errcode(db_));

// SQLite's own default for automatic checkpoints.
constexpr int kCheckpointPages = 1000;

void SqliteStudyStore::CommitLoop() {
  while (true) {
    uint64_t seq = 0;
    absl::Status status;
    bool lost = false, stop = false, committed = false;
    {
      absl::MutexLock lock(&mu_);
      committer_idle_ = true;
      while (!txn_open_ && !lost_pending_ && !stop_) commit_cv_.Wait(&mu_);
      committer_idle_ = false;
      stop = stop_;
      seq = applied_seq_.load();
      if (lost_pending_) {
        lost_pending_ = false;
        lost = true;
        status = lost_;
      } else if (txn_open_) {
        status = Run("COMMIT");
        if (!status.ok()) {
          if (!sqlite3_get_autocommit(db_)) Exec("ROLLBACK").IgnoreError();
          LoseGroup(status);
          lost_pending_ = false;
          lost = true;
          status = lost_;
        }
        txn_open_ = false;
        committed = !lost;
        if (committed) commits_.fetch_add(1);
      }
    }
    // The commit wrote the group's frames to the write-ahead log without
    // syncing it (synchronous=NORMAL); syncing here, outside the lock, lets
    // the next group's writes go on meanwhile. An acknowledged write is in
    // the synced log, which SQLite replays after a crash.
    if (committed && full_sync_) status = SyncWal();
    if (committed && !status.ok()) Break(status);
    if (committed && wal_pages_.load() >= kCheckpointPages) {
      absl::MutexLock lock(&ckpt_mu_);
      ckpt_wanted_ = true;
      ckpt_cv_.Signal();
    }
    // The owner reloads before anyone can hear of the loss (durable_seq_
    // has not moved, so WhenDurable still queues), and a retry meets the
    // reloaded state.
    if (lost) {
      std::function<void()> handler;
      {
        absl::MutexLock lock(&durable_mu_);
        handler = lost_handler_;
        handler_running_ = true;
      }
      if (handler) handler();
      absl::MutexLock lock(&durable_mu_);
      handler_running_ = false;
    }
    std::vector<std::function<void(absl::Status)>> ok, failed;
    {
      absl::MutexLock lock(&durable_mu_);
      if (!status.ok()) {
        // Lost, or committed but maybe not on disk (the sync failed): not
        // acknowledged either way. After a failed sync memory and file
        // agree, so nothing is reloaded for this group (Break loses the
        // next one).
        lost_ranges_.push_back({durable_seq_, seq});
        lost_status_ = status;
      }
      durable_seq_ = seq;  // answered, one way or the other
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->first > seq) {
          ++it;
          continue;
        }
        (status.ok() ? ok : failed).push_back(std::move(it->second));
        it = waiters_.erase(it);
      }
    }
    for (auto& done : ok) done(absl::OkStatus());
    for (auto& done : failed) done(status);
    if (stop) return;
  }
}

absl::Status SqliteStudyStore::SyncWal() {
  if (wal_fd_ < 0) {
    wal_fd_ = ::open((path_ + "-wal").c_str(), O_RDONLY | O_CLOEXEC);
    if (wal_fd_ < 0) {
      return absl::UnavailableError(absl::StrCat(
          "database ", path_,
          ": cannot open its log to sync it: ", std::strerror(errno)));
    }
  }
  if (::fdatasync(wal_fd_) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "database ", path_, ": cannot sync its log: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void SqliteStudyStore::WhenDurable(uint64_t seq,
                                   std::function<void(absl::Status)> done) {
  absl::Status status;
  {
    absl::MutexLock lock(&durable_mu_);
    if (seq > durable_seq_) {
      waiters_.push_back({seq, std::move(done)});
      return;
    }
    for (const auto& [first, last] : lost_ranges_) {
      if (seq > first && seq <= last) status = lost_status_;
    }
  }
  done(status);
}

void SqliteStudyStore::SetLostHandler(std::function<void()> handler) {
  absl::MutexLock lock(&durable_mu_);
  // A running handler may use what the caller is about to destroy: wait for
  // it to return, unless this is the handler itself (it runs on the
  // committer thread).
  if (std::this_thread::get_id() != committer_.get_id()) {
    durable_mu_.Await(absl::Condition(
        +[](bool* running) { return !*running; }, &handler_running_));
  }
  lost_handler_ = std::move(handler);
}

void SqliteStudyStore::Recover() {
  absl::MutexLock lock(&mu_);
  lost_ = absl::OkStatus();
}

absl::Status SqliteStudyStore::Flush() {
  if (!group_commit_) return absl::OkStatus();
  absl::Notification done;
  absl::Status result;
  WhenDurable(WrittenSeq(), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

int SqliteStudyStore::schema_version() {
  absl::MutexLock lock(&mu_);
  Statement stmt = Prepare("SELECT version FROM schema_version");
  if (!stmt.ok()) return 0;
  auto row = stmt.Step();
  return row.ok() && *row ? static_cast<int>(stmt.Int(0)) : 0;
}

int SqliteStudyStore::synchronous() {
  absl::MutexLock lock(&mu_);
  auto level = QueryText(db_, "PRAGMA synchronous");
  int out = 0;
  return level.ok() && absl::SimpleAtoi(*level, &out) ? out : -1;
}

absl::Status SqliteStudyStore::Migrate() {
  DIAL_RETURN_IF_ERROR(
      Exec("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT "
           "NULL)"));
  int version = 0;
  {
    DIAL_PREPARE(stmt, "SELECT version FROM schema_version");
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row) version = static_cast<int>(stmt.Int(0));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database schema version ", version, " is newer than this Dial (",
        kSchemaVersion, "); upgrade Dial"));
  }
  for (int v = version; v < kSchemaVersion; ++v) {
    DIAL_RETURN_IF_ERROR(Transaction([&]() -> absl::Status {
      DIAL_RETURN_IF_ERROR(Exec(kMigrations[v]));
      DIAL_RETURN_IF_ERROR(Exec("DELETE FROM schema_version"));
      DIAL_PREPARE(set, "INSERT INTO schema_version(version) VALUES (?)");
      return set.Bind(1, int64_t{v + 1}).Run();
    }));
  }
  return absl::OkStatus();
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
    DIAL_PREPARE(stmt,
                 "INSERT INTO studies(name, spec, state, create_ms, update_ms) "
                 "VALUES (?, ?, ?, ?, ?)");
    stmt.Bind(1, study.name())
        .BindBlob(2, study.spec().SerializeAsString())
        .Bind(3, int64_t{study.state()})
        .Bind(4, ToMs(study.create_time()))
        .Bind(5, ToMs(study.update_time()));
    absl::Status status = stmt.Run();
    if (absl::IsAlreadyExists(status)) {
      return absl::AlreadyExistsError(
          absl::StrCat("study '", study.name(), "' already exists"));
    }
    return status;
  });
}

namespace {
v1::Study StudyFromRow(const std::string& name, const std::string& spec,
                       int64_t state, int64_t create_ms, int64_t update_ms) {
  v1::Study study;
  study.set_name(name);
  study.mutable_spec()->ParseFromString(spec);
  study.set_state(static_cast<v1::StudyState>(state));
  *study.mutable_create_time() = FromMs(create_ms);
  *study.mutable_update_time() = FromMs(update_ms);
  return study;
}
}  // namespace

absl::StatusOr<v1::Study> SqliteStudyStore::GetStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt,
               "SELECT name, spec, state, create_ms, update_ms FROM studies "
               "WHERE name = ?");
  stmt.Bind(1, name);
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return StudyFromRow(stmt.Text(0), stmt.Text(1), stmt.Int(2), stmt.Int(3),
                      stmt.Int(4));
}

absl::StatusOr<std::vector<v1::Study>> SqliteStudyStore::ListStudies() {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt,
               "SELECT name, spec, state, create_ms, update_ms FROM studies "
               "ORDER BY id");
  std::vector<v1::Study> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(StudyFromRow(stmt.Text(0), stmt.Text(1), stmt.Int(2),
                               stmt.Int(3), stmt.Int(4)));
  }
  return out;
}

absl::Status SqliteStudyStore::UpdateStudy(const v1::Study& study) {
  absl::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    DIAL_PREPARE(stmt,
                 "UPDATE studies SET spec = ?, state = ?, update_ms = ? WHERE "
                 "name = ?");
    stmt.BindBlob(1, study.spec().SerializeAsString())
        .Bind(2, int64_t{study.state()})
        .Bind(3, ToMs(study.update_time()))
        .Bind(4, study.name());
    DIAL_RETURN_IF_ERROR(stmt.Run());
    if (sqlite3_changes(db_) == 0) {
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
    DIAL_PREPARE(stmt, "DELETE FROM studies WHERE name = ?");
    stmt.Bind(1, name);
    DIAL_RETURN_IF_ERROR(stmt.Run());
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteStudyStore::PutTrialLocked(const v1::Trial& trial) {
  DIAL_ASSIGN_OR_RETURN(int64_t study_id, StudyId(trial.study()));
  // Fields without a column of their own travel in `detail`.
  v1::Trial detail;
  *detail.mutable_final_metrics() = trial.final_metrics();
  *detail.mutable_lineage() = trial.lineage();
  detail.set_checkpoint_step(trial.checkpoint_step());
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
  stmt.Bind(1, study_id)
      .Bind(2, trial.number())
      .Bind(3, int64_t{trial.state()})
      .Bind(4, trial.client_id());
  if (trial.has_objective_value()) {
    stmt.Bind(5, trial.objective_value());
  } else {
    stmt.BindNull(5);
  }
  stmt.Bind(6, trial.error())
      .Bind(7, trial.last_step())
      .Bind(8, trial.checkpoint())
      .Bind(9, int64_t{trial.attempt()})
      .Bind(10, int64_t{trial.failures()})
      .Bind(11, trial.worker_id());
  auto ms_or_null = [&](int i, bool has, const auto& ts) {
    if (has) {
      stmt.Bind(i, ToMs(ts));
    } else {
      stmt.BindNull(i);
    }
  };
  ms_or_null(12, trial.has_create_time(), trial.create_time());
  ms_or_null(13, trial.has_start_time(), trial.start_time());
  ms_or_null(14, trial.has_end_time(), trial.end_time());
  stmt.BindBlob(15, detail.SerializeAsString());
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError("trial upsert returned no id");
  const int64_t trial_id = stmt.Int(0);
  DIAL_RETURN_IF_ERROR(stmt.Step().status());  // finish the statement

  DIAL_PREPARE(clear, "DELETE FROM params WHERE trial_id = ?");
  DIAL_RETURN_IF_ERROR(clear.Bind(1, trial_id).Run());
  for (const auto& [name, value] : trial.params()) {
    DIAL_PREPARE(insert,
                 "INSERT INTO params(trial_id, name, double_value, int_value, "
                 "string_value) VALUES (?, ?, ?, ?, ?)");
    insert.Bind(1, trial_id).Bind(2, name);
    insert.BindNull(3).BindNull(4).BindNull(5);
    switch (value.value_case()) {
      case v1::ParamValue::kDoubleValue:
        insert.Bind(3, value.double_value());
        break;
      case v1::ParamValue::kIntValue:
        insert.Bind(4, value.int_value());
        break;
      default:
        insert.Bind(5, value.string_value());
    }
    DIAL_RETURN_IF_ERROR(insert.Run());
  }
  return absl::OkStatus();
}

absl::Status SqliteStudyStore::PutTrial(const v1::Trial& trial) {
  absl::MutexLock lock(&mu_);
  return Transaction([&] { return PutTrialLocked(trial); });
}

#define DIAL_TRIAL_COLUMNS                                               \
  "t.id, s.name, t.number, t.state, t.client_id, t.objective, t.error, " \
  "t.last_step, t.checkpoint, t.attempt, t.failures, t.worker_id, "      \
  "t.create_ms, t.start_ms, t.end_ms, t.detail"

absl::StatusOr<v1::Trial> SqliteStudyStore::ReadTrial(Statement& stmt) {
  v1::Trial trial;
  trial.ParseFromString(stmt.Text(15));
  const int64_t trial_id = stmt.Int(0);
  trial.set_study(stmt.Text(1));
  trial.set_number(stmt.Int(2));
  trial.set_state(static_cast<v1::TrialState>(stmt.Int(3)));
  trial.set_client_id(stmt.Text(4));
  if (!stmt.IsNull(5)) trial.set_objective_value(stmt.Double(5));
  trial.set_error(stmt.Text(6));
  trial.set_last_step(stmt.Int(7));
  trial.set_checkpoint(stmt.Text(8));
  trial.set_attempt(static_cast<int32_t>(stmt.Int(9)));
  trial.set_failures(static_cast<int32_t>(stmt.Int(10)));
  trial.set_worker_id(stmt.Text(11));
  if (!stmt.IsNull(12)) *trial.mutable_create_time() = FromMs(stmt.Int(12));
  if (!stmt.IsNull(13)) *trial.mutable_start_time() = FromMs(stmt.Int(13));
  if (!stmt.IsNull(14)) *trial.mutable_end_time() = FromMs(stmt.Int(14));

  DIAL_PREPARE(params,
               "SELECT name, double_value, int_value, string_value FROM "
               "params WHERE trial_id = ?");
  params.Bind(1, trial_id);
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, params.Step());
    if (!row) break;
    v1::ParamValue& value = (*trial.mutable_params())[params.Text(0)];
    if (!params.IsNull(1)) {
      value.set_double_value(params.Double(1));
    } else if (!params.IsNull(2)) {
      value.set_int_value(params.Int(2));
    } else {
      value.set_string_value(params.Text(3));
    }
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
  return ReadTrial(stmt);
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
    DIAL_ASSIGN_OR_RETURN(v1::Trial trial, ReadTrial(stmt));
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
    v1::Trial detail;
    *detail.mutable_final_metrics() = trial.final_metrics();
    *detail.mutable_lineage() = trial.lineage();
    detail.set_checkpoint_step(trial.checkpoint_step());
    DIAL_PREPARE(update,
                 "UPDATE trials SET last_step = ?, checkpoint = ?, detail = ? "
                 "WHERE id = ?");
    return update.Bind(1, trial.last_step())
        .Bind(2, trial.checkpoint())
        .BindBlob(3, detail.SerializeAsString())
        .Bind(4, trial_id)
        .Run();
  });
}

absl::StatusOr<std::vector<v1::MetricPoint>> SqliteStudyStore::GetMetricHistory(
    const std::string& study, int64_t number) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(int64_t trial_id, TrialId(study, number));
  DIAL_PREPARE(stmt,
               "SELECT step, name, value, time_ms FROM metrics WHERE "
               "trial_id = ? ORDER BY step");
  stmt.Bind(1, trial_id);
  std::vector<v1::MetricPoint> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    if (out.empty() || out.back().step() != stmt.Int(0)) {
      out.emplace_back().set_step(stmt.Int(0));
      *out.back().mutable_time() = FromMs(stmt.Int(3));
    }
    (*out.back().mutable_metrics())[stmt.Text(1)] = stmt.Double(2);
  }
  return out;
}

// Rows of (number, step, name, value, time_ms) grouped into one report
// per (trial, step).
absl::Status SqliteStudyStore::EmitReports(
    Statement& stmt,
    const std::function<void(int64_t number, const v1::MetricPoint& point)>&
        fn) {
  // A bulk read of the whole history (at start-up): pages read through a
  // memory map cost no system call each. Only for this read: an I/O error
  // under a map is a signal, not an error code, so the map is off again
  // for normal work.
  Exec("PRAGMA mmap_size=2147418112").IgnoreError();
  struct Unmap {
    SqliteStudyStore* store;
    ~Unmap() { store->Exec("PRAGMA mmap_size=0").IgnoreError(); }
  } unmap{this};
  v1::MetricPoint point;
  int64_t number = -1;
  bool open = false;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (open &&
        (!row || stmt.Int(0) != number || stmt.Int(1) != point.step())) {
      fn(number, point);
      point.Clear();
      open = false;
    }
    if (!row) break;
    if (!open) {
      number = stmt.Int(0);
      point.set_step(stmt.Int(1));
      *point.mutable_time() = FromMs(stmt.Int(4));
      open = true;
    }
    (*point.mutable_metrics())[stmt.Text(2)] = stmt.Double(3);
  }
  return absl::OkStatus();
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
                 "checkpoint_id, size_bytes, checksum) VALUES (?, ?, ?, ?, ?)");
    stmt.Bind(1, trial_id)
        .Bind(2, record.step)
        .Bind(3, record.id)
        .Bind(4, record.size_bytes)
        .Bind(5, record.checksum);
    return stmt.Run();
  });
}

absl::StatusOr<std::vector<CheckpointRecord>> SqliteStudyStore::ListCheckpoints(
    const std::string& study, int64_t number) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(int64_t trial_id, TrialId(study, number));
  DIAL_PREPARE(stmt,
               "SELECT step, checkpoint_id, size_bytes, checksum FROM "
               "checkpoints WHERE trial_id = ? ORDER BY step");
  stmt.Bind(1, trial_id);
  std::vector<CheckpointRecord> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(
        {study, number, stmt.Int(0), stmt.Text(1), stmt.Int(2), stmt.Text(3)});
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
    stmt.Bind(1, worker.id())
        .Bind(2, worker.host())
        .BindBlob(3, worker.resources().SerializeAsString())
        .Bind(4, ToMs(worker.last_seen()));
    return stmt.Run();
  });
}

absl::StatusOr<std::vector<v1::Worker>> SqliteStudyStore::ListWorkers() {
  absl::MutexLock lock(&mu_);
  DIAL_PREPARE(stmt,
               "SELECT id, host, resources, last_seen_ms FROM workers ORDER "
               "BY id");
  std::vector<v1::Worker> out;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    v1::Worker& w = out.emplace_back();
    w.set_id(stmt.Text(0));
    w.set_host(stmt.Text(1));
    w.mutable_resources()->ParseFromString(stmt.Text(2));
    *w.mutable_last_seen() = FromMs(stmt.Int(3));
  }
  return out;
}

namespace {

// An errno from a file operation for the backup, with the code a caller acts
// on: fix permissions, fix the path, or retry once the disk has room.
absl::Status BackupErrno(int err, const std::string& what) {
  absl::StatusCode code = absl::StatusCode::kUnavailable;  // ENOSPC, EIO, ...
  if (err == EACCES || err == EPERM || err == EROFS) {
    code = absl::StatusCode::kPermissionDenied;
  } else if (err == ENOENT || err == ENOTDIR) {
    code = absl::StatusCode::kFailedPrecondition;
  }
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status Fsync(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return BackupErrno(errno, "cannot open " + path);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return BackupErrno(err, "cannot fsync " + path);
  return absl::OkStatus();
}

// Whether `path` is a regular file that starts with SQLite's header.
bool IsSqliteFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char header[16];
  const ssize_t n = ::read(fd, header, sizeof(header));
  ::close(fd);
  return n == sizeof(header) &&
         std::memcmp(header, "SQLite format 3", sizeof(header)) == 0;
}

// Copies the committed snapshot of `source` into the empty file `target`
// with SQLite's backup API, through connections of its own.
absl::Status CopyDatabase(const std::string& source, const std::string& target,
                          const std::string& named) {
  sqlite3* src = nullptr;
  sqlite3* dst = nullptr;
  absl::Status status;
  int rc = sqlite3_open_v2(source.c_str(), &src, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    status = SqliteError(src, rc);
  } else {
    sqlite3_busy_timeout(src, 5000);
    rc = sqlite3_open_v2(target.c_str(), &dst, SQLITE_OPEN_READWRITE, nullptr);
    // The copy is a scratch file until the rename: no journal, and one
    // fsync by the caller instead of SQLite's.
    if (rc == SQLITE_OK) {
      rc = sqlite3_exec(dst, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF",
                        nullptr, nullptr, nullptr);
    }
    if (rc != SQLITE_OK) {
      status = SqliteError(dst, rc);
    } else if (sqlite3_backup* backup =
                   sqlite3_backup_init(dst, "main", src, "main")) {
      // One step: the whole copy reads one snapshot, and in WAL mode the
      // scheduler's writes go on meanwhile.
      sqlite3_backup_step(backup, -1);
      rc = sqlite3_backup_finish(backup);
      if (rc != SQLITE_OK) status = SqliteError(dst, rc);
    } else {
      status = SqliteError(dst, sqlite3_errcode(dst));
    }
  }
  sqlite3_close(dst);
  sqlite3_close(src);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("backup to ", named, " failed: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> SqliteStudyStore::Backup(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "path: must be absolute (a path on the scheduler's machine), got '",
        path, "'"));
  }
  const fs::path target = fs::path(path).lexically_normal();
  if (!target.has_filename() || target.filename() == "." ||
      target.filename() == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("path: '", path, "' names a directory, not a file"));
  }
  const fs::path dir = target.parent_path();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("path: directory ", dir.string(),
                     " does not exist on the scheduler's machine"));
  }
  // Never the live database, nor the files SQLite keeps next to it, under
  // any name (symbolic or hard links included).
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(target, ec);
  const fs::path live = fs::weakly_canonical(path_, ec);
  struct stat target_st;
  const bool target_exists = ::stat(target.c_str(), &target_st) == 0;
  for (const char* suffix : {"", "-wal", "-shm", "-lock", "-journal"}) {
    const std::string file = live.string() + suffix;
    struct stat file_st;
    if (resolved == fs::path(file) ||
        (target_exists && ::stat(file.c_str(), &file_st) == 0 &&
         file_st.st_dev == target_st.st_dev &&
         file_st.st_ino == target_st.st_ino)) {
      return absl::InvalidArgumentError(
          absl::StrCat("path: ", path, " is the live database",
                       *suffix ? absl::StrCat("'s ", suffix + 1, " file") : "",
                       file == path ? "" : absl::StrCat(" (", file, ")"),
                       "; back up to another file"));
    }
  }
  if (::lstat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path: ", path, " is a directory; name the backup file in it"));
    }
    if (!S_ISREG(st.st_mode) || !IsSqliteFile(target)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path,
          " exists and is not an SQLite database; refusing to replace "
          "it"));
    }
  }

  std::string temp =
      (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    return BackupErrno(errno,
                       absl::StrCat("cannot create a file in ", dir.string()));
  }
  ::close(fd);
  absl::Status status = CopyDatabase(path_, temp, target.string());
  if (status.ok()) status = Fsync(temp, O_RDONLY);
  if (status.ok() && ::rename(temp.c_str(), target.c_str()) != 0) {
    status = BackupErrno(
        errno, absl::StrCat("cannot rename ", temp, " to ", target.string()));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  // The rename itself is durable once the directory is.
  DIAL_RETURN_IF_ERROR(Fsync(dir.string(), O_RDONLY | O_DIRECTORY));
  if (::stat(target.c_str(), &st) != 0) {
    return BackupErrno(errno, "cannot stat " + target.string());
  }
  return static_cast<int64_t>(st.st_size);
}

}  // namespace dial::storage
