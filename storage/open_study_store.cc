#include "storage/open_study_store.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "storage/pg_study_store.h"
#include "storage/sqlite_study_store.h"

namespace dial::storage {
namespace {

constexpr char kSqliteScheme[] = "sqlite://";

}  // namespace

absl::StatusOr<std::string> ReadDbPassword(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--db-password-file: cannot read ", path));
  }
  std::string password;
  std::getline(in, password);  // the first line, without its newline
  if (!password.empty() && password.back() == '\r') password.pop_back();
  if (password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--db-password-file: ", path, " is empty"));
  }
  return password;
}

std::string DescribeDb(const std::string& db) {
  return IsPostgresUrl(db) ? DescribeUrl(db) : db;
}

absl::StatusOr<std::unique_ptr<StudyStore>> OpenStudyStore(
    const OpenStoreOptions& options) {
  if (IsPostgresUrl(options.db)) {
    PgTarget target{options.db, ""};
    if (!options.password_file.empty()) {
      auto password = ReadDbPassword(options.password_file);
      if (!password.ok()) return password.status();
      target.password = std::move(*password);
    }
    auto store = PgStudyStore::Create(
        target, {options.group_commit, options.metrics, options.io_timeout});
    if (!store.ok()) return store.status();
    return std::unique_ptr<StudyStore>(std::move(*store));
  }
  if (!options.password_file.empty()) {
    return absl::InvalidArgumentError(
        "--db-password-file: only for a postgresql:// --db");
  }
  std::string path = options.db;
  if (absl::StartsWith(path, kSqliteScheme)) {
    path = path.substr(sizeof(kSqliteScheme) - 1);
    if (!absl::StartsWith(path, "/")) {
      return absl::InvalidArgumentError(
          "--db: sqlite:// takes an absolute path: sqlite:///var/lib/dial.db");
    }
  } else if (absl::StrContains(path, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--db: '", path.substr(0, path.find("://")),
        "' is not a database Dial knows: a SQLite path, sqlite:///path or "
        "postgresql://USER@HOST:PORT/DBNAME"));
  }
  auto store = SqliteStudyStore::Create(
      {path, options.full_sync, options.group_commit, options.metrics});
  if (!store.ok()) return store.status();
  return std::unique_ptr<StudyStore>(std::move(*store));
}

}  // namespace dial::storage
