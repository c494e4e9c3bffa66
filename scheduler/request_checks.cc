#include "scheduler/request_checks.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

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
  size_t chars = 0;
  for (size_t i = 0; i < note.size(); ++chars) {
    const unsigned char c = static_cast<unsigned char>(note[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
      return absl::InvalidArgumentError(
          absl::StrCat("note: control character ", static_cast<int>(c),
                       " at byte ", i, "; only newline and tab are allowed"));
    }
    // The sequence's length from its first byte (proto3 strings are valid
    // UTF-8 already: only the count and control characters matter).
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  }
  if (chars > kMaxNoteChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "note: must be at most ", kMaxNoteChars, " characters, got ", chars));
  }
  return absl::OkStatus();
}

absl::Status CheckReport(int64_t step, const searchers::Metrics& metrics,
                         const std::string& checkpoint) {
  return CheckReport(step, metrics, checkpoint, Limits{});
}

}  // namespace dial::scheduler
