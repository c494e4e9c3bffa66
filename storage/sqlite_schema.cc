#include "storage/sqlite_schema.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dial::storage {
namespace {

// Forward migrations: entry i takes the schema from version i to i + 1.
// Never edit an entry once released; append a new one.
const char* const kMigrations[] = {
    // 1: the first schema.
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
    // 2: each checkpoint's score (the objective, higher is better), for
    // retention across restarts. NULL in rows from before: no score, read
    // as -infinity.
    R"sql(
ALTER TABLE checkpoints ADD COLUMN score REAL;
)sql",
    // 3: study owners (empty: created without authentication) and the
    // audit log.
    R"sql(
ALTER TABLE studies ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE TABLE audit(
  id INTEGER PRIMARY KEY,
  time_ms INTEGER NOT NULL,
  principal TEXT NOT NULL,
  role TEXT NOT NULL,
  action TEXT NOT NULL,
  study TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX audit_by_study ON audit(study, id);
)sql",
    // 4: a study's queued configurations (a Study message holding only
    // queue and next_queue_id) and its warm-start prior (one holding only
    // prior_trials, written once at creation).
    R"sql(
ALTER TABLE studies ADD COLUMN extra BLOB NOT NULL DEFAULT x'';
ALTER TABLE studies ADD COLUMN prior BLOB NOT NULL DEFAULT x'';
)sql",
    // 5: usage records, one per ended attempt of a worker trial (a
    // UsageRecord), kept when their study is deleted.
    R"sql(
CREATE TABLE usage(
  id INTEGER PRIMARY KEY,
  end_ms INTEGER NOT NULL,
  owner TEXT NOT NULL,
  study TEXT NOT NULL,
  record BLOB NOT NULL);
CREATE INDEX usage_by_end ON usage(end_ms);
)sql",
};
constexpr int kSchemaVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

}  // namespace

int LatestSchemaVersion() { return kSchemaVersion; }

const char* MigrationSql(int version) {
  return version >= 0 && version < kSchemaVersion ? kMigrations[version]
                                                  : nullptr;
}

absl::StatusOr<int> ReadSchemaVersion(SqliteConnection& conn) {
  DIAL_ASSIGN_OR_RETURN(Statement stmt,
                        conn.Prepare("SELECT version FROM schema_version"));
  DIAL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? static_cast<int>(stmt.Int(0)) : 0;
}

absl::Status MigrateSchema(SqliteConnection& conn) {
  DIAL_RETURN_IF_ERROR(
      conn.Exec("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER "
                "NOT NULL)"));
  DIAL_ASSIGN_OR_RETURN(const int version, ReadSchemaVersion(conn));
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database schema version ", version, " is newer than this Dial (",
        kSchemaVersion, "); upgrade Dial"));
  }
  for (int v = version; v < kSchemaVersion; ++v) {
    DIAL_RETURN_IF_ERROR(conn.Exec("BEGIN IMMEDIATE"));
    absl::Status status = conn.Exec(kMigrations[v]);
    if (status.ok()) status = conn.Exec("DELETE FROM schema_version");
    if (status.ok()) {
      auto set = conn.Prepare("INSERT INTO schema_version(version) VALUES (?)");
      status = set.ok() ? set->Bind(1, int64_t{v + 1}).Run() : set.status();
    }
    if (status.ok()) status = conn.Exec("COMMIT");
    if (!status.ok()) {
      if (conn.in_transaction()) conn.Exec("ROLLBACK").IgnoreError();
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace dial::storage
