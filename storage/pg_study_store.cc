#include "storage/pg_study_store.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"

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

absl::Status NoStudy(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
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
    const PgTarget& target) {
  DIAL_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> conn,
                        PgConnection::Open(target));
  DIAL_RETURN_IF_ERROR(MigrateTo(*conn, kSchemaVersion));
  return std::unique_ptr<PgStudyStore>(new PgStudyStore(std::move(conn)));
}

absl::Status PgStudyStore::SetFence(const std::string& holder, int64_t epoch,
                                    absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  holder_ = holder;
  epoch_ = epoch;
  return conn_->SetOnConnect(
      absl::StrCat("SET idle_in_transaction_session_timeout = ",
                   std::max<int64_t>(1, absl::ToInt64Milliseconds(lease))));
}

absl::Status PgStudyStore::CheckFence() {
  if (epoch_ == 0) return absl::OkStatus();
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT 1 FROM leader WHERE id = 1 AND holder = $1 AND "
                  "epoch = $2 AND expires > clock_timestamp() FOR SHARE",
                  PgParams().Text(holder_).Int(epoch_)));
  if (r.rows() == 0) {
    return absl::UnavailableError(
        absl::StrCat("this scheduler no longer leads (its lease of epoch ",
                     epoch_, " is lost): nothing was written"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> PgStudyStore::SchemaVersion() {
  absl::MutexLock lock(&mu_);
  return ReadVersion(*conn_);
}

absl::StatusOr<int64_t> PgStudyStore::StudyId(const std::string& name) {
  DIAL_ASSIGN_OR_RETURN(PgResult r,
                        conn_->Exec("SELECT id FROM studies WHERE name = $1",
                                    PgParams().Text(name)));
  if (r.rows() == 0) return NoStudy(name);
  return r.Int(0, 0);
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
  absl::Status s = Write([&] {
    return conn_
        ->Exec("INSERT INTO studies(name, study, prior) VALUES ($1, $2, $3)",
               PgParams()
                   .Text(study.name())
                   .Bytes(Serialize(rest))
                   .Bytes(Serialize(prior)))
        .status();
  });
  if (absl::IsAlreadyExists(s)) {
    return absl::AlreadyExistsError(
        absl::StrCat("study '", study.name(), "' already exists"));
  }
  return s;
}

absl::StatusOr<v1::Study> PgStudyStore::GetStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
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
    return conn_
        ->Exec("UPDATE studies SET study = $2 WHERE name = $1",
               PgParams().Text(study.name()).Bytes(Serialize(stored)))
        .status();
  });
}

absl::Status PgStudyStore::DeleteStudy(const std::string& name) {
  absl::MutexLock lock(&mu_);
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
  return Write([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(trial.study()));
    return conn_
        ->Exec(
            "INSERT INTO trials(study_id, number, state, trial) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT (study_id, number) DO UPDATE "
            "SET state = EXCLUDED.state, trial = EXCLUDED.trial",
            PgParams()
                .Int(id)
                .Int(trial.number())
                .Int(trial.state())
                .Bytes(Serialize(stored)))
        .status();
  });
}

absl::StatusOr<v1::Trial> PgStudyStore::GetTrial(const std::string& study,
                                                 int64_t number) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec(
          "SELECT trial FROM trials WHERE study_id = $1 AND number = $2",
          PgParams().Int(id).Int(number)));
  if (r.rows() == 0) {
    return absl::NotFoundError(
        absl::StrCat("trial ", number, " of study '", study, "' not found"));
  }
  return Parse<v1::Trial>(r.Bytes(0, 0), "trial");
}

absl::StatusOr<std::vector<v1::Trial>> PgStudyStore::ListTrials(
    const std::string& study, const TrialQuery& query) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(study));
  std::string sql =
      "SELECT trial FROM trials WHERE study_id = $1 AND number > $2";
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
    DIAL_ASSIGN_OR_RETURN(v1::Trial t,
                          Parse<v1::Trial>(r.Bytes(i, 0), "trial"));
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status PgStudyStore::RecordReport(const v1::Trial& trial,
                                        const v1::MetricPoint& point) {
  absl::MutexLock lock(&mu_);
  return Write([&]() -> absl::Status {
    DIAL_ASSIGN_OR_RETURN(const int64_t id, StudyId(trial.study()));
    DIAL_ASSIGN_OR_RETURN(
        PgResult r,
        conn_->Exec("SELECT trial FROM trials WHERE study_id = $1 AND "
                    "number = $2 FOR UPDATE",
                    PgParams().Int(id).Int(trial.number())));
    if (r.rows() == 0) {
      return absl::NotFoundError(absl::StrCat("trial ", trial.number(),
                                              " of study '", trial.study(),
                                              "' not found"));
    }
    DIAL_ASSIGN_OR_RETURN(
        PgResult added,
        conn_->Exec("INSERT INTO metrics(study_id, number, step, point) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    PgParams()
                        .Int(id)
                        .Int(trial.number())
                        .Int(point.step())
                        .Bytes(Serialize(point))));
    if (added.affected() == 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "step ", point.step(), " of trial ", trial.number(), " is recorded"));
    }
    DIAL_ASSIGN_OR_RETURN(v1::Trial stored,
                          Parse<v1::Trial>(r.Bytes(0, 0), "trial"));
    stored.set_last_step(trial.last_step());
    stored.set_checkpoint(trial.checkpoint());
    stored.set_checkpoint_step(trial.checkpoint_step());
    return conn_
        ->Exec(
            "UPDATE trials SET trial = $3 WHERE study_id = $1 AND "
            "number = $2",
            PgParams().Int(id).Int(trial.number()).Bytes(Serialize(stored)))
        .status();
  });
}

absl::StatusOr<std::vector<v1::MetricPoint>> PgStudyStore::GetMetricHistory(
    const std::string& study, int64_t number, const HistoryQuery& query) {
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
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
  return Write([&] {
    return conn_
        ->Exec(
            "INSERT INTO workers(id, worker) VALUES ($1, $2) ON CONFLICT "
            "(id) DO UPDATE SET worker = EXCLUDED.worker",
            PgParams().Text(worker.id()).Bytes(Serialize(worker)))
        .status();
  });
}

absl::Status PgStudyStore::AppendAudit(const v1::AuditEvent& event) {
  v1::AuditEvent stored = event;
  stored.clear_id();
  absl::MutexLock lock(&mu_);
  return Write([&] {
    return conn_
        ->Exec("INSERT INTO audit(study, event) VALUES ($1, $2)",
               PgParams().Text(event.study()).Bytes(Serialize(stored)))
        .status();
  });
}

absl::StatusOr<std::vector<v1::AuditEvent>> PgStudyStore::ListAudit(
    const std::string& study, int64_t before_id, int limit) {
  absl::MutexLock lock(&mu_);
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
  return Write([&] {
    return conn_
        ->Exec("INSERT INTO usage(end_ms, record) VALUES ($1, $2)",
               PgParams().Int(end_ms).Bytes(Serialize(record)))
        .status();
  });
}

absl::StatusOr<std::vector<v1::UsageRecord>> PgStudyStore::ListUsage(
    int64_t since_ms) {
  absl::MutexLock lock(&mu_);
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
