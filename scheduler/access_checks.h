// Checks of what a caller may name in a request, shared by the core's
// StudyService and WorkerService sides. Thread-safe: plain functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "scheduler/study_entry.h"

namespace dial::scheduler {

// OK for an empty id or one of trial `trial` of `study`'s own
// (storage::CheckpointStore::CheckOwnId: a store id in its directory, or a
// path under "<study>/<trial>/" for command trials); INVALID_ARGUMENT
// otherwise, so no reported id can make a later attempt restore from
// anywhere else.
absl::Status CheckCheckpointId(const std::string& id, const std::string& study,
                               int64_t trial);

// Ask/tell writes (ReportIntermediate, CompleteTrial) are for trials handed
// out by SuggestTrials: FAILED_PRECONDITION on a worker-run study, whose
// trials only their worker reports on (with its lease token).
absl::Status CheckAskTell(const StudyEntry& entry, int64_t trial);

}  // namespace dial::scheduler
