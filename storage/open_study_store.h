// Opens the study store that --db names: a SQLite file (a bare path or
// sqlite:///path, the default) or a PostgreSQL database
// (postgresql://USER@HOST:PORT/DBNAME?sslmode=...), whose password comes
// from `password_file` or libpq's PGPASSFILE, never from the URL.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "storage/study_store.h"

namespace dial::storage {

struct OpenStoreOptions {
  std::string db;
  std::string password_file;  // PostgreSQL only; empty: libpq's own
  bool full_sync = true;      // SQLite only (see SqliteStudyStoreOptions)
  bool group_commit = true;
  metrics::Registry* metrics = nullptr;
  // PostgreSQL only: a call whose packets go unanswered this long fails
  // (see PgConnection::Open); zero: the kernel's own timeouts.
  absl::Duration io_timeout = absl::ZeroDuration();
};

absl::StatusOr<std::unique_ptr<StudyStore>> OpenStudyStore(
    const OpenStoreOptions& options);
// The first line of --db-password-file (INVALID_ARGUMENT naming the flag
// when it cannot be read or is empty).
absl::StatusOr<std::string> ReadDbPassword(const std::string& path);
// The database as it may be logged: the path, or the URL without its
// query string.
std::string DescribeDb(const std::string& db);

}  // namespace dial::storage
