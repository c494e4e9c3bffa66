// SqliteConnection: one SQLite connection with its cache of prepared
// statements, and the translation of SQLite's result codes into statuses.
// Not thread-safe: its owner serialises every use (SqliteStudyStore holds
// its mutex around each call). Statements are cached by the address of
// their SQL text, so Prepare takes string literals only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace dial::storage {

// `rc` from the last call on `db` (which may be null) as a status whose
// message names the database file and the cause, with the operating
// system's reason for I/O failures where SQLite kept it ("database
// /var/lib/dial/dial.db: database or disk is full; free disk space and
// retry"). The code is chosen by what the caller should do: a full disk, a
// failed read or write, a busy or locked file and a file that became
// read-only are UNAVAILABLE (an operator fixes them while the scheduler
// runs); a damaged file is DATA_LOSS; a violated constraint ALREADY_EXISTS.
absl::Status SqliteError(sqlite3* db, int rc, const char* message = nullptr);

// A cached prepared statement, reset and unbound when it goes out of scope.
// Binding NaN stores NULL (as SQLite would anyway); Double() reads NULL as
// NaN.
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  Statement& Bind(int i, int64_t v);
  Statement& Bind(int i, double v);
  Statement& Bind(int i, const std::string& v);
  Statement& BindBlob(int i, const std::string& v);
  Statement& BindNull(int i);
  // Next row: true with a row, false when done; errors as status.
  absl::StatusOr<bool> Step();
  // Steps once, for statements that return no rows.
  absl::Status Run();

  int64_t Int(int col) const;
  bool IsNull(int col) const;
  double Double(int col) const;
  std::string Text(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

class SqliteConnection {
 public:
  // Opens `path` with SQLite's open `flags`. UNAVAILABLE if it cannot.
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(
      const std::string& path, int flags);
  ~SqliteConnection();
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // Runs one or more statements without parameters or a cache.
  absl::Status Exec(const char* sql);
  // The cached statement for `sql` (a string literal), prepared on first
  // use.
  absl::StatusOr<Statement> Prepare(const char* sql);
  // Runs the cached statement `sql`, which takes no parameters.
  absl::Status Run(const char* sql);
  // The first column of the first row of a one-off statement (a PRAGMA).
  absl::StatusOr<std::string> QueryText(const char* sql);

  // Whether a transaction is open (SQLite may end one on its own after an
  // I/O error).
  bool in_transaction() const;
  // Rows changed by the last statement.
  int changes() const;
  // Absolute path of the database file.
  const std::string& path() const { return path_; }
  // For hooks and SQLite calls this class does not wrap.
  sqlite3* handle() const { return db_; }

 private:
  SqliteConnection(sqlite3* db, std::string path)
      : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  const std::string path_;
  std::map<const char*, sqlite3_stmt*> statements_;
};

}  // namespace dial::storage
