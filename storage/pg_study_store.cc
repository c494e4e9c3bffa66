#include "storage/pg_study_store.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "storage/sqlite_group_committer.h"

namespace dial::storage {
namespace {

// Forward migrations: entry i takes the schema from version i to i + 1.
// Never edit an entry once released; append a new one.
const char* const kMigrations[] = {
    // 1: studies (the Study message but its prior trials, which are
    // written once, apart), trials (without metric history), reports,
    // the checkpoint index, workers and the audit log.
    R"sql(
CREATE TABLE studies(
  id BIGSERIAL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  study BYTEA NOT NULL,
  prior BYTEA NOT NULL);
CREATE TABLE trials(
  study_id BIGINT NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
  number BIGINT NOT NULL,
  state BIGINT NOT NULL,
  trial BYTEA NOT NULL,
  PRIMARY KEY(study_id, number));
CREATE TABLE metrics(
  study_id BIGINT NOT NULL,
  number BIGINT NOT NULL,
  step BIGINT NOT NULL,
  point BYTEA NOT NULL,
  PRIMARY KEY(study_id, number, step),
  FOREIGN KEY(study_id, number) REFERENCES trials ON DELETE CASCADE);
CREATE TABLE checkpoints(
  study_id BIGINT NOT NULL,
  number BIGINT NOT NULL,
  step BIGINT NOT NULL,
  checkpoint_id TEXT NOT NULL,
  size_bytes BIGINT NOT NULL,
  checksum TEXT NOT NULL,
  score DOUBLE PRECISION NOT NULL,
  PRIMARY KEY(study_id, number, step),
  FOREIGN KEY(study_id, number) REFERENCES trials ON DELETE CASCADE);
CREATE TABLE workers(
  id TEXT PRIMARY KEY,
  worker BYTEA NOT NULL);
CREATE TABLE audit(
  id BIGSERIAL PRIMARY KEY,
  study TEXT NOT NULL,
  event BYTEA NOT NULL);
CREATE INDEX audit_by_study ON audit(study, id);
)sql",
    // 2: usage records, one per ended attempt of a worker trial, kept when
    // their study is deleted.
    R"sql(
CREATE TABLE usage(
  id BIGSERIAL PRIMARY KEY,
  end_ms BIGINT NOT NULL,
  record BYTEA NOT NULL);
CREATE INDEX usage_by_end ON usage(end_ms);
)sql",
    // 3: the leader lease of the schedulers sharing this database
    // (PgLeaderLease): one row, never expired-free at first.
    R"sql(
CREATE TABLE leader(
  id BIGINT PRIMARY KEY CHECK (id = 1),
  holder TEXT NOT NULL,
  address TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  expires TIMESTAMPTZ NOT NULL);
INSERT INTO leader VALUES (1, '', '', 0, '-infinity');
)sql",
    // 4: a trial's progress (last step, checkpoint) apart from the trial,
    // so a report is one statement; NULL: the trial's own holds it.
    R"sql(
ALTER TABLE trials ADD COLUMN last_step BIGINT,
  ADD COLUMN checkpoint TEXT, ADD COLUMN checkpoint_step BIGINT;
)sql",
};
constexpr int kSchemaVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);
// Any constant: the advisory lock that serialises migrations.
constexpr int64_t kMigrationLock = 0x4469616c;  // "Dial"

std::string Serialize(const google::protobuf::Message& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

template <typename M>
absl::StatusOr<M> Parse(const std::string& bytes, const char* what) {
  M m;
  if (!m.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat("a stored ", what, " cannot be read"));
  }
  return m;
}

// Keys of what a write makes and a later one needs (PgStudyStore::Write).
std::string StudyKey(const std::string& name) {
  return absl::StrCat("s/", name);
}
std::string TrialKey(const std::string& study, int64_t number) {
  return absl::StrCat("t/", number, "/", study);
}

absl::Status NoStudy(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
}

// The columns a trial is read from, and the trial they make.
constexpr char kTrialColumns[] =
    "trial, last_step, checkpoint, checkpoint_step";

absl::StatusOr<v1::Trial> TrialOf(const PgResult& r, int row) {
  DIAL_ASSIGN_OR_RETURN(v1::Trial t,
                        Parse<v1::Trial>(r.Bytes(row, 0), "trial"));
  if (!r.IsNull(row, 1)) {
    t.set_last_step(r.Int(row, 1));
    t.set_checkpoint(r.Bytes(row, 2));
    t.set_checkpoint_step(r.Int(row, 3));
  }
  return t;
}

absl::StatusOr<int> ReadVersion(PgConnection& conn) {
  DIAL_ASSIGN_OR_RETURN(PgResult r,
                        conn.Exec("SELECT version FROM dial_schema"));
  return r.rows() ? static_cast<int>(r.Int(0, 0)) : 0;
}

}  // namespace

int PgStudyStore::LatestSchemaVersion() { return kSchemaVersion; }

absl::Status PgStudyStore::MigrateTo(PgConnection& conn, int target) {
  return conn.Transaction([&]() -> absl::Status {
    DIAL_RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock($1)",
                                   PgParams().Int(kMigrationLock))
                             .status());
    DIAL_RETURN_IF_ERROR(conn.ExecScript(
        "CREATE TABLE IF NOT EXISTS dial_schema(version BIGINT NOT NULL)"));
    DIAL_ASSIGN_OR_RETURN(const int version, ReadVersion(conn));
    if (version > kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database schema version ", version, " is newer than this Dial (",
          kSchemaVersion, "); upgrade Dial"));
    }
    for (int v = version; v < target; ++v) {
      DIAL_RETURN_IF_ERROR(conn.ExecScript(kMigrations[v]));
    }
    if (target > version) {
      DIAL_RETURN_IF_ERROR(conn.ExecScript("DELETE FROM dial_schema"));
      DIAL_RETURN_IF_ERROR(
          conn.Exec("INSERT INTO dial_schema(version) VALUES ($1)",
                    PgParams().Int(target))
              .status());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<PgStudyStore>> PgStudyStore::Create(
    const PgTarget& target, const PgStoreOptions& options) {
  // With an io_timeout, connecting again waits no longer either.
  const absl::Duration connect =
      options.io_timeout > absl::ZeroDuration()
          ? std::max(options.io_timeout, absl::Seconds(1))
          : absl::Seconds(10);
  DIAL_ASSIGN_OR_RETURN(
      std::unique_ptr<PgConnection> conn,
      PgConnection::Open(target, connect, options.io_timeout));
  DIAL_RETURN_IF_ERROR(MigrateTo(*conn, kSchemaVersion));
  std::unique_ptr<PgStudyStore> store(new PgStudyStore(std::move(conn)));
  if (options.group_commit) {
    DIAL_ASSIGN_OR_RETURN(
        store->conns_[1],
        PgConnection::Open(target, connect, options.io_timeout));
    PgStudyStore* s = store.get();
    // COMMIT returns once the server has flushed its log: nothing to sync.
    GroupCommitterOptions committer{[s] { return s->CommitGroup(); },
                                    [] { return absl::OkStatus(); }};
    if (options.metrics != nullptr) {
      MeasureCommits(*options.metrics,
                     "Time to commit one group of writes (PostgreSQL COMMIT, "
                     "which flushes its log, under the store's lock)",
                     "Time to make a committed group durable (none on "
                     "PostgreSQL: its COMMIT does)",
                     committer);
    }
    store->committer_ = GroupCommitter::Create(committer);
  }
  return store;
}

PgStudyStore::PgStudyStore(std::unique_ptr<PgConnection> conn)
    : conn_(conn.get()) {
  conns_[0] = std::move(conn);
}

absl::StatusOr<int> PgStudyStore::SchemaVersion() {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  return ReadVersion(*conn_);
}

absl::StatusOr<int64_t> PgStudyStore::StudyId(const std::string& name) {
  if (auto it = study_ids_.find(name); it != study_ids_.end()) {
    return it->second;
  }
  DIAL_ASSIGN_OR_RETURN(PgResult r,
                        conn_->Exec("SELECT id FROM studies WHERE name = $1",
                                    PgParams().Text(name)));
  if (r.rows() == 0) return NoStudy(name);
  if (study_ids_.size() >= kMaxCachedStudies) study_ids_.clear();
  return study_ids_[name] = r.Int(0, 0);
}

absl::StatusOr<absl::flat_hash_set<int64_t>*> PgStudyStore::StepsOf(
    const std::string& study, int64_t study_id, int64_t number) {
  const auto key = std::make_pair(study_id, number);
  if (auto it = steps_.find(key); it != steps_.end()) return &it->second;
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT 0::bigint, 0::bigint FROM trials WHERE study_id = "
                  "$1 AND number = $2 UNION ALL SELECT 1, step FROM metrics "
                  "WHERE study_id = $1 AND number = $2",
                  PgParams().Int(study_id).Int(number)));
  bool exists = false;
  absl::flat_hash_set<int64_t> steps;
  for (int i = 0; i < r.rows(); ++i) {
    if (r.Int(i, 0) == 0) {
      exists = true;
    } else {
      steps.insert(r.Int(i, 1));
    }
  }
  if (!exists) {
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  if (cached_steps_ + steps.size() > kMaxCachedSteps) ForgetCaches();
  cached_steps_ += steps.size();
  return &steps_.emplace(key, std::move(steps)).first->second;
}

void PgStudyStore::ForgetCaches() {
  written_now_.clear();
  written_committing_.clear();
  study_ids_.clear();
  steps_.clear();
  cached_steps_ = 0;
}

absl::Status PgStudyStore::Apply(absl::string_view sql,
                                 const PgParams& params) {
  if (committer_) return conn_->Send(sql, params, 1);
  DIAL_ASSIGN_OR_RETURN(PgResult r, conn_->Exec(sql, params));
  if (r.affected() != 1) {
    return absl::InternalError(
        absl::StrCat("a write changed ", r.affected(),
                     " rows, not 1 (in: ", sql.substr(0, 60), ")"));
  }
  return absl::OkStatus();
}

absl::Status PgStudyStore::TrialExists(const std::string& study,
                                       int64_t study_id, int64_t number) {
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT 1 FROM trials WHERE study_id = $1 AND number = $2",
                  PgParams().Int(study_id).Int(number)));
  if (r.rows() == 0) {
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  return absl::OkStatus();
}

absl::Status PgStudyStore::CreateStudy(const v1::Study& study) {
  v1::Study rest = study;
  rest.clear_prior_trials();
  v1::Study prior;
  *prior.mutable_prior_trials() = study.prior_trials();
  absl::MutexLock lock(&mu_);
  absl::Status s = Write(
      [&] {
        return conn_
            ->Exec(
                "INSERT INTO studies(name, study, prior) VALUES ($1, $2, $3)",
                PgParams()
                    .Text(study.name())
                    .Bytes(Serialize(rest))
                    .Bytes(Serialize(prior)))
            .status();
      },
      /*one_statement=*/false, "", StudyKey(study.name()));
  if (absl::IsAlreadyExists(s)) {
    return absl::AlreadyExistsError(
        absl::StrCat("study '", study.name(), "' already exists"));
  }
  return s;
}

absl::StatusOr<v1::Study> PgStudyStore::GetStudy(const std::string& name) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT study, prior FROM studies WHERE name = $1",
                  PgParams().Text(name)));
  if (r.rows() == 0) return NoStudy(name);
  DIAL_ASSIGN_OR_RETURN(v1::Study study,
                        Parse<v1::Study>(r.Bytes(0, 0), "study"));
  if (!study.MergeFromString(r.Bytes(0, 1))) {
    return absl::DataLossError("a stored study's prior cannot be read");
  }
  return study;
}

absl::StatusOr<std::vector<v1::Study>> PgStudyStore::ListStudies() {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT study, prior FROM studies ORDER BY name"));
  std::vector<v1::Study> out;
  for (int i = 0; i < r.rows(); ++i) {
    DIAL_ASSIGN_OR_RETURN(v1::Study study,
                          Parse<v1::Study>(r.Bytes(i, 0), "study"));
    if (!study.MergeFromString(r.Bytes(i, 1))) {
      return absl::DataLossError("a stored study's prior cannot be read");
    }
    out.push_back(std::move(study));
  }
  return out;
}

absl::Status PgStudyStore::UpdateStudy(const v1::Study& study) {
  absl::MutexLock lock(&mu_);
  return Write([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(
        PgResult r,
        conn_->Exec("SELECT study FROM studies WHERE name = $1 FOR UPDATE",
                    PgParams().Text(study.name())));
    if (r.rows() == 0) return NoStudy(study.name());
    DIAL_ASSIGN_OR_RETURN(v1::Study stored,
                          Parse<v1::Study>(r.Bytes(0, 0), "study"));
    *stored.mutable_spec() = study.spec();
    stored.set_state(study.state());
    *stored.mutable_update_time() = study.update_time();
    *stored.mutable_queue() = study.queue();
    stored.set_next_queue_id(study.next_queue_id());
    stored.set_note(study.note());
    return conn_
        ->Exec("UPDATE studies SET study = $2 WHERE name = $1",
               PgParams().Text(study.name()).Bytes(Serialize(stored)))
        .status();
  });
}

absl::Status PgStudyStore::DeleteStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ForgetCaches();
  return Write([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(PgResult r,
                          conn_->Exec("DELETE FROM studies WHERE name = $1",
                                      PgParams().Text(name)));
    return r.affected() ? absl::OkStatus() : NoStudy(name);
  });
}

absl::Status PgStudyStore::PutTrial(const v1::Trial& trial) {
  v1::Trial stored = trial;
  stored.clear_metric_history();
  absl::MutexLock lock(&mu_);
  return Write(
      [&]() -> absl::Status {
        DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(trial.study()));
        return Apply(
            "INSERT INTO trials(study_id, number, state, trial) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (study_id, number) DO UPDATE "
            "SET state = EXCLUDED.state, trial = EXCLUDED.trial, "
            "last_step = NULL, checkpoint = NULL, checkpoint_step = NULL",
            PgParams()
                .Int(id)
                .Int(trial.number())
                .Int(trial.state())
                .Bytes(Serialize(stored)));
      },
      /*one_statement=*/true, StudyKey(trial.study()),
      TrialKey(trial.study(), trial.number()));
}

absl::StatusOr<v1::Trial> PgStudyStore::GetTrial(const std::string& study,
                                                 int64_t number) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec(absl::StrCat("SELECT ", kTrialColumns,
                               " FROM trials WHERE study_id = $1 AND "
                               "number = $2"),
                  PgParams().Int(id).Int(number)));
  if (r.rows() == 0) {
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  return TrialOf(r, 0);
}

absl::StatusOr<std::vector<v1::Trial>> PgStudyStore::ListTrials(
    const std::string& study, const TrialQuery& query) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
  std::string sql = absl::StrCat("SELECT ", kTrialColumns,
                                 " FROM trials WHERE study_id = $1 AND "
                                 "number > $2");
  if (!query.states.empty()) {
    std::vector<int> states(query.states.begin(), query.states.end());
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  absl::StrAppend(&sql, " ORDER BY number");
  if (query.limit > 0) absl::StrAppend(&sql, " LIMIT ", query.limit);
  DIAL_ASSIGN_OR_RETURN(
      PgResult r, conn_->Exec(sql, PgParams().Int(id).Int(query.after_number)));
  std::vector<v1::Trial> out;
  out.reserve(r.rows());
  for (int i = 0; i < r.rows(); ++i) {
    DIAL_ASSIGN_OR_RETURN(v1::Trial t, TrialOf(r, i));
    out.push_back(std::move(t));
  }
  return out;
}

// One statement, sent without waiting under group commit: what could make
// it fail (no such trial, the step recorded) is checked first against the
// steps of the trial, read once and then kept.
absl::Status PgStudyStore::RecordReport(const v1::Trial& trial,
                                        const v1::MetricPoint& point) {
  absl::MutexLock lock(&mu_);
  return Write(
      [&]() -> absl::Status {
        DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(trial.study()));
        DIAL_ASSIGN_OR_RETURN(absl::flat_hash_set<int64_t> * steps,
                              StepsOf(trial.study(), id, trial.number()));
        if (steps->contains(point.step())) {
          return absl::AlreadyExistsError(
              absl::StrCat("step ", point.step(), " of trial ", trial.number(),
                           " is recorded"));
        }
        DIAL_RETURN_IF_ERROR(Apply(
            "WITH ins AS (INSERT INTO metrics(study_id, number, step, point) "
            "VALUES ($1, $2, $3, $4) RETURNING 1) UPDATE trials SET "
            "last_step = $5, checkpoint = $6, checkpoint_step = $7 WHERE "
            "study_id = $1 AND number = $2 AND EXISTS (SELECT 1 FROM ins)",
            PgParams()
                .Int(id)
                .Int(trial.number())
                .Int(point.step())
                .Bytes(Serialize(point))
                .Int(trial.last_step())
                .Text(trial.checkpoint())
                .Int(trial.checkpoint_step())));
        steps->insert(point.step());
        ++cached_steps_;
        return absl::OkStatus();
      },
      /*one_statement=*/true, TrialKey(trial.study(), trial.number()));
}

absl::StatusOr<std::vector<v1::MetricPoint>> PgStudyStore::GetMetricHistory(
    const std::string& study, int64_t number, const HistoryQuery& query) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
  DIAL_RETURN_IF_ERROR(TrialExists(study, id, number));
  std::vector<v1::MetricPoint> out;
  size_t bytes = 0;
  int64_t after = query.after_step;
  // In chunks, so a byte-bounded page of a long history reads little more
  // than it returns.
  constexpr int kChunk = 512;
  while (true) {
    int want = kChunk;
    if (query.limit > 0) {
      want = std::min<int>(kChunk, query.limit - static_cast<int>(out.size()));
    }
    if (want <= 0) break;
    DIAL_ASSIGN_OR_RETURN(
        PgResult r,
        conn_->Exec(absl::StrCat("SELECT step, point FROM metrics WHERE "
                                 "study_id = $1 AND number = $2 AND step > $3 "
                                 "ORDER BY step LIMIT ",
                                 want),
                    PgParams().Int(id).Int(number).Int(after)));
    for (int i = 0; i < r.rows(); ++i) {
      if (query.max_bytes > 0 && bytes >= query.max_bytes) return out;
      DIAL_ASSIGN_OR_RETURN(v1::MetricPoint p,
                            Parse<v1::MetricPoint>(r.Bytes(i, 1), "report"));
      bytes += p.ByteSizeLong();
      after = r.Int(i, 0);
      out.push_back(std::move(p));
    }
    if (r.rows() < want) break;
  }
  return out;
}

absl::Status PgStudyStore::PutCheckpoint(const CheckpointRecord& record) {
  const double score = std::isnan(record.score)
                           ? -std::numeric_limits<double>::infinity()
                           : record.score;
  absl::MutexLock lock(&mu_);
  return Write([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(record.study));
    DIAL_RETURN_IF_ERROR(TrialExists(record.study, id, record.trial));
    return conn_
        ->Exec(
            "INSERT INTO checkpoints(study_id, number, step, checkpoint_id, "
            "size_bytes, checksum, score) VALUES ($1, $2, $3, $4, $5, $6, $7) "
            "ON CONFLICT (study_id, number, step) DO UPDATE SET "
            "checkpoint_id = EXCLUDED.checkpoint_id, size_bytes = "
            "EXCLUDED.size_bytes, checksum = EXCLUDED.checksum, score = "
            "EXCLUDED.score",
            PgParams()
                .Int(id)
                .Int(record.trial)
                .Int(record.step)
                .Text(record.id)
                .Int(record.size_bytes)
                .Text(record.checksum)
                .Double(score))
        .status();
  });
}

absl::StatusOr<std::vector<CheckpointRecord>> PgStudyStore::ListCheckpoints(
    const std::string& study) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT number, step, checkpoint_id, size_bytes, checksum, "
                  "score FROM checkpoints WHERE study_id = $1 "
                  "ORDER BY number, step",
                  PgParams().Int(id)));
  std::vector<CheckpointRecord> out;
  for (int i = 0; i < r.rows(); ++i) {
    CheckpointRecord c;
    c.study = study;
    c.trial = r.Int(i, 0);
    c.step = r.Int(i, 1);
    c.id = r.Bytes(i, 2);
    c.size_bytes = r.Int(i, 3);
    c.checksum = r.Bytes(i, 4);
    c.score = r.Double(i, 5);
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status PgStudyStore::DeleteCheckpoint(const std::string& study,
                                            int64_t number, int64_t step) {
  absl::MutexLock lock(&mu_);
  return Write([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
    DIAL_RETURN_IF_ERROR(TrialExists(study, id, number));
    return conn_
        ->Exec(
            "DELETE FROM checkpoints WHERE study_id = $1 AND number = $2 "
            "AND step = $3",
            PgParams().Int(id).Int(number).Int(step))
        .status();
  });
}

absl::Status PgStudyStore::PutWorker(const v1::Worker& worker) {
  absl::MutexLock lock(&mu_);
  return Write(
      [&] {
        return Apply(
            "INSERT INTO workers(id, worker) VALUES ($1, $2) ON CONFLICT "
            "(id) DO UPDATE SET worker = EXCLUDED.worker",
            PgParams().Text(worker.id()).Bytes(Serialize(worker)));
      },
      /*one_statement=*/true);
}

absl::Status PgStudyStore::AppendAudit(const v1::AuditEvent& event) {
  v1::AuditEvent stored = event;
  stored.clear_id();
  absl::MutexLock lock(&mu_);
  return Write(
      [&] {
        return Apply("INSERT INTO audit(study, event) VALUES ($1, $2)",
                     PgParams().Text(event.study()).Bytes(Serialize(stored)));
      },
      /*one_statement=*/true);
}

absl::StatusOr<std::vector<v1::AuditEvent>> PgStudyStore::ListAudit(
    const std::string& study, int64_t before_id, int limit) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT id, event FROM audit WHERE ($1 = '' OR study = $1) "
                  "AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3",
                  PgParams().Text(study).Int(before_id).Int(limit)));
  std::vector<v1::AuditEvent> out;
  for (int i = 0; i < r.rows(); ++i) {
    DIAL_ASSIGN_OR_RETURN(v1::AuditEvent e,
                          Parse<v1::AuditEvent>(r.Bytes(i, 1), "audit event"));
    e.set_id(r.Int(i, 0));
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status PgStudyStore::AppendUsage(const v1::UsageRecord& record) {
  const int64_t end_ms =
      google::protobuf::util::TimeUtil::TimestampToMilliseconds(
          record.end_time());
  absl::MutexLock lock(&mu_);
  return Write(
      [&] {
        return Apply("INSERT INTO usage(end_ms, record) VALUES ($1, $2)",
                     PgParams().Int(end_ms).Bytes(Serialize(record)));
      },
      /*one_statement=*/true);
}

absl::StatusOr<std::vector<v1::UsageRecord>> PgStudyStore::ListUsage(
    int64_t since_ms) {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT record FROM usage WHERE end_ms >= $1 ORDER BY id",
                  PgParams().Int(since_ms)));
  std::vector<v1::UsageRecord> out;
  for (int i = 0; i < r.rows(); ++i) {
    DIAL_ASSIGN_OR_RETURN(
        v1::UsageRecord u,
        Parse<v1::UsageRecord>(r.Bytes(i, 0), "usage record"));
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace dial::storage
