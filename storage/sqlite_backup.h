// Online backup of a live SQLite database (SQLite's backup API) through
// connections of its own: in WAL mode it reads one committed snapshot and
// blocks no writer. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace dial::storage {

// Copies the database `live_path` (absolute) to `path` under the contract of
// StudyStore::Backup: written under a temporary name in the same directory,
// fsynced, renamed to `path`; never `live_path` or its companion files under
// any name; never over an existing file (ALREADY_EXISTS).
// The copy has mode 0600. Returns its size in bytes.
absl::StatusOr<int64_t> BackupDatabase(const std::string& live_path,
                                       const std::string& path);

}  // namespace dial::storage
