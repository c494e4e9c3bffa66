// The hyperparameter schedule behind a PBT trial (`dialctl trials lineage`)
// and the spec that replays it in one trial (`dialctl study replay`). Plain
// data in and out: trials are looked up through a caller's function, so the
// logic runs without a scheduler. Thread-safe: free functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/map.h"

namespace dial::client {

// One stretch of a PBT schedule: `trial`'s run with `params`, covering steps
// [from, to) of the weights' own training (copies carry their age).
struct ScheduleSegment {
  int64_t from = 0;
  int64_t to = 0;
  int64_t trial = 0;
  google::protobuf::Map<std::string, v1::ParamValue> params;
};

// Fetches a trial of the study by number (e.g. DialClient::GetTrial); its
// error is returned as is.
using TrialLookup = std::function<absl::StatusOr<v1::Trial>(int64_t number)>;

// The segments that produced `trial`'s weights at its last step, oldest
// first: follows each trial's last exploit at or before the step in question
// back to its source, recursively. A trial that never exploited is one
// segment, [0, last_step), with its own params (its params before its first
// exploit, if it exploited only later). Errors: whatever `lookup` returns
// for a source trial; INTERNAL when the sources form a cycle (over 1000
// deep).
absl::StatusOr<std::vector<ScheduleSegment>> PbtSchedule(
    const v1::Trial& trial, const TrialLookup& lookup);

// The trainer's `schedule` knob for `segments`: "FROM:{json};FROM:{json}",
// each object the knobs that segment's params set.
std::string KnobSchedule(const std::vector<ScheduleSegment>& segments);

// A spec that retrains trial `number` of `study` (whose spec is `spec`)
// from scratch in one trial: the same trainer knobs, the schedule as the
// only (one-valued) parameter, grid searcher, fifo scheduler, one trial of
// as many steps as the schedule covers. Named "<study>-replay-<number>",
// cut to 64 characters. FAILED_PRECONDITION when the study's trials do not
// run the built-in trainer; INVALID_ARGUMENT when `segments` is empty.
absl::StatusOr<v1::StudySpec> ReplaySpec(
    const std::string& study, int64_t number, const v1::StudySpec& spec,
    const std::vector<ScheduleSegment>& segments);

}  // namespace dial::client
