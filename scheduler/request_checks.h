// The checks of request fields that the core's ask/tell and worker calls
// share. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "searchers/trial_scheduler.h"

namespace dial::scheduler {

inline constexpr size_t kMaxCheckpointId = 1024;

// INVALID_ARGUMENT naming `field` for a metric name that is empty or over
// 128 characters.
absl::Status CheckMetrics(const searchers::Metrics& metrics, const char* field);
// The checks every report shares, ask/tell or from a worker: a step >= 0,
// at least one metric, a checkpoint id of at most kMaxCheckpointId
// characters.
absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint);

}  // namespace dial::scheduler
