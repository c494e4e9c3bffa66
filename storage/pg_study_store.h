// StudyStore on PostgreSQL (libpq), for schedulers whose state must
// outlive one machine's disk (docs/ha.md). Messages are stored as
// serialized protos (bytea) beside the columns that queries select and
// order by; forward migrations are recorded in `dial_schema` and run under
// an advisory lock, so two schedulers starting at once migrate once.
// Without group commit every write is one transaction, committed before
// it returns. With it (the scheduler's default) writes join one open
// transaction that a committer thread commits, many writes a COMMIT, as
// the SQLite store does; durability() says when a write is durable, and a
// group that cannot be committed (lost connection, lost lease) is lost
// whole, with the lost handler told. The writes, group commit and the
// leader's fence are defined in pg_writes.cc.
//
// Thread-safe: one mutex serialises the connection. A lost connection is
// made again at the next call, with backoff; meanwhile calls fail
// UNAVAILABLE, and a COMMIT the connection dropped in is UNAVAILABLE too:
// no call claims a write it cannot vouch for.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "storage/durability.h"
#include "storage/pg_connection.h"
#include "storage/study_store.h"

namespace dial::storage {

class GroupCommitter;
struct CommittedGroup;

struct PgStoreOptions {
  // Group commit (see above).
  bool group_commit = false;
  // Group commit's timings (dial_db_commit_seconds and the rest); null:
  // none. Not owned; outlives the store.
  metrics::Registry* metrics = nullptr;
  // A call whose packets go unanswered this long fails UNAVAILABLE
  // (PgConnection::Open's io_timeout); zero: the kernel's timeouts. A
  // scheduler cut off from its database must not wait minutes in a call.
  absl::Duration io_timeout = absl::ZeroDuration();
};

class PgStudyStore : public StudyStore, public Durability {
 public:
  // Connects, creates or migrates the schema. UNAVAILABLE if the server
  // cannot be reached or refuses the credentials; FAILED_PRECONDITION if
  // the database is from a newer Dial (nothing is written then).
  static absl::StatusOr<std::unique_ptr<PgStudyStore>> Create(
      const PgTarget& target, const PgStoreOptions& options = {});
  ~PgStudyStore() override;

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
  // With group commit, the open group (the last term's) ends first, under
  // the old fence; the writes of the new term start with nothing lost.
  // Group commit checks the fence once a group, just before its COMMIT.
  absl::Status SetFence(const std::string& holder, int64_t epoch,
                        absl::Duration lease);

  // Durability: this store with group commit; null without.
  Durability* durability() override;
  uint64_t WrittenSeq() const override;
  void WhenDurable(uint64_t seq,
                   std::function<void(absl::Status)> done) override;
  void SetLostHandler(std::function<void()> handler) override;
  void Recover() override;
  // For tests (group commit): while held, nothing is committed.
  void HoldCommitsForTesting(bool hold);
  // For tests: drops the connection as a network failure would.
  void DropConnectionForTesting();

  // The schema version the database is at, and the latest this build
  // knows (for tests and `dialctl admin`).
  absl::StatusOr<int> SchemaVersion();
  static int LatestSchemaVersion();
  // Applies migrations up to `version` only (tests of the forward
  // migration start from an older schema).
  static absl::Status MigrateTo(PgConnection& conn, int version);

 private:
  explicit PgStudyStore(std::unique_ptr<PgConnection> conn);
  // The id of study `name`; NOT_FOUND if absent.
  absl::StatusOr<int64_t> StudyId(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The steps recorded of trial `number` (NOT_FOUND if there is no such
  // trial), read once and then kept, with the ids of studies by name:
  // under group commit a report is sent without waiting for its answer, so
  // what would make it fail is checked here first. Forgotten when a write
  // or a group fails, a study is deleted or a new term begins.
  absl::StatusOr<absl::flat_hash_set<int64_t>*> StepsOf(
      const std::string& study, int64_t study_id, int64_t number)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetCaches() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One statement that must change one row: sent without waiting under
  // group commit (a failure then loses the group), else run.
  absl::Status Apply(absl::string_view sql, const PgParams& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND unless trial `number` of study `study_id` exists.
  absl::Status TrialExists(const std::string& study, int64_t study_id,
                           int64_t number) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // `body` as one atomic write: its own transaction after the fence
  // check, or (group commit) a part of the open group, in a savepoint
  // unless `one_statement` (a failing statement then loses the group, as
  // it fails the transaction).
  // Under group commit a write that `needs` what one of the group being
  // committed `makes` (a study, a trial: StudyKey, TrialKey) waits for
  // that COMMIT first.
  absl::Status Write(const std::function<absl::Status()>& body,
                     bool one_statement = false, const std::string& needs = "",
                     const std::string& makes = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteInGroup(const std::function<absl::Status()>& body,
                            bool one_statement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the writes applied since the last commit lost.
  void LoseGroup(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The committer's call: commits the open group, after the fence check.
  CommittedGroup CommitGroup() ABSL_LOCKS_EXCLUDED(mu_);
  // OK while `holder` holds the lease of `epoch` (0: no fence), under a
  // share lock on the lease row that its transaction keeps.
  static absl::Status CheckFence(PgConnection& conn, const std::string& holder,
                                 int64_t epoch);

  absl::Mutex mu_;
  // Two connections with group commit (one group commits on one while the
  // next is applied on the other), one without; conn_ is the one in use.
  std::unique_ptr<PgConnection> conns_[2];
  PgConnection* conn_ ABSL_GUARDED_BY(mu_);
  // No group's COMMIT is under way (reads wait for this).
  bool settled_ ABSL_GUARDED_BY(mu_) = true;
  std::string holder_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no fence
  // Group commit: the group's transaction is open, on the connection
  // numbered txn_connection_ (PgConnection::connections()).
  bool txn_open_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t txn_connection_ ABSL_GUARDED_BY(mu_) = 0;
  // Set when a group is lost; writes fail with it until Recover().
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  bool lost_pending_ ABSL_GUARDED_BY(mu_) = false;  // not yet reported
  std::unique_ptr<GroupCommitter> committer_;       // null without group commit
  // The caches of StepsOf and StudyId, bounded.
  static constexpr size_t kMaxCachedStudies = 10000;
  static constexpr size_t kMaxCachedSteps = 1 << 20;
  absl::flat_hash_map<std::string, int64_t> study_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<int64_t, int64_t>, absl::flat_hash_set<int64_t>>
      steps_ ABSL_GUARDED_BY(mu_);
  size_t cached_steps_ ABSL_GUARDED_BY(mu_) = 0;
  // What the open group and the group being committed made (Write).
  absl::flat_hash_set<std::string> written_now_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> written_committing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::storage
