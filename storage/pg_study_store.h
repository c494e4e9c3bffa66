// StudyStore on PostgreSQL (libpq), for schedulers whose state must
// outlive one machine's disk (docs/ha.md). Messages are stored as
// serialized protos (bytea) beside the columns that queries select and
// order by; forward migrations are recorded in `dial_schema` and run under
// an advisory lock, so two schedulers starting at once migrate once.
// Every method is one transaction, committed before it returns (so a write
// is durable when its call returns OK).
//
// Thread-safe: one mutex serialises the connection. A lost connection is
// made again at the next call, with backoff; meanwhile calls fail
// UNAVAILABLE, and a COMMIT the connection dropped in is UNAVAILABLE too:
// no call claims a write it cannot vouch for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage/pg_connection.h"
#include "storage/study_store.h"

namespace dial::storage {

class PgStudyStore : public StudyStore {
 public:
  // Connects, creates or migrates the schema. UNAVAILABLE if the server
  // cannot be reached or refuses the credentials; FAILED_PRECONDITION if
  // the database is from a newer Dial (nothing is written then).
  static absl::StatusOr<std::unique_ptr<PgStudyStore>> Create(
      const PgTarget& target);

  absl::Status CreateStudy(const v1::Study& study) override;
  absl::StatusOr<v1::Study> GetStudy(const std::string& name) override;
  absl::StatusOr<std::vector<v1::Study>> ListStudies() override;
  absl::Status UpdateStudy(const v1::Study& study) override;
  absl::Status DeleteStudy(const std::string& name) override;

  absl::Status PutTrial(const v1::Trial& trial) override;
  absl::StatusOr<v1::Trial> GetTrial(const std::string& study,
                                     int64_t number) override;
  absl::StatusOr<std::vector<v1::Trial>> ListTrials(
      const std::string& study, const TrialQuery& query) override;

  absl::Status RecordReport(const v1::Trial& trial,
                            const v1::MetricPoint& point) override;
  using StudyStore::GetMetricHistory;
  absl::StatusOr<std::vector<v1::MetricPoint>> GetMetricHistory(
      const std::string& study, int64_t number,
      const HistoryQuery& query) override;

  absl::Status PutCheckpoint(const CheckpointRecord& record) override;
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(
      const std::string& study) override;
  absl::Status DeleteCheckpoint(const std::string& study, int64_t number,
                                int64_t step) override;

  absl::Status PutWorker(const v1::Worker& worker) override;
  absl::Status AppendAudit(const v1::AuditEvent& event) override;
  absl::StatusOr<std::vector<v1::AuditEvent>> ListAudit(
      const std::string& study, int64_t before_id, int limit) override;
  absl::Status AppendUsage(const v1::UsageRecord& record) override;
  absl::StatusOr<std::vector<v1::UsageRecord>> ListUsage(
      int64_t since_ms) override;

  // From now on every write checks, in its own transaction and under a
  // share lock on the lease row, that `holder` still holds the lease of
  // `epoch` (PgLeaderLease); a write after the lease was lost changes
  // nothing and is UNAVAILABLE. The server ends a transaction of ours that
  // sits idle for `lease`, so a paused leader cannot hold up a takeover.
  absl::Status SetFence(const std::string& holder, int64_t epoch,
                        absl::Duration lease);

  // The schema version the database is at, and the latest this build
  // knows (for tests and `dialctl admin`).
  absl::StatusOr<int> SchemaVersion();
  static int LatestSchemaVersion();
  // Applies migrations up to `version` only (tests of the forward
  // migration start from an older schema).
  static absl::Status MigrateTo(PgConnection& conn, int version);

 private:
  explicit PgStudyStore(std::unique_ptr<PgConnection> conn)
      : conn_(std::move(conn)) {}
  // The id of study `name`; NOT_FOUND if absent.
  absl::StatusOr<int64_t> StudyId(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND unless trial `number` of study `study_id` exists.
  absl::Status TrialExists(const std::string& study, int64_t study_id,
                           int64_t number) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // `body` in a transaction, after the fence check (if any).
  template <typename Fn>
  absl::Status Write(Fn&& body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return conn_->Transaction([&]() -> absl::Status {
      absl::Status fenced = CheckFence();
      return fenced.ok() ? body() : fenced;
    });
  }
  absl::Status CheckFence() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<PgConnection> conn_ ABSL_GUARDED_BY(mu_);
  std::string holder_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no fence
};

}  // namespace dial::storage
