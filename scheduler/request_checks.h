// The checks of request fields that the core's ask/tell and worker calls
// share. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "scheduler/limits.h"
#include "searchers/trial_scheduler.h"

namespace dial::scheduler {

inline constexpr size_t kMaxCheckpointId = 1024;
// Steps are integers the searchers and the trial protocol's JSON carry as
// doubles, exact up to 2^53.
inline constexpr int64_t kMaxStep = int64_t{1} << 53;

// INVALID_ARGUMENT naming `field` for more than
// limits.max_metrics_per_report metrics, or a metric name that is empty or
// longer than limits.max_metric_name_bytes.
absl::Status CheckMetrics(const searchers::Metrics& metrics, const char* field,
                          const Limits& limits);
// The checks every report shares, ask/tell or from a worker: a step in
// [0, kMaxStep], at least one metric and CheckMetrics, a checkpoint id of at
// most kMaxCheckpointId characters. INVALID_ARGUMENT naming the field.
absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint, const Limits& limits);

// A study's or trial's note (SetNote): at most kMaxNoteChars characters
// of UTF-8, no control characters but newline and tab (C1 controls and
// bidirectional overrides neither). INVALID_ARGUMENT naming `note`.
inline constexpr size_t kMaxNoteChars = 2000;
absl::Status CheckNote(const std::string& note);

// FinishTrialRequest.cpu_seconds of an attempt that ran `wall_seconds` on
// a worker of `cpus` CPUs: finite, not negative, and at most (wall +
// kCpuSecondsSlack) x cpus (the slack covers the clocks' granularity).
// INVALID_ARGUMENT naming cpu_seconds. (FinishTrial drops a value that
// fails, and keeps the finish.)
inline constexpr double kCpuSecondsSlack = 2.0;
absl::Status CheckCpuSeconds(double cpu_seconds, double wall_seconds,
                             int32_t cpus);

// The same with the default limits (Limits{}).
absl::Status CheckMetrics(const searchers::Metrics& metrics, const char* field);
absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint);

}  // namespace dial::scheduler
