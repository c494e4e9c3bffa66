// The SQLite schema of SqliteStudyStore and its forward migrations: the
// database records its version in `schema_version`, and opening it runs
// every migration from that version to this Dial's, each in a transaction
// of its own. Stateless; the connection passed in is the caller's to
// serialise.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/sqlite_connection.h"

namespace dial::storage {

// The schema version this Dial writes.
int LatestSchemaVersion();

// The SQL that takes the schema from `version` to `version` + 1 (0 <=
// version < LatestSchemaVersion()). A released entry never changes, so tests
// can build a database of an older version with it.
const char* MigrationSql(int version);

// The version recorded in the database; 0 for a new (empty) one.
absl::StatusOr<int> ReadSchemaVersion(SqliteConnection& conn);

// Brings the database up to LatestSchemaVersion(). FAILED_PRECONDITION if
// it is from a newer Dial; a failed migration leaves the version it had.
absl::Status MigrateSchema(SqliteConnection& conn);

}  // namespace dial::storage
