#include "scheduler/request_checks.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dial::scheduler {

absl::Status CheckMetrics(const searchers::Metrics& metrics,
                          const char* field) {
  for (const auto& [name, value] : metrics) {
    if (name.empty() || name.size() > 128) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": metric names must be 1-128 characters"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint) {
  if (step < 0) return absl::InvalidArgumentError("step: must be >= 0");
  if (metrics.empty()) {
    return absl::InvalidArgumentError("metrics: must hold at least one value");
  }
  DIAL_RETURN_IF_ERROR(CheckMetrics(metrics, "metrics"));
  if (checkpoint.size() > kMaxCheckpointId) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: at most ", kMaxCheckpointId, " characters"));
  }
  return absl::OkStatus();
}

}  // namespace dial::scheduler
