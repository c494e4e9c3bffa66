#include "client/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/params.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/time_util.h"

namespace dial::client {
namespace {

// The name of the oneof member set in `message` (its field number is
// `kind_case`); "-" when none is.
std::string KindName(const google::protobuf::Message& message, int kind_case) {
  const auto* field = message.GetDescriptor()->FindFieldByNumber(kind_case);
  return field == nullptr ? "-" : field->name();
}

std::string Counts(const v1::Study& study) {
  std::vector<std::string> parts;
  for (const char* s :
       {"COMPLETED", "RUNNING", "PENDING", "PAUSED", "STOPPED", "FAILED"}) {
    auto it = study.trial_counts().find(s);
    if (it != study.trial_counts().end() && it->second > 0) {
      parts.push_back(absl::StrCat(it->second, " ", absl::AsciiStrToLower(s)));
    }
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

std::string Domain(const v1::ParameterSpec& p) {
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat:
      return absl::StrCat("float [", FormatNumber(p.float_().min()), ", ",
                          FormatNumber(p.float_().max()), "]",
                          p.float_().scale() == v1::LOG ? " log" : "");
    case v1::ParameterSpec::kInt:
      return absl::StrCat("int [", p.int_().min(), ", ", p.int_().max(), "]",
                          p.int_().scale() == v1::LOG ? " log" : "");
    case v1::ParameterSpec::kCategorical:
      return absl::StrCat("one of {",
                          absl::StrJoin(p.categorical().values(), ", "), "}");
    case v1::ParameterSpec::kDiscrete: {
      std::vector<std::string> values;
      for (double v : p.discrete().values()) values.push_back(FormatNumber(v));
      return absl::StrCat("one of {", absl::StrJoin(values, ", "), "}");
    }
    default:
      return "";
  }
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// An audit cell with control characters (a newline that would break the
// table, a terminal escape sequence) shown as \xNN, and "-" when empty.
std::string Cell(const std::string& s) {
  if (s.empty()) return "-";
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string Value(const v1::Trial& t) {
  if (t.objective_values_size() > 1) {
    std::vector<std::string> parts;
    for (double v : t.objective_values()) parts.push_back(FormatNumber(v));
    return absl::StrJoin(parts, ", ");
  }
  return t.has_objective_value() ? FormatNumber(t.objective_value()) : "-";
}

}  // namespace

std::string FormatError(const absl::Status& status) {
  if (absl::IsUnauthenticated(status)) {
    return absl::StrCat(
        "dialctl: UNAUTHENTICATED: no or unknown token: pass --token or set "
        "DIAL_TOKEN",
        status.message().empty() ? ""
                                 : absl::StrCat(" (", status.message(), ")"),
        "\n");
  }
  return absl::StrCat("dialctl: ", absl::StatusCodeToString(status.code()),
                      ": ", status.message(), "\n");
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  return status.ok() ? out : "{}";
}

std::string WatchEventJson(const v1::StudyEvent& event) {
  v1::WatchStudyResponse r;
  *r.mutable_event() = event;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(r, &out, options);
  return out;
}

std::string StudyStateName(v1::StudyState state) {
  std::string name = v1::StudyState_Name(state);
  return name.rfind("STUDY_", 0) == 0 ? name.substr(6) : name;
}

std::string FormatTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  std::string s = google::protobuf::util::TimeUtil::ToString(t);
  // 2026-12-02T11:02:45.123Z -> 2026-12-02 11:02:45
  s = s.substr(0, 19);
  if (s.size() > 10) s[10] = ' ';
  return s;
}

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string FormatParams(
    const google::protobuf::Map<std::string, v1::ParamValue>& params) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : params) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  std::vector<std::string> parts;
  for (const auto& k : keys) {
    const auto& v = params.at(k);
    parts.push_back(absl::StrCat(k, "=",
                                 v.has_double_value()
                                     ? FormatNumber(v.double_value())
                                     : ParamValueToString(v)));
  }
  return absl::StrJoin(parts, " ");
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size()) {
        const size_t w = i < width.size() ? width[i] : cells[i].size();
        out += std::string(w - cells[i].size() + 2, ' ');
      }
    }
    out += "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return out;
}

std::string FormatStudies(const std::vector<v1::Study>& studies) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : studies) {
    rows.push_back(
        {s.name(), OrDash(s.owner()), StudyStateName(s.state()),
         absl::StrCat(s.trials_created(), "/", s.spec().budget().max_trials()),
         absl::StrCat(
             s.spec().objective().metric(), " (",
             s.spec().objective().goal() == v1::MAXIMIZE ? "max" : "min", ")"),
         FormatTime(s.create_time())});
  }
  return FormatTable(
      {"STUDY", "OWNER", "STATE", "TRIALS", "OBJECTIVE", "CREATED"}, rows);
}

namespace {

// A note under its label: later lines indented to the text's column.
std::string NoteLines(const char* label, const std::string& note) {
  if (note.empty()) return "";
  const std::string indent(std::string(label).size(), ' ');
  return absl::StrCat(label, absl::StrReplaceAll(note, {{"\n", "\n" + indent}}),
                      "\n");
}

}  // namespace

std::string FormatStudy(const v1::Study& s) {
  const auto& spec = s.spec();
  std::string out;
  absl::StrAppend(&out, "study:       ", s.name(), "\n");
  absl::StrAppend(&out, "owner:       ", OrDash(s.owner()), "\n");
  absl::StrAppend(&out, "state:       ", StudyStateName(s.state()), "\n");
  if (!s.waiting().empty()) {
    absl::StrAppend(&out, "             ", s.waiting(), "\n");
  }
  absl::StrAppend(&out, "priority:    ", spec.priority(), "\n");
  if (!spec.trial().resources().selector().empty()) {
    std::map<std::string, std::string> keys;  // sorted
    for (const auto& [key, list] : spec.trial().resources().selector()) {
      std::vector<std::string> values;
      for (const auto& v : list.values()) values.push_back(v.string_value());
      keys[key] = absl::StrCat(key, " in [", absl::StrJoin(values, ", "), "]");
    }
    std::vector<std::string> parts;
    for (auto& [key, text] : keys) parts.push_back(std::move(text));
    absl::StrAppend(&out, "selector:    ", absl::StrJoin(parts, ", "), "\n");
  }
  if (spec.objectives_size() > 1) {
    std::vector<std::string> parts;
    for (const auto& o : spec.objectives()) {
      parts.push_back(
          absl::StrCat(o.metric(), " (", v1::Goal_Name(o.goal()), ")"));
    }
    absl::StrAppend(&out, "objectives:  ", absl::StrJoin(parts, ", "), "\n");
  } else {
    absl::StrAppend(&out, "objective:   ", spec.objective().metric(), " (",
                    v1::Goal_Name(spec.objective().goal()), ")\n");
  }
  for (const auto& c : spec.constraints()) {
    absl::StrAppend(
        &out, "constraint:  ", c.metric(),
        c.has_min() ? absl::StrCat(" >= ", FormatNumber(c.min())) : "",
        c.has_max() ? absl::StrCat(" <= ", FormatNumber(c.max())) : "", "\n");
  }
  absl::StrAppend(&out, "searcher:    ",
                  KindName(spec.searcher(), spec.searcher().kind_case()), "\n");
  absl::StrAppend(&out, "scheduler:   ",
                  KindName(spec.scheduler(), spec.scheduler().kind_case()),
                  "\n");
  absl::StrAppend(&out, "trials:      ", s.trials_created(), " of ",
                  spec.budget().max_trials(), " created (", Counts(s),
                  "), at most ", spec.budget().max_parallel_trials(),
                  " at once\n");
  absl::StrAppend(&out, "created:     ", FormatTime(s.create_time()), "\n");
  out += NoteLines("note:        ", s.note());
  out += "parameters:\n";
  for (const auto& p : spec.search_space()) {
    absl::StrAppend(&out, "  ", p.name(), ": ", Domain(p));
    for (const auto& [parent, values] : p.when()) {
      std::vector<std::string> vs;
      for (const auto& v : values.values()) {
        vs.push_back(v.has_string_value() ? v.string_value()
                                          : FormatNumber(v.number_value()));
      }
      absl::StrAppend(&out, "  when ", parent, " in {", absl::StrJoin(vs, ", "),
                      "}");
    }
    out += "\n";
  }
  return out;
}

std::string FormatTrials(const std::vector<v1::Trial>& trials) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : trials) {
    rows.push_back({std::to_string(t.number()), v1::TrialState_Name(t.state()),
                    Value(t),
                    t.last_step() < 0 ? "-" : std::to_string(t.last_step()),
                    FormatParams(t.params())});
  }
  return FormatTable({"TRIAL", "STATE", "VALUE", "STEP", "PARAMS"}, rows);
}

std::string FormatBest(const v1::GetBestTrialsResponse& best) {
  std::string out;
  if (best.front_size() > 0) {
    std::vector<std::string> reference;
    for (double v : best.reference_point()) {
      reference.push_back(FormatNumber(v));
    }
    absl::StrAppend(&out, "Pareto front: ", best.front_size(),
                    " trials, hypervolume ", FormatNumber(best.hypervolume()),
                    " (reference point ", absl::StrJoin(reference, ", "),
                    ")\n");
  }
  const std::vector<v1::Trial> trials(best.trials().begin(),
                                      best.trials().end());
  out += FormatTrials(trials);
  if (!best.seed_runs().empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : best.seed_runs()) {
      rows.push_back({std::to_string(r.trial()), std::to_string(r.runs()),
                      FormatNumber(r.mean()), FormatNumber(r.stddev())});
    }
    out += "\nRe-evaluated with several seeds (ranked by the mean):\n";
    out += FormatTable({"TRIAL", "RUNS", "MEAN", "STDDEV"}, rows);
  }
  return out;
}

std::string FormatEnsemble(const std::string& split,
                           const std::vector<int64_t>& members,
                           const google::protobuf::Struct& metrics) {
  auto get = [&](const std::string& key) {
    auto it = metrics.fields().find(key);
    return it == metrics.fields().end() ? 0.0 : it->second.number_value();
  };
  const double ensemble = get(split + "_accuracy");
  double best_single = 0;
  int64_t best_trial = -1;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < members.size(); ++i) {
    const double acc = get(absl::StrCat("member_", i, "_accuracy"));
    if (acc > best_single || best_trial < 0) {
      best_single = acc;
      best_trial = members[i];
    }
    rows.push_back({std::to_string(members[i]), FormatNumber(acc)});
  }
  std::string out =
      FormatTable({"TRIAL", absl::AsciiStrToUpper(split) + "_ACCURACY"}, rows);
  absl::StrAppend(
      &out, "\nensemble of ", members.size(), ": ", split, " accuracy ",
      FormatNumber(ensemble), ", loss ", FormatNumber(get(split + "_loss")),
      " (", static_cast<int64_t>(get(split + "_examples")),
      " examples)\nbest single (trial ", best_trial,
      "): ", FormatNumber(best_single), "; the ensemble is ",
      absl::StrFormat("%+.2f", 100 * (ensemble - best_single)), " points ",
      ensemble >= best_single ? "better" : "worse", "\n");
  return out;
}

absl::StatusOr<std::vector<v1::QueuedTrial>> ParseConfigurations(
    const v1::StudySpec& spec, const std::string& json) {
  google::protobuf::Value root;
  if (!google::protobuf::util::JsonStringToMessage(json, &root).ok()) {
    return absl::InvalidArgumentError(
        "--params: not JSON: give {\"name\": value, ...} or a list of them");
  }
  std::vector<const google::protobuf::Value*> entries;
  if (root.has_list_value()) {
    for (const auto& v : root.list_value().values()) entries.push_back(&v);
  } else {
    entries.push_back(&root);
  }
  std::vector<v1::QueuedTrial> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where =
        entries.size() > 1 ? absl::StrCat("--params[", i, "]") : "--params";
    if (!entries[i]->has_struct_value()) {
      return absl::InvalidArgumentError(where + ": must be a JSON object");
    }
    v1::QueuedTrial& q = out.emplace_back();
    for (const auto& [name, value] : entries[i]->struct_value().fields()) {
      const v1::ParameterSpec* p = nullptr;
      for (const auto& s : spec.search_space()) {
        if (s.name() == name) p = &s;
      }
      if (!p) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".", name, ": no such parameter"));
      }
      v1::ParamValue& v = (*q.mutable_params())[name];
      const bool number = value.has_number_value();
      if (p->has_categorical() && value.has_string_value()) {
        v.set_string_value(value.string_value());
      } else if (p->has_int_() && number &&
                 value.number_value() == std::floor(value.number_value())) {
        v.set_int_value(static_cast<int64_t>(value.number_value()));
      } else if ((p->has_float_() || p->has_discrete()) && number) {
        v.set_double_value(value.number_value());
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".", name, ": must be ",
                         p->has_categorical() ? "one of its values, as text"
                         : p->has_int_()      ? "an integer"
                                              : "a number"));
      }
    }
  }
  return out;
}

std::string FormatTrial(const v1::Trial& t, const std::string& metric) {
  std::string out;
  absl::StrAppend(&out, "trial:    ", t.number(), " of ", t.study(), "\n");
  absl::StrAppend(&out, "state:    ", v1::TrialState_Name(t.state()), "\n");
  absl::StrAppend(&out, "value:    ", Value(t), " (", metric, ")\n");
  absl::StrAppend(&out, "params:   ", FormatParams(t.params()), "\n");
  absl::StrAppend(&out, "started:  ", FormatTime(t.start_time()), "\n");
  absl::StrAppend(&out, "ended:    ", FormatTime(t.end_time()), "\n");
  if (!t.client_id().empty()) {
    absl::StrAppend(&out, "client:   ", t.client_id(), "\n");
  }
  if (!t.checkpoint().empty()) {
    absl::StrAppend(&out, "checkpoint: ", t.checkpoint(), "\n");
  }
  if (!t.error().empty()) absl::StrAppend(&out, "error:    ", t.error(), "\n");
  out += NoteLines("note:     ", t.note());
  if (!t.final_metrics().empty()) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : t.final_metrics()) {
      parts.push_back(absl::StrCat(k, "=", FormatNumber(v)));
    }
    std::sort(parts.begin(), parts.end());
    absl::StrAppend(&out, "final:    ", absl::StrJoin(parts, " "), "\n");
  }
  if (t.metric_history().empty()) return out;
  std::vector<std::string> names;
  for (const auto& point : t.metric_history()) {
    for (const auto& [k, v] : point.metrics()) {
      if (std::find(names.begin(), names.end(), k) == names.end()) {
        names.push_back(k);
      }
    }
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> header = {"STEP"};
  header.insert(header.end(), names.begin(), names.end());
  std::vector<std::vector<std::string>> rows;
  for (const auto& point : t.metric_history()) {
    std::vector<std::string> row = {std::to_string(point.step())};
    for (const auto& n : names) {
      auto it = point.metrics().find(n);
      row.push_back(it == point.metrics().end() ? "-"
                                                : FormatNumber(it->second));
    }
    rows.push_back(std::move(row));
  }
  return absl::StrCat(out, "history:\n", FormatTable(header, rows));
}

std::string ProgressLine(const v1::StudyEvent& event) {
  const v1::Study& s = event.study();
  auto count = [&](const char* state) {
    auto it = s.trial_counts().find(state);
    return it == s.trial_counts().end() ? 0 : it->second;
  };
  const int max_trials = std::max(1, s.spec().budget().max_trials());
  const int finished = count("COMPLETED") + count("STOPPED") + count("FAILED");
  const int bar_width = 30;
  const int filled = std::min(bar_width, finished * bar_width / max_trials);
  std::string line = absl::StrCat(
      "[", std::string(filled, '#'), std::string(bar_width - filled, '.'), "] ",
      finished, "/", max_trials, " done, ", count("RUNNING"), " running, ",
      count("PENDING"), " pending");
  if (event.has_best_trial()) {
    absl::StrAppend(&line, " | best ", s.spec().objective().metric(), "=",
                    Value(event.best_trial()), " (trial ",
                    event.best_trial().number(), ": ",
                    FormatParams(event.best_trial().params()), ")");
  }
  return line;
}

std::string FormatSchedule(const std::vector<ScheduleSegment>& segments) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : segments) {
    rows.push_back({absl::StrCat(s.from, "-", s.to), std::to_string(s.trial),
                    FormatParams(s.params)});
  }
  return FormatTable({"STEPS", "TRIAL", "PARAMS"}, rows);
}

std::string ReplayFile(const std::string& study, int64_t number,
                       const v1::StudySpec& spec) {
  return absl::StrCat("# Replays trial ", number, " of ", study,
                      ": its PBT schedule in one trial.\n", ToJson(spec), "\n");
}

std::string FormatEvaluation(int64_t number, const std::string& checkpoint,
                             const google::protobuf::Struct& metrics) {
  std::string out =
      absl::StrFormat("trial %d  checkpoint %s\n", number, checkpoint.c_str());
  for (const auto& [metric, value] : metrics.fields()) {
    if (value.has_number_value() && metric != "trial") {
      absl::StrAppendFormat(&out, "  %-16s %.6g\n", metric.c_str(),
                            value.number_value());
    }
  }
  return out;
}

std::string FormatAuditEvents(const std::vector<v1::AuditEvent>& events) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : events) {
    rows.push_back({FormatTime(e.time()), Cell(e.principal()), Cell(e.role()),
                    Cell(e.action()), Cell(e.study()), Cell(e.detail())});
  }
  return FormatTable({"TIME", "PRINCIPAL", "ROLE", "ACTION", "STUDY", "DETAIL"},
                     rows);
}

std::string FormatWorkers(const std::vector<v1::Worker>& workers) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : workers) {
    std::vector<std::string> running;
    for (const auto& t : w.running()) {
      running.push_back(absl::StrCat(t.study(), "/", t.number()));
    }
    // How its trials are kept apart: "per-attempt-user", or "none" (and
    // why, from the worker); "-" for a worker that does not say.
    const v1::WorkerIsolation& iso = w.resources().isolation();
    std::string isolation = iso.method().empty() ? "-" : iso.method();
    if (!iso.isolated() && !iso.reason().empty()) {
      absl::StrAppend(&isolation, " (", iso.reason(), ")");
    }
    rows.push_back(
        {Cell(w.id()), Cell(w.host()), absl::StrCat(w.resources().slots()),
         absl::StrCat(w.resources().gpus_size()), Cell(isolation),
         FormatTime(w.last_seen()), Cell(absl::StrJoin(running, ","))});
  }
  return FormatTable(
      {"ID", "HOST", "SLOTS", "GPUS", "ISOLATION", "LAST SEEN", "RUNNING"},
      rows);
}

namespace {

// A CSV field: quoted when it holds a comma, quote or line break.
std::string CsvCell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string FormatUsage(const v1::GetUsageResponse& usage, bool by_study,
                        bool csv) {
  if (csv) {
    std::string out = by_study ? "study,owner," : "owner,";
    out += "slot_seconds,gpu_seconds,cpu_seconds,attempts\n";
    for (const auto& t : usage.totals()) {
      absl::StrAppend(&out, CsvCell(t.key()), ",",
                      by_study ? CsvCell(t.owner()) + "," : "",
                      absl::StrFormat("%.3f,%.3f,%.3f,", t.slot_seconds(),
                                      t.gpu_seconds(), t.cpu_seconds()),
                      t.attempts(), "\n");
    }
    return out;
  }
  auto hours = [](double s) { return absl::StrFormat("%.2f", s / 3600); };
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : usage.totals()) {
    std::vector<std::string> row = {Cell(t.key())};
    if (by_study) row.push_back(Cell(t.owner()));
    for (std::string h : {hours(t.slot_seconds()), hours(t.gpu_seconds()),
                          hours(t.cpu_seconds())}) {
      row.push_back(std::move(h));
    }
    row.push_back(absl::StrCat(t.attempts()));
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = {by_study ? "STUDY" : "OWNER"};
  if (by_study) header.push_back("OWNER");
  for (const char* h : {"SLOT-HOURS", "GPU-HOURS", "CPU-HOURS", "ATTEMPTS"}) {
    header.push_back(h);
  }
  return FormatTable(header, rows);
}

std::string FormatImportance(const v1::GetParameterImportanceResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : r.params()) {
    const double share = std::clamp(p.importance(), 0.0, 1.0);
    rows.push_back(
        {p.name(), absl::StrFormat("%5.1f%%", 100 * share),
         std::string(static_cast<size_t>(std::lround(40 * share)), '#')});
  }
  return absl::StrCat(r.method(), " over ", r.trials(),
                      " completed trials (the best ", r.top_trials(), ")\n",
                      FormatTable({"PARAM", "IMPORTANCE"}, rows));
}

absl::StatusOr<std::vector<v1::TrialState>> ParseTrialStates(
    const std::string& text) {
  std::vector<v1::TrialState> states;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    v1::TrialState s;
    std::string upper = absl::AsciiStrToUpper(std::string(part));
    if (!v1::TrialState_Parse(upper, &s) || s == v1::TRIAL_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state: unknown trial state '", std::string(part),
          "'; use PENDING, RUNNING, COMPLETED, STOPPED, PAUSED or FAILED"));
    }
    states.push_back(s);
  }
  return states;
}

}  // namespace dial::client
