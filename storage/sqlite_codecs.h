// Row codecs of SqliteStudyStore: protos to statement parameters and result
// rows back to protos, one place per table that knows its columns. Each
// reader expects the columns of its *_COLUMNS list from column 0; each
// binder fills the numbered parameters it names. Stateless and
// thread-compatible (the statements are the caller's).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "storage/sqlite_connection.h"
#include "storage/study_store.h"

namespace dial::storage {

int64_t ToMs(const google::protobuf::Timestamp& t);
google::protobuf::Timestamp FromMs(int64_t ms);

// studies
#define DIAL_STUDY_COLUMNS \
  "name, spec, state, create_ms, update_ms, owner, extra, prior"
v1::Study ReadStudy(const Statement& row);
// ?1..?8 in DIAL_STUDY_COLUMNS order.
void BindStudy(Statement& stmt, const v1::Study& study);
// The `extra` column: the study's queue and next queue id.
std::string StudyExtra(const v1::Study& study);

// trials, joined with studies (t, s)
#define DIAL_TRIAL_COLUMNS                                               \
  "t.id, s.name, t.number, t.state, t.client_id, t.objective, t.error, " \
  "t.last_step, t.checkpoint, t.attempt, t.failures, t.worker_id, "      \
  "t.create_ms, t.start_ms, t.end_ms, t.detail"
// The trial without its params (ReadParam adds them) and its row id.
v1::Trial ReadTrial(const Statement& row, int64_t* trial_id);
// The `detail` column: the fields without a column of their own.
std::string TrialDetail(const v1::Trial& trial);
// ?1 study_id, ?2 number, ?3 state, ?4 client_id, ?5 objective, ?6 error,
// ?7 last_step, ?8 checkpoint, ?9 attempt, ?10 failures, ?11 worker_id,
// ?12 create_ms, ?13 start_ms, ?14 end_ms, ?15 detail.
void BindTrial(Statement& stmt, int64_t study_id, const v1::Trial& trial);

// params
#define DIAL_PARAM_COLUMNS "name, double_value, int_value, string_value"
void ReadParam(const Statement& row, v1::Trial* trial);
// ?1 trial_id, ?2..?5 in DIAL_PARAM_COLUMNS order.
void BindParam(Statement& stmt, int64_t trial_id, const std::string& name,
               const v1::ParamValue& value);

// metrics: one row per (trial, step, name). Rows of (number, step, name,
// value, time_ms) ordered by (number, step) are handed to `fn` as one
// report per (trial, step).
absl::Status ReadReports(
    Statement& rows,
    const std::function<void(int64_t number, const v1::MetricPoint& point)>&
        fn);

// checkpoints, joined with trials (c, t)
#define DIAL_CHECKPOINT_COLUMNS \
  "t.number, c.step, c.checkpoint_id, c.size_bytes, c.checksum, c.score"
CheckpointRecord ReadCheckpoint(const Statement& row, const std::string& study);
// ?1 trial_id, ?2 step, ?3 checkpoint_id, ?4 size_bytes, ?5 checksum,
// ?6 score.
void BindCheckpoint(Statement& stmt, int64_t trial_id,
                    const CheckpointRecord& record);

// workers: ?1 id, ?2 host, ?3 resources, ?4 last_seen_ms.
void BindWorker(Statement& stmt, const v1::Worker& worker);

}  // namespace dial::storage
