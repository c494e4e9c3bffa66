// A study's trials as CSV or JSON lines, for pandas, spreadsheets and
// scripts: `dialctl study export` and the HTTP API's ExportStudy. Plain
// data in, text out (no gRPC).
//
// Trial rows (one per trial, in number order): number, state, value (the
// objective), start_time, end_time, then param.NAME for each parameter of
// the search space (empty where inactive) and metric.NAME for each final
// metric any trial has (sorted; empty where absent). History rows (one per
// reported step): number, step, then metric.NAME. Numbers are written so
// they parse back to the same double (%.17g); CSV quotes per RFC 4180.
// JSON lines carry the same fields as objects: {"number", "state",
// "value", "start_time", "end_time", "params": {...}, "metrics": {...}}
// and {"number", "step", "metrics": {...}}.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"

namespace dial {

enum class ExportFormat { kCsv, kJsonl };

// "csv" or "jsonl"; INVALID_ARGUMENT naming --format otherwise.
absl::StatusOr<ExportFormat> ParseExportFormat(const std::string& text);

// `trials` in number order; with `history`, each with its whole
// metric_history.
std::string ExportTrials(const v1::StudySpec& spec,
                         const std::vector<v1::Trial>& trials,
                         ExportFormat format, bool history);

// The same in pieces, for exports streamed a page at a time (the HTTP
// API): the metric names of every trial first (CollectExportMetrics), then
// the header (empty for JSON lines) and each page's rows.
void CollectExportMetrics(const v1::Trial& trial, bool history,
                          std::set<std::string>& names);
std::string ExportHeader(const v1::StudySpec& spec,
                         const std::set<std::string>& metrics,
                         ExportFormat format, bool history);
std::string ExportRows(const v1::StudySpec& spec,
                       const std::set<std::string>& metrics,
                       const std::vector<v1::Trial>& trials,
                       ExportFormat format, bool history);

}  // namespace dial
