#include "scheduler/request_checks.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/text.h"

namespace dial::scheduler {

// Finding: 100k metrics per report made GetTrial answers (history) exceed
// gRPC's 64 MiB message limit; reports are capped in count and name length.
absl::Status CheckMetrics(const searchers::Metrics& metrics, const char* field,
                          const Limits& limits) {
  if (metrics.size() > static_cast<size_t>(limits.max_metrics_per_report)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", limits.max_metrics_per_report,
                     " metrics per report, got ", metrics.size()));
  }
  for (const auto& [name, value] : metrics) {
    if (name.empty() || name.size() > limits.max_metric_name_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": metric names must be 1-",
                       limits.max_metric_name_bytes, " characters"));
    }
    // Security round two, H1: a trial reported a stolen token as a metric
    // name. Names are identifiers: nothing for markup, formulas or quoting.
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                      c == '/' || c == ':' || c == '-';
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": metric name '", absl::CHexEscape(name.substr(0, 64)),
            "' may hold only letters, digits and '_', '.', '/', ':', '-'"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint, const Limits& limits) {
  if (step < 0 || step > kMaxStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: must be an integer in [0, 2^53 (", kMaxStep, ")], got ", step));
  }
  if (metrics.empty()) {
    return absl::InvalidArgumentError("metrics: must hold at least one value");
  }
  DIAL_RETURN_IF_ERROR(CheckMetrics(metrics, "metrics", limits));
  if (checkpoint.size() > kMaxCheckpointId) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: at most ", kMaxCheckpointId, " characters"));
  }
  return absl::OkStatus();
}

absl::Status CheckMetrics(const searchers::Metrics& metrics,
                          const char* field) {
  return CheckMetrics(metrics, field, Limits{});
}

absl::Status CheckNote(const std::string& note) {
  // Newline and tab only: no C0 or C1 controls, no bidirectional
  // overrides (they would drive or reorder the terminal that shows it).
  if (auto bad = FindUnsafe(note, /*strict=*/false)) {
    return absl::InvalidArgumentError(
        absl::StrCat("note: ", *bad,
                     "; only newline and tab of the control characters "
                     "are allowed"));
  }
  size_t chars = 0;
  for (char c : note) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  if (chars > kMaxNoteChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "note: must be at most ", kMaxNoteChars, " characters, got ", chars));
  }
  return absl::OkStatus();
}

absl::Status CheckCpuSeconds(double cpu_seconds, double wall_seconds,
                             int32_t cpus) {
  if (!std::isfinite(cpu_seconds) || cpu_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_seconds: must be a finite number of 0 or more, got ",
                     cpu_seconds));
  }
  const double most =
      (std::max(wall_seconds, 0.0) + kCpuSecondsSlack) * std::max(cpus, 1);
  if (cpu_seconds > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu_seconds: ", cpu_seconds, " is more than the attempt could use: ",
        wall_seconds, " s of wall time on ", std::max(cpus, 1), " CPUs"));
  }
  return absl::OkStatus();
}

absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint) {
  return CheckReport(step, metrics, checkpoint, Limits{});
}

}  // namespace dial::scheduler
