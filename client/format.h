// What dialctl prints: tables and key/value blocks for people, JSON for
// scripts, the one-line error form, and the parsing of its --state flag.
// Every function returns text (each line ending in "\n" unless it says
// otherwise) and does no I/O, so the output is testable without a
// scheduler. Thread-safe: free functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/lineage.h"
#include "dial/v1/service.pb.h"
#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/map.h"
#include "google/protobuf/message.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace dial::client {

// The one line dialctl prints on stderr for a failed call:
// "dialctl: CODE: message\n". UNAUTHENTICATED says how to pass a token,
// with the scheduler's reason in parentheses; every other code (such as
// PERMISSION_DENIED) carries the scheduler's message as it is.
std::string FormatError(const absl::Status& status);

// Indented JSON with the proto field names; "{}" if the message cannot be
// printed. No trailing newline.
std::string ToJson(const google::protobuf::Message& message);

// One `study watch --json` line: the event wrapped in a WatchStudyResponse,
// compact, with the proto field names. No trailing newline.
std::string WatchEventJson(const v1::StudyEvent& event);

// A study state without its "STUDY_" prefix: "RUNNING", "COMPLETED".
std::string StudyStateName(v1::StudyState state);

// "2026-12-02 11:02:45" (UTC, to the second); "-" for an unset timestamp.
std::string FormatTime(const google::protobuf::Timestamp& t);

// Six significant digits, as printf's %.6g: "0.774564", "1e-05", "119476".
std::string FormatNumber(double v);

// "k=v k=v" sorted by name; doubles as FormatNumber, others as
// ParamValueToString.
std::string FormatParams(
    const google::protobuf::Map<std::string, v1::ParamValue>& params);

// Columns left-aligned, two spaces apart, as wide as their widest cell; the
// last cell of a line is not padded. Cells of a row beyond the header's
// columns are just two spaces apart.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// `study list`: STUDY OWNER STATE TRIALS OBJECTIVE CREATED; "-" for a
// study created without authentication (no owner).
std::string FormatStudies(const std::vector<v1::Study>& studies);

// `study get` (and stop, update): the study's owner, settings, counts and
// parameters.
std::string FormatStudy(const v1::Study& study);

// `trials list`, `trials best`: TRIAL STATE VALUE STEP PARAMS.
std::string FormatTrials(const std::vector<v1::Trial>& trials);
// `dialctl trials best`: the trials; with several objectives, a line on
// the Pareto front (size, hypervolume, reference point) and each trial's
// objective values.
std::string FormatBest(const v1::GetBestTrialsResponse& best);
// `dialctl study ensemble`: the ensemble's accuracy and loss on `split`
// against each member's, best single trial first (`members` in order).
std::string FormatEnsemble(const std::string& split,
                           const std::vector<int64_t>& members,
                           const google::protobuf::Struct& metrics);
// `dialctl trials enqueue --params`: a JSON object of parameter values, or
// an array of them, typed by the study's search space (ints as int_value,
// floats and discrete values as double_value, categoricals as text).
// INVALID_ARGUMENT naming the entry and parameter on a bad value.
absl::StatusOr<std::vector<v1::QueuedTrial>> ParseConfigurations(
    const v1::StudySpec& spec, const std::string& json);

// `trials get`: one trial and its metric history; `metric` names the
// objective.
std::string FormatTrial(const v1::Trial& trial, const std::string& metric);

// `study watch`: a progress bar with counts and the best trial so far. No
// trailing newline.
std::string ProgressLine(const v1::StudyEvent& event);

// `trials lineage`: STEPS TRIAL PARAMS, one row per segment.
std::string FormatSchedule(const std::vector<ScheduleSegment>& segments);

// `study replay`'s file: a comment line naming trial `number` of `study`,
// then `spec` as JSON.
std::string ReplayFile(const std::string& study, int64_t number,
                       const v1::StudySpec& spec);

// `trials evaluate`: the trial and checkpoint, then each numeric metric
// except "trial", one per line.
std::string FormatEvaluation(int64_t number, const std::string& checkpoint,
                             const google::protobuf::Struct& metrics);

// `admin audit`: TIME PRINCIPAL ROLE ACTION STUDY DETAIL, in the order
// given (the server's: newest first); "-" for an empty cell, control
// characters as \xNN so a detail cannot break the table or the terminal.
std::string FormatAuditEvents(const std::vector<v1::AuditEvent>& events);
// ID, HOST, SLOTS, GPUS, LAST SEEN, RUNNING (study/number, ...).
std::string FormatWorkers(const std::vector<v1::Worker>& workers);
// Usage totals (GetUsage) as a table in hours, or as CSV in seconds;
// `by_study` adds the owner column.
std::string FormatUsage(const v1::GetUsageResponse& usage, bool by_study,
                        bool csv);

// `study importance`: a line naming the method and the trials used, then
// PARAM IMPORTANCE (percent) and a bar of up to 40 '#'.
std::string FormatImportance(const v1::GetParameterImportanceResponse& r);

// The --state flag: comma-separated trial state names, any case, empty parts
// skipped. INVALID_ARGUMENT naming the first unknown state.
absl::StatusOr<std::vector<v1::TrialState>> ParseTrialStates(
    const std::string& text);

}  // namespace dial::client
