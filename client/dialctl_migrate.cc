#include "client/dialctl_migrate.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "storage/migrate_store.h"
#include "storage/open_study_store.h"
#include "storage/pg_connection.h"

namespace dial::cli {
namespace {

absl::StatusOr<std::unique_ptr<storage::StudyStore>> Open(
    const std::string& flag, const std::string& db,
    const std::string& password_file) {
  storage::OpenStoreOptions o;
  o.db = db;
  // The password is PostgreSQL's: a SQLite side takes none.
  if (storage::IsPostgresUrl(db)) o.password_file = password_file;
  auto store = storage::OpenStudyStore(o);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat(flag, " ", storage::DescribeDb(db), ": ",
                                     store.status().message()));
  }
  return store;
}

}  // namespace

absl::Status MigrateDatabases(const MigrateOptions& options,
                              std::ostream& out) {
  if (options.from.empty() || options.to.empty()) {
    return absl::InvalidArgumentError(
        "admin migrate needs --from=DB and --to=DB");
  }
  if (options.from == options.to) {
    return absl::InvalidArgumentError(
        "admin migrate: --from and --to name the same database");
  }
  if (!storage::IsPostgresUrl(options.from)) {
    // Opening a SQLite path that is not there would make an empty database
    // and "migrate" nothing.
    const std::string path = absl::StartsWith(options.from, "sqlite://")
                                 ? options.from.substr(9)
                                 : options.from;
    if (!std::filesystem::exists(path)) {
      return absl::NotFoundError(
          absl::StrCat("--from: there is no database at ", path));
    }
  }
  auto from = Open("--from", options.from, options.password_file);
  if (!from.ok()) return from.status();
  auto to = Open("--to", options.to, options.password_file);
  if (!to.ok()) return to.status();
  auto counts = storage::CopyStore(
      **from, **to,
      [&](const std::string& study, const storage::StoreCounts::Study& c) {
        if (!options.json) {
          out << "copied study " << study << ": " << c.trials << " trials, "
              << c.reports << " reports, " << c.checkpoints << " checkpoints\n";
        }
      });
  if (!counts.ok()) return counts.status();
  int64_t trials = 0, reports = 0, checkpoints = 0;
  for (const auto& [name, c] : counts->studies) {
    trials += c.trials;
    reports += c.reports;
    checkpoints += c.checkpoints;
  }
  if (options.json) {
    out << absl::StrCat(
        "{\"studies\":", counts->studies.size(), ",\"trials\":", trials,
        ",\"reports\":", reports, ",\"checkpoints\":", checkpoints,
        ",\"audit_events\":", counts->audit_events,
        ",\"usage_records\":", counts->usage_records, ",\"verified\":true}\n");
  } else {
    out << "migrated " << counts->studies.size() << " studies (" << trials
        << " trials, " << reports << " reports, " << checkpoints
        << " checkpoints), " << counts->audit_events << " audit events and "
        << counts->usage_records << " usage records from "
        << storage::DescribeDb(options.from) << " to "
        << storage::DescribeDb(options.to)
        << "; every count verified on both sides\n";
  }
  return absl::OkStatus();
}

}  // namespace dial::cli
