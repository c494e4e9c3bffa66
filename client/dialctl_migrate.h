// `dialctl admin migrate`: copies a study database, offline, from one
// store to another (SQLite to PostgreSQL, or back), verifies the counts,
// and refuses a target that is not empty (storage/migrate_store.h).
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace dial::cli {

struct MigrateOptions {
  std::string from;           // a SQLite path, sqlite:///PATH or postgresql://
  std::string to;             // the same forms; must be empty
  std::string password_file;  // PostgreSQL's, for either; empty: PGPASSFILE
  bool json = false;
};

// Prints a line a study copied and a summary (one JSON line with `json`).
absl::Status MigrateDatabases(const MigrateOptions& options, std::ostream& out);

}  // namespace dial::cli
