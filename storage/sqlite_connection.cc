#include "storage/sqlite_connection.h"

#include <sqlite3.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dial::storage {
namespace {

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

}  // namespace

absl::Status SqliteError(sqlite3* db, int rc, const char* message) {
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

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement::~Statement() {
  if (stmt_) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Statement& Statement::Bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}

Statement& Statement::Bind(int i, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(stmt_, i);  // SQLite stores NaN as NULL anyway
  } else {
    sqlite3_bind_double(stmt_, i, v);
  }
  return *this;
}

Statement& Statement::Bind(int i, const std::string& v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()),
                    SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindBlob(int i, const std::string& v) {
  sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()),
                    SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db_, rc);
}

absl::Status Statement::Run() {
  auto row = Step();
  return row.ok() ? absl::OkStatus() : row.status();
}

int64_t Statement::Int(int col) const {
  return sqlite3_column_int64(stmt_, col);
}

bool Statement::IsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

double Statement::Double(int col) const {
  return IsNull(col) ? std::numeric_limits<double>::quiet_NaN()
                     : sqlite3_column_double(stmt_, col);
}

std::string Statement::Text(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(static_cast<const char*>(p), n) : std::string();
}

absl::StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(
    const std::string& path, int flags) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open database ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  const char* full_path = sqlite3_db_filename(db, "main");
  return std::unique_ptr<SqliteConnection>(
      new SqliteConnection(db, full_path && *full_path ? full_path : path));
}

SqliteConnection::~SqliteConnection() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

absl::Status SqliteConnection::Exec(const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteError(db_, rc, err);
    sqlite3_free(err);
    return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<Statement> SqliteConnection::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return Statement(db_, it->second);
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                    &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_, rc);
  statements_[sql] = stmt;
  return Statement(db_, stmt);
}

absl::Status SqliteConnection::Run(const char* sql) {
  auto stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  return stmt->Run();
}

absl::StatusOr<std::string> SqliteConnection::QueryText(const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_, rc);
  rc = sqlite3_step(stmt);
  std::string out;
  if (rc == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    if (text) out = reinterpret_cast<const char*>(text);
  }
  absl::Status status = rc == SQLITE_ROW || rc == SQLITE_DONE
                            ? absl::OkStatus()
                            : SqliteError(db_, rc);
  sqlite3_finalize(stmt);
  if (!status.ok()) return status;
  return out;
}

bool SqliteConnection::in_transaction() const {
  return !sqlite3_get_autocommit(db_);
}

int SqliteConnection::changes() const { return sqlite3_changes(db_); }

}  // namespace dial::storage
