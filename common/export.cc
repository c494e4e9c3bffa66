#include "common/export.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "google/protobuf/util/time_util.h"

namespace dial {
namespace {

std::string Number(double v) { return absl::StrFormat("%.17g", v); }

// Security round two, finding 11: a categorical value "=HYPERLINK(...)"
// was exported as it is, and a spreadsheet runs it as a formula. As OWASP
// recommends, text that starts with = + - @, a tab or a CR gets a leading
// apostrophe (numbers are written by Number, never through here).
std::string CsvCell(const std::string& raw) {
  const bool formula =
      !raw.empty() && std::string("=+-@\t\r").find(raw[0]) != std::string::npos;
  const std::string text = formula ? "'" + raw : raw;
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string JsonString(const std::string& text) {
  std::string out;
  AppendJsonString(text, out);
  return out;
}

// A JSON number, or null for what JSON cannot hold (NaN, infinities).
std::string JsonNumber(double v) {
  return std::isfinite(v) ? Number(v) : "null";
}

std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "";
  return google::protobuf::util::TimeUtil::ToString(t);
}

// A parameter value as CSV text or as JSON.
std::string ParamText(const v1::ParamValue& v, bool json) {
  switch (v.value_case()) {
    case v1::ParamValue::kDoubleValue:
      return json ? JsonNumber(v.double_value()) : Number(v.double_value());
    case v1::ParamValue::kIntValue:
      return absl::StrCat(v.int_value());
    case v1::ParamValue::kStringValue:
      return json ? JsonString(v.string_value()) : CsvCell(v.string_value());
    default:
      return json ? "null" : "";
  }
}

std::string MetricsJson(const google::protobuf::Map<std::string, double>& m) {
  std::map<std::string, double> sorted(m.begin(), m.end());
  std::vector<std::string> parts;
  for (const auto& [k, v] : sorted) {
    parts.push_back(absl::StrCat(JsonString(k), ": ", JsonNumber(v)));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

}  // namespace

absl::StatusOr<ExportFormat> ParseExportFormat(const std::string& text) {
  if (text == "csv") return ExportFormat::kCsv;
  if (text == "jsonl") return ExportFormat::kJsonl;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: '", text, "' is not csv or jsonl"));
}

void CollectExportMetrics(const v1::Trial& trial, bool history,
                          std::set<std::string>& names) {
  if (history) {
    for (const auto& p : trial.metric_history()) {
      for (const auto& [k, v] : p.metrics()) names.insert(k);
    }
  } else {
    for (const auto& [k, v] : trial.final_metrics()) names.insert(k);
  }
}

std::string ExportHeader(const v1::StudySpec& spec,
                         const std::set<std::string>& metrics,
                         ExportFormat format, bool history) {
  if (format != ExportFormat::kCsv) return "";
  std::vector<std::string> header = {"number"};
  if (history) {
    header.push_back("step");
  } else {
    header.insert(header.end(), {"state", "value", "start_time", "end_time"});
    for (const auto& p : spec.search_space()) {
      header.push_back(CsvCell("param." + p.name()));
    }
  }
  for (const auto& m : metrics) header.push_back(CsvCell("metric." + m));
  return absl::StrCat(absl::StrJoin(header, ","), "\n");
}

std::string ExportRows(const v1::StudySpec& spec,
                       const std::set<std::string>& metrics,
                       const std::vector<v1::Trial>& trials,
                       ExportFormat format, bool history) {
  const bool csv = format == ExportFormat::kCsv;
  std::string out;
  for (const auto& t : trials) {
    if (history) {
      for (const auto& p : t.metric_history()) {
        if (!csv) {
          absl::StrAppend(&out, "{\"number\": ", t.number(),
                          ", \"step\": ", p.step(),
                          ", \"metrics\": ", MetricsJson(p.metrics()), "}\n");
          continue;
        }
        std::vector<std::string> row = {absl::StrCat(t.number()),
                                        absl::StrCat(p.step())};
        for (const auto& m : metrics) {
          auto it = p.metrics().find(m);
          row.push_back(it == p.metrics().end() ? "" : Number(it->second));
        }
        absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
      }
      continue;
    }
    const std::string state = v1::TrialState_Name(t.state());
    if (!csv) {
      std::vector<std::string> params;
      for (const auto& p : spec.search_space()) {
        auto it = t.params().find(p.name());
        if (it == t.params().end()) continue;
        params.push_back(absl::StrCat(JsonString(p.name()), ": ",
                                      ParamText(it->second, true)));
      }
      absl::StrAppend(
          &out, "{\"number\": ", t.number(), ", \"state\": ", JsonString(state),
          ", \"value\": ",
          t.has_objective_value() ? JsonNumber(t.objective_value()) : "null",
          ", \"start_time\": ", JsonString(Time(t.start_time())),
          ", \"end_time\": ", JsonString(Time(t.end_time())), ", \"params\": {",
          absl::StrJoin(params, ", "), "}",
          ", \"metrics\": ", MetricsJson(t.final_metrics()), "}\n");
      continue;
    }
    std::vector<std::string> row = {
        absl::StrCat(t.number()), state,
        t.has_objective_value() ? Number(t.objective_value()) : "",
        Time(t.start_time()), Time(t.end_time())};
    for (const auto& p : spec.search_space()) {
      auto it = t.params().find(p.name());
      row.push_back(it == t.params().end() ? "" : ParamText(it->second, false));
    }
    for (const auto& m : metrics) {
      auto it = t.final_metrics().find(m);
      row.push_back(it == t.final_metrics().end() ? "" : Number(it->second));
    }
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

std::string ExportTrials(const v1::StudySpec& spec,
                         const std::vector<v1::Trial>& trials,
                         ExportFormat format, bool history) {
  std::set<std::string> metrics;
  for (const auto& t : trials) CollectExportMetrics(t, history, metrics);
  return ExportHeader(spec, metrics, format, history) +
         ExportRows(spec, metrics, trials, format, history);
}

}  // namespace dial
