#include "storage/sqlite_codecs.h"

#include <cmath>
#include <limits>

#include "common/status.h"
#include "google/protobuf/util/time_util.h"

namespace dial::storage {

using google::protobuf::util::TimeUtil;

int64_t ToMs(const google::protobuf::Timestamp& t) {
  return TimeUtil::TimestampToMilliseconds(t);
}

google::protobuf::Timestamp FromMs(int64_t ms) {
  return TimeUtil::MillisecondsToTimestamp(ms);
}

v1::Study ReadStudy(const Statement& row) {
  v1::Study study;
  study.set_name(row.Text(0));
  study.mutable_spec()->ParseFromString(row.Text(1));
  study.set_state(static_cast<v1::StudyState>(row.Int(2)));
  *study.mutable_create_time() = FromMs(row.Int(3));
  *study.mutable_update_time() = FromMs(row.Int(4));
  study.set_owner(row.Text(5));
  v1::Study extra;
  if (extra.ParseFromString(row.Text(6))) study.MergeFrom(extra);
  v1::Study prior;
  if (prior.ParseFromString(row.Text(7))) study.MergeFrom(prior);
  return study;
}

std::string StudyExtra(const v1::Study& study) {
  v1::Study extra;
  *extra.mutable_queue() = study.queue();
  extra.set_next_queue_id(study.next_queue_id());
  extra.set_note(study.note());
  return extra.SerializeAsString();
}

void BindStudy(Statement& stmt, const v1::Study& study) {
  stmt.Bind(1, study.name())
      .BindBlob(2, study.spec().SerializeAsString())
      .Bind(3, int64_t{study.state()})
      .Bind(4, ToMs(study.create_time()))
      .Bind(5, ToMs(study.update_time()))
      .Bind(6, study.owner())
      .BindBlob(7, StudyExtra(study));
  v1::Study prior;
  *prior.mutable_prior_trials() = study.prior_trials();
  stmt.BindBlob(8, prior.SerializeAsString());
}

v1::Trial ReadTrial(const Statement& row, int64_t* trial_id) {
  v1::Trial trial;
  trial.ParseFromString(row.Text(15));
  *trial_id = row.Int(0);
  trial.set_study(row.Text(1));
  trial.set_number(row.Int(2));
  trial.set_state(static_cast<v1::TrialState>(row.Int(3)));
  trial.set_client_id(row.Text(4));
  if (!row.IsNull(5)) trial.set_objective_value(row.Double(5));
  trial.set_error(row.Text(6));
  trial.set_last_step(row.Int(7));
  trial.set_checkpoint(row.Text(8));
  trial.set_attempt(static_cast<int32_t>(row.Int(9)));
  trial.set_failures(static_cast<int32_t>(row.Int(10)));
  trial.set_worker_id(row.Text(11));
  if (!row.IsNull(12)) *trial.mutable_create_time() = FromMs(row.Int(12));
  if (!row.IsNull(13)) *trial.mutable_start_time() = FromMs(row.Int(13));
  if (!row.IsNull(14)) *trial.mutable_end_time() = FromMs(row.Int(14));
  return trial;
}

std::string TrialDetail(const v1::Trial& trial) {
  v1::Trial detail;
  *detail.mutable_final_metrics() = trial.final_metrics();
  *detail.mutable_lineage() = trial.lineage();
  *detail.mutable_preemptions() = trial.preemptions();
  if (trial.has_attempt_start_time()) {
    *detail.mutable_attempt_start_time() = trial.attempt_start_time();
  }
  if (trial.has_attempt_cpu_seconds()) {
    detail.set_attempt_cpu_seconds(trial.attempt_cpu_seconds());
  }
  detail.set_checkpoint_step(trial.checkpoint_step());
  detail.set_lease_token(trial.lease_token());
  *detail.mutable_objective_values() = trial.objective_values();
  detail.set_queue_id(trial.queue_id());
  if (trial.has_origin()) detail.set_origin(trial.origin());
  if (trial.has_seed()) detail.set_seed(trial.seed());
  detail.set_note(trial.note());
  return detail.SerializeAsString();
}

void BindTrial(Statement& stmt, int64_t study_id, const v1::Trial& trial) {
  stmt.Bind(1, study_id)
      .Bind(2, trial.number())
      .Bind(3, int64_t{trial.state()})
      .Bind(4, trial.client_id());
  if (trial.has_objective_value()) {
    stmt.Bind(5, trial.objective_value());
  } else {
    stmt.BindNull(5);
  }
  stmt.Bind(6, trial.error())
      .Bind(7, trial.last_step())
      .Bind(8, trial.checkpoint())
      .Bind(9, int64_t{trial.attempt()})
      .Bind(10, int64_t{trial.failures()})
      .Bind(11, trial.worker_id());
  auto ms_or_null = [&](int i, bool has, const auto& ts) {
    if (has) {
      stmt.Bind(i, ToMs(ts));
    } else {
      stmt.BindNull(i);
    }
  };
  ms_or_null(12, trial.has_create_time(), trial.create_time());
  ms_or_null(13, trial.has_start_time(), trial.start_time());
  ms_or_null(14, trial.has_end_time(), trial.end_time());
  stmt.BindBlob(15, TrialDetail(trial));
}

void ReadParam(const Statement& row, v1::Trial* trial) {
  v1::ParamValue& value = (*trial->mutable_params())[row.Text(0)];
  if (!row.IsNull(1)) {
    value.set_double_value(row.Double(1));
  } else if (!row.IsNull(2)) {
    value.set_int_value(row.Int(2));
  } else {
    value.set_string_value(row.Text(3));
  }
}

void BindParam(Statement& stmt, int64_t trial_id, const std::string& name,
               const v1::ParamValue& value) {
  stmt.Bind(1, trial_id).Bind(2, name);
  stmt.BindNull(3).BindNull(4).BindNull(5);
  switch (value.value_case()) {
    case v1::ParamValue::kDoubleValue:
      stmt.Bind(3, value.double_value());
      break;
    case v1::ParamValue::kIntValue:
      stmt.Bind(4, value.int_value());
      break;
    default:
      stmt.Bind(5, value.string_value());
  }
}

absl::Status ReadReports(
    Statement& rows,
    const std::function<void(int64_t number, const v1::MetricPoint& point)>&
        fn) {
  v1::MetricPoint point;
  int64_t number = -1;
  bool open = false;
  while (true) {
    DIAL_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (open &&
        (!row || rows.Int(0) != number || rows.Int(1) != point.step())) {
      fn(number, point);
      point.Clear();
      open = false;
    }
    if (!row) break;
    if (!open) {
      number = rows.Int(0);
      point.set_step(rows.Int(1));
      *point.mutable_time() = FromMs(rows.Int(4));
      open = true;
    }
    (*point.mutable_metrics())[rows.Text(2)] = rows.Double(3);
  }
  return absl::OkStatus();
}

CheckpointRecord ReadCheckpoint(const Statement& row,
                                const std::string& study) {
  CheckpointRecord record;
  record.study = study;
  record.trial = row.Int(0);
  record.step = row.Int(1);
  record.id = row.Text(2);
  record.size_bytes = row.Int(3);
  record.checksum = row.Text(4);
  // NULL: a NaN score, or a row from before scores were kept.
  record.score =
      row.IsNull(5) ? -std::numeric_limits<double>::infinity() : row.Double(5);
  return record;
}

void BindCheckpoint(Statement& stmt, int64_t trial_id,
                    const CheckpointRecord& record) {
  stmt.Bind(1, trial_id)
      .Bind(2, record.step)
      .Bind(3, record.id)
      .Bind(4, record.size_bytes)
      .Bind(5, record.checksum)
      .Bind(6, record.score);
}

void BindWorker(Statement& stmt, const v1::Worker& worker) {
  stmt.Bind(1, worker.id())
      .Bind(2, worker.host())
      .BindBlob(3, worker.resources().SerializeAsString())
      .Bind(4, ToMs(worker.last_seen()));
}

}  // namespace dial::storage
