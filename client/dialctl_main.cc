// dialctl: the command-line client. Human-readable tables by default,
// --json for scripts; any error is one line on stderr and a non-zero exit.
#include <google/protobuf/util/json_util.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "common/flags.h"
#include "common/spec.h"
#include "common/trial_protocol.h"
#include "google/protobuf/util/time_util.h"
#include "searchers/space.h"

ABSL_FLAG(std::string, scheduler, "",
          "Scheduler address (default: $DIAL_SCHEDULER or 127.0.0.1:7070)");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables");
ABSL_FLAG(std::string, f, "",
          "Study spec file (YAML or JSON), for study create");
ABSL_FLAG(std::string, state, "",
          "Comma-separated trial states to list, e.g. COMPLETED,RUNNING");
ABSL_FLAG(int32_t, count, 5, "How many trials for trials best");
ABSL_FLAG(int32_t, max_trials, 0, "New max_trials, for study update");
ABSL_FLAG(int32_t, max_parallel_trials, 0,
          "New max_parallel_trials, for study update");
ABSL_FLAG(int32_t, timeout_s, 30, "Deadline of each call, in seconds");
ABSL_FLAG(std::string, o, "", "Output file, for study replay");
ABSL_FLAG(std::string, split, "test",
          "Split for trials evaluate: test (held out) or val");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Checkpoint store the workers write to, for trials evaluate "
          "(default: $DIAL_CHECKPOINT_ROOT)");
ABSL_FLAG(std::string, trainer, "",
          "Path of dial-train, for trials evaluate (default: next to "
          "dialctl, then the build tree, then PATH)");
ABSL_FLAG(std::string, predictions, "",
          "For trials evaluate: write per-example predictions to this CSV");

namespace {

using dial::client::DialClient;
namespace v1 = dial::v1;

constexpr char kUsage[] = R"(dialctl: the Dial command-line client

usage: dialctl [--scheduler=ADDR] [--json] COMMAND ARGS

  study create -f SPEC          create a study from a YAML or JSON spec
  study list                    list studies
  study get STUDY               show a study
  study watch STUDY             live progress until the study ends
  study stop STUDY              stop suggesting new trials
  study update STUDY --max-trials=N [--max-parallel-trials=N]
  study delete STUDY            delete a study and its trials
  trials list STUDY [--state=S] list trials (S: PENDING,RUNNING,...)
  trials best STUDY [--count=N] the best completed trials
  trials get STUDY N            one trial with its metric history
  trials lineage STUDY N        the hyperparameter schedule behind a PBT trial
  trials evaluate STUDY N [--split=test] [--checkpoint-root=DIR]
                                evaluate a trial's latest checkpoint on the
                                held-out test split (runs dial-train here)
  study replay STUDY N -o FILE  a spec that retrains that schedule in one trial
  admin backup PATH             copy the scheduler's database, while it runs,
                                to PATH: an absolute path on the scheduler's
                                machine (raise --timeout-s for a large one)
)";

int Fail(const absl::Status& status) {
  std::cerr << "dialctl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return 1;
}

int Usage(const std::string& why) {
  std::cerr << "dialctl: " << why << "\n\n" << kUsage;
  return 2;
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

std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  std::string s = google::protobuf::util::TimeUtil::ToString(t);
  // 2026-12-02T11:02:45.123Z -> 2026-12-02 11:02:45
  s = s.substr(0, 19);
  if (s.size() > 10) s[10] = ' ';
  return s;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Params(const v1::Trial& trial) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : trial.params()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  std::vector<std::string> parts;
  for (const auto& k : keys) {
    const auto& v = trial.params().at(k);
    parts.push_back(absl::StrCat(k, "=",
                                 v.has_double_value()
                                     ? Number(v.double_value())
                                     : dial::searchers::ParamValueToString(v)));
  }
  return absl::StrJoin(parts, " ");
}

std::string StateName(v1::TrialState s) { return v1::TrialState_Name(s); }
std::string StudyStateName(v1::StudyState s) {
  std::string name = v1::StudyState_Name(s);
  return name.rfind("STUDY_", 0) == 0 ? name.substr(6) : name;
}

void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size())
        out += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
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

void PrintStudies(const std::vector<v1::Study>& studies) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : studies) {
    rows.push_back(
        {s.name(), StudyStateName(s.state()),
         absl::StrCat(s.trials_created(), "/", s.spec().budget().max_trials()),
         absl::StrCat(
             s.spec().objective().metric(), " (",
             s.spec().objective().goal() == v1::MAXIMIZE ? "max" : "min", ")"),
         Time(s.create_time())});
  }
  PrintTable({"STUDY", "STATE", "TRIALS", "OBJECTIVE", "CREATED"}, rows);
}

void PrintStudy(const v1::Study& s) {
  const auto& spec = s.spec();
  std::cout << "study:       " << s.name() << "\n"
            << "state:       " << StudyStateName(s.state()) << "\n"
            << "objective:   " << spec.objective().metric() << " ("
            << v1::Goal_Name(spec.objective().goal()) << ")\n"
            << "searcher:    "
            << spec.searcher()
                   .GetDescriptor()
                   ->FindFieldByNumber(spec.searcher().kind_case())
                   ->name()
            << "\n"
            << "scheduler:   "
            << spec.scheduler()
                   .GetDescriptor()
                   ->FindFieldByNumber(spec.scheduler().kind_case())
                   ->name()
            << "\n"
            << "trials:      " << s.trials_created() << " of "
            << spec.budget().max_trials() << " created (" << Counts(s)
            << "), at most " << spec.budget().max_parallel_trials()
            << " at once\n"
            << "created:     " << Time(s.create_time()) << "\n";
  std::cout << "parameters:\n";
  for (const auto& p : spec.search_space()) {
    std::string domain;
    switch (p.domain_case()) {
      case v1::ParameterSpec::kFloat:
        domain = absl::StrCat("float [", Number(p.float_().min()), ", ",
                              Number(p.float_().max()), "]",
                              p.float_().scale() == v1::LOG ? " log" : "");
        break;
      case v1::ParameterSpec::kInt:
        domain = absl::StrCat("int [", p.int_().min(), ", ", p.int_().max(),
                              "]", p.int_().scale() == v1::LOG ? " log" : "");
        break;
      case v1::ParameterSpec::kCategorical:
        domain = absl::StrCat(
            "one of {", absl::StrJoin(p.categorical().values(), ", "), "}");
        break;
      case v1::ParameterSpec::kDiscrete: {
        std::vector<std::string> values;
        for (double v : p.discrete().values()) values.push_back(Number(v));
        domain = absl::StrCat("one of {", absl::StrJoin(values, ", "), "}");
        break;
      }
      default:
        break;
    }
    std::cout << "  " << p.name() << ": " << domain;
    for (const auto& [parent, values] : p.when()) {
      std::vector<std::string> vs;
      for (const auto& v : values.values()) {
        vs.push_back(v.has_string_value() ? v.string_value()
                                          : Number(v.number_value()));
      }
      std::cout << "  when " << parent << " in {" << absl::StrJoin(vs, ", ")
                << "}";
    }
    std::cout << "\n";
  }
}

std::string Value(const v1::Trial& t) {
  return t.has_objective_value() ? Number(t.objective_value()) : "-";
}

void PrintTrials(const std::vector<v1::Trial>& trials) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : trials) {
    rows.push_back({std::to_string(t.number()), StateName(t.state()), Value(t),
                    t.last_step() < 0 ? "-" : std::to_string(t.last_step()),
                    Params(t)});
  }
  PrintTable({"TRIAL", "STATE", "VALUE", "STEP", "PARAMS"}, rows);
}

void PrintTrial(const v1::Trial& t, const std::string& metric) {
  std::cout << "trial:    " << t.number() << " of " << t.study() << "\n"
            << "state:    " << StateName(t.state()) << "\n"
            << "value:    " << Value(t) << " (" << metric << ")\n"
            << "params:   " << Params(t) << "\n"
            << "started:  " << Time(t.start_time()) << "\n"
            << "ended:    " << Time(t.end_time()) << "\n";
  if (!t.client_id().empty())
    std::cout << "client:   " << t.client_id() << "\n";
  if (!t.checkpoint().empty()) {
    std::cout << "checkpoint: " << t.checkpoint() << "\n";
  }
  if (!t.error().empty()) std::cout << "error:    " << t.error() << "\n";
  if (!t.final_metrics().empty()) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : t.final_metrics()) {
      parts.push_back(absl::StrCat(k, "=", Number(v)));
    }
    std::sort(parts.begin(), parts.end());
    std::cout << "final:    " << absl::StrJoin(parts, " ") << "\n";
  }
  if (t.metric_history().empty()) return;
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
      row.push_back(it == point.metrics().end() ? "-" : Number(it->second));
    }
    rows.push_back(std::move(row));
  }
  std::cout << "history:\n";
  PrintTable(header, rows);
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
                    Params(event.best_trial()), ")");
  }
  return line;
}

// One stretch of a PBT schedule: `trial`'s run with `params`, covering
// steps [from, to) of the weights' own training (copies carry their age).
struct Segment {
  int64_t from = 0, to = 0, trial = 0;
  google::protobuf::Map<std::string, v1::ParamValue> params;
};

// The segments that produced `number`'s weights at its step `until`:
// follows the last exploit back to its source, recursively.
absl::Status Schedule(DialClient& client, const std::string& study,
                      int64_t number, int64_t until, int depth,
                      std::vector<Segment>* out) {
  if (depth > 1000) return absl::InternalError("lineage has a cycle");
  auto t = client.GetTrial(study, number);
  if (!t.ok()) return t.status();
  const v1::LineageEntry* last = nullptr;
  for (const auto& e : t->lineage()) {
    if (e.step() <= until) last = &e;
  }
  if (last == nullptr) {
    Segment s{0, until, number,
              t->lineage().empty() ? t->params() : t->lineage(0).old_params()};
    out->push_back(s);
    return absl::OkStatus();
  }
  auto status = Schedule(client, study, last->source_trial(),
                         last->source_step(), depth + 1, out);
  if (!status.ok()) return status;
  // The copied weights had trained `start` steps (in their own lineage);
  // this trial then trained them until - step more with its new params.
  const int64_t start = out->back().to;
  out->push_back(
      {start, start + (until - last->step()), number, last->new_params()});
  return absl::OkStatus();
}

std::string ParamsOf(
    const google::protobuf::Map<std::string, v1::ParamValue>& p) {
  v1::Trial t;
  *t.mutable_params() = p;
  return Params(t);
}

int Lineage(DialClient& client, const std::string& study, int64_t number,
            const std::string& out_file) {
  auto t = client.GetTrial(study, number);
  if (!t.ok()) return Fail(t.status());
  std::vector<Segment> segments;
  auto status = Schedule(client, study, number, t->last_step(), 0, &segments);
  if (!status.ok()) return Fail(status);
  if (out_file.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : segments) {
      rows.push_back({absl::StrCat(s.from, "-", s.to), std::to_string(s.trial),
                      ParamsOf(s.params)});
    }
    PrintTable({"STEPS", "TRIAL", "PARAMS"}, rows);
    return 0;
  }
  // Replay: the study's spec, one trial, the schedule as a trainer knob.
  auto studied = client.GetStudy(study);
  if (!studied.ok()) return Fail(studied.status());
  v1::StudySpec spec = studied->spec();
  if (!spec.trial().has_trainer()) {
    return Fail(absl::FailedPreconditionError(
        "study replay needs a study whose trials run the built-in trainer"));
  }
  std::string schedule;
  for (const auto& s : segments) {
    google::protobuf::Struct knobs;
    for (const auto& [k, v] : s.params) {
      if (v.has_string_value()) {
        (*knobs.mutable_fields())[k].set_string_value(v.string_value());
      } else {
        (*knobs.mutable_fields())[k].set_number_value(
            v.has_double_value() ? v.double_value() : double(v.int_value()));
      }
    }
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(knobs, &json);
    absl::StrAppend(&schedule, schedule.empty() ? "" : ";", s.from, ":", json);
  }
  spec.set_name(absl::StrCat(study, "-replay-", number).substr(0, 64));
  spec.clear_search_space();
  auto* p = spec.add_search_space();
  p->set_name("schedule");
  p->mutable_categorical()->add_values(schedule);
  spec.mutable_scheduler()->Clear();
  spec.mutable_scheduler()->mutable_fifo();
  spec.mutable_searcher()->Clear();
  spec.mutable_searcher()->mutable_grid();
  spec.mutable_budget()->set_max_trials(1);
  spec.mutable_budget()->set_max_parallel_trials(1);
  (*spec.mutable_trial()->mutable_trainer()->mutable_fields())["steps"]
      .set_number_value(static_cast<double>(segments.back().to));
  std::ofstream out(out_file);
  out << "# Replays trial " << number << " of " << study
      << ": its PBT schedule in one trial.\n"
      << ToJson(spec) << "\n";
  if (!out) return Fail(absl::UnavailableError("cannot write " + out_file));
  std::cout << "wrote " << out_file << " (" << segments.size()
            << " segments); run it with: dialctl study create -f " << out_file
            << "\n";
  return 0;
}

int Watch(DialClient& client, const std::string& study, bool json) {
  const bool tty = isatty(STDOUT_FILENO);
  v1::StudyEvent last;
  auto status = client.WatchStudy(study, [&](const v1::StudyEvent& event) {
    last = event;
    if (json) {
      v1::WatchStudyResponse r;
      *r.mutable_event() = event;
      google::protobuf::util::JsonPrintOptions options;
      options.preserve_proto_field_names = true;
      std::string out;
      (void)google::protobuf::util::MessageToJsonString(r, &out, options);
      std::cout << out << std::endl;
    } else if (tty) {
      std::cout << "\r\033[K" << ProgressLine(event) << std::flush;
    } else if (event.kind() != v1::StudyEvent::TRIAL_REPORTED) {
      std::cout << ProgressLine(event) << "\n" << std::flush;
    }
    return true;
  });
  if (!json && tty) std::cout << "\n";
  if (!status.ok()) return Fail(status);
  if (!json) {
    std::cout << "study " << study << " "
              << absl::AsciiStrToLower(StudyStateName(last.study().state()))
              << "\n";
  }
  return 0;
}

std::vector<v1::TrialState> ParseStates(const std::string& text,
                                        absl::Status* status) {
  std::vector<v1::TrialState> states;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    v1::TrialState s;
    std::string upper = absl::AsciiStrToUpper(std::string(part));
    if (!v1::TrialState_Parse(upper, &s) || s == v1::TRIAL_STATE_UNSPECIFIED) {
      *status = absl::InvalidArgumentError(absl::StrCat(
          "--state: unknown trial state '", std::string(part),
          "'; use PENDING, RUNNING, COMPLETED, STOPPED, PAUSED or FAILED"));
      return {};
    }
    states.push_back(s);
  }
  return states;
}

// Runs `argv` and returns what it printed on stdout; its stderr passes
// through. FAILED_PRECONDITION when it exits non-zero.
absl::StatusOr<std::string> RunAndCapture(
    const std::vector<std::string>& argv) {
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int err =
      posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (err != 0) {
    close(out[0]);
    return absl::NotFoundError(
        absl::StrCat("cannot run ", argv[0], ": ", std::strerror(err)));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(argv[0], " failed (see its message above)"));
  }
  return text;
}

// The final, explicit evaluation of a trial on the held-out test split:
// dial-train loads the trial's latest checkpoint from the shared store and
// evaluates it here, so studies never see the test split.
int Evaluate(DialClient& client, const std::string& name, int64_t number) {
  auto study = client.GetStudy(name);
  if (!study.ok()) return Fail(study.status());
  if (!study->spec().trial().has_trainer()) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("study ", name,
                     " does not run the built-in trainer; evaluate its "
                     "trials with your own code")));
  }
  auto trial = client.GetTrial(name, number);
  if (!trial.ok()) return Fail(trial.status());
  if (trial->checkpoint().empty()) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("trial ", number, " has no checkpoint to evaluate")));
  }
  std::string root = absl::GetFlag(FLAGS_checkpoint_root);
  if (root.empty() && std::getenv(dial::kEnvCheckpointRoot)) {
    root = std::getenv(dial::kEnvCheckpointRoot);
  }
  if (root.empty()) {
    return Usage(
        "trials evaluate needs --checkpoint-root: the store the workers write "
        "to");
  }
  std::string knobs;
  (void)google::protobuf::util::MessageToJsonString(
      study->spec().trial().trainer(), &knobs);
  std::string trainer = absl::GetFlag(FLAGS_trainer);
  if (trainer.empty()) trainer = dial::DefaultTrainerPath();
  std::vector<std::string> argv = {
      trainer,
      "--evaluate=" + absl::GetFlag(FLAGS_split),
      "--restore=" + trial->checkpoint(),
      "--checkpoint_root=" + root,
      "--knobs=" + knobs,
      "--params=" + dial::ParamsJson(trial->params())};
  if (!absl::GetFlag(FLAGS_predictions).empty()) {
    argv.push_back("--predictions=" + absl::GetFlag(FLAGS_predictions));
  }
  auto output = RunAndCapture(argv);
  if (!output.ok()) return Fail(output.status());
  google::protobuf::Struct metrics;
  if (!google::protobuf::util::JsonStringToMessage(*output, &metrics).ok()) {
    return Fail(
        absl::InternalError("dial-train printed no metrics: " + *output));
  }
  (*metrics.mutable_fields())["trial"].set_number_value(
      static_cast<double>(number));
  (*metrics.mutable_fields())["checkpoint"].set_string_value(
      trial->checkpoint());
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(metrics) << "\n";
    return 0;
  }
  std::printf("trial %lld  checkpoint %s\n", static_cast<long long>(number),
              trial->checkpoint().c_str());
  for (const auto& [metric, value] : metrics.fields()) {
    if (value.has_number_value() && metric != "trial") {
      std::printf("  %-16s %.6g\n", metric.c_str(), value.number_value());
    }
  }
  return 0;
}

int Run(const std::vector<std::string>& args) {
  if (args.size() < 2) return Usage("missing command");
  const std::string& group = args[0];
  const std::string& verb = args[1];
  const bool json = absl::GetFlag(FLAGS_json);
  auto need = [&](size_t n) { return args.size() >= n; };

  std::string target = absl::GetFlag(FLAGS_scheduler);
  if (target.empty()) {
    const char* env = std::getenv("DIAL_SCHEDULER");
    target = env && *env ? env : "127.0.0.1:7070";
  }
  auto client_or = DialClient::Create(
      {target, absl::Seconds(absl::GetFlag(FLAGS_timeout_s))});
  if (!client_or.ok()) return Fail(client_or.status());
  DialClient& client = **client_or;

  if (group == "study") {
    if (verb == "create") {
      const std::string file = absl::GetFlag(FLAGS_f);
      if (file.empty()) return Usage("study create needs -f SPEC");
      auto spec = dial::LoadStudySpecFile(file);
      if (!spec.ok()) return Fail(spec.status());
      auto study = client.CreateStudy(*spec);
      if (!study.ok()) return Fail(study.status());
      if (json) {
        std::cout << ToJson(*study) << "\n";
      } else {
        std::cout << "created study " << study->name() << "\n";
      }
      return 0;
    }
    if (verb == "list") {
      auto studies = client.ListStudies();
      if (!studies.ok()) return Fail(studies.status());
      if (json) {
        v1::ListStudiesResponse r;
        for (auto& s : *studies) *r.add_studies() = s;
        std::cout << ToJson(r) << "\n";
      } else {
        PrintStudies(*studies);
      }
      return 0;
    }
    if (!need(3)) return Usage("study " + verb + " needs STUDY");
    const std::string& name = args[2];
    if (verb == "get" || verb == "stop" || verb == "update") {
      absl::StatusOr<v1::Study> study =
          verb == "get" ? client.GetStudy(name)
          : verb == "stop"
              ? client.StopStudy(name)
              : client.UpdateStudy(name, absl::GetFlag(FLAGS_max_trials),
                                   absl::GetFlag(FLAGS_max_parallel_trials));
      if (!study.ok()) return Fail(study.status());
      if (json) {
        std::cout << ToJson(*study) << "\n";
      } else {
        PrintStudy(*study);
      }
      return 0;
    }
    if (verb == "delete") {
      auto status = client.DeleteStudy(name);
      if (!status.ok()) return Fail(status);
      if (!json) std::cout << "deleted study " << name << "\n";
      return 0;
    }
    if (verb == "watch") return Watch(client, name, json);
    if (verb == "replay") {
      int64_t number;
      if (!need(4) || !absl::SimpleAtoi(args[3], &number) ||
          absl::GetFlag(FLAGS_o).empty()) {
        return Usage("study replay needs STUDY, a trial number and -o FILE");
      }
      return Lineage(client, name, number, absl::GetFlag(FLAGS_o));
    }
    return Usage("unknown command: study " + verb);
  }

  if (group == "trials") {
    if (!need(3)) return Usage("trials " + verb + " needs STUDY");
    const std::string& name = args[2];
    if (verb == "list") {
      absl::Status parse_status;
      auto states = ParseStates(absl::GetFlag(FLAGS_state), &parse_status);
      if (!parse_status.ok()) return Fail(parse_status);
      auto trials = client.ListAllTrials(name, states);
      if (!trials.ok()) return Fail(trials.status());
      if (json) {
        v1::ListTrialsResponse r;
        for (auto& t : *trials) *r.add_trials() = t;
        std::cout << ToJson(r) << "\n";
      } else {
        PrintTrials(*trials);
      }
      return 0;
    }
    if (verb == "best") {
      auto trials = client.GetBestTrials(name, absl::GetFlag(FLAGS_count));
      if (!trials.ok()) return Fail(trials.status());
      if (json) {
        v1::GetBestTrialsResponse r;
        for (auto& t : *trials) *r.add_trials() = t;
        std::cout << ToJson(r) << "\n";
      } else {
        PrintTrials(*trials);
      }
      return 0;
    }
    if (verb == "get") {
      int64_t number;
      if (!need(4) || !absl::SimpleAtoi(args[3], &number)) {
        return Usage("trials get needs STUDY and a trial number");
      }
      auto trial = client.GetTrial(name, number);
      if (!trial.ok()) return Fail(trial.status());
      if (json) {
        std::cout << ToJson(*trial) << "\n";
        return 0;
      }
      auto study = client.GetStudy(name);
      PrintTrial(*trial,
                 study.ok() ? study->spec().objective().metric() : "objective");
      return 0;
    }
    if (verb == "lineage") {
      int64_t number;
      if (!need(4) || !absl::SimpleAtoi(args[3], &number)) {
        return Usage("trials lineage needs STUDY and a trial number");
      }
      return Lineage(client, name, number, "");
    }
    if (verb == "evaluate") {
      int64_t number;
      if (!need(4) || !absl::SimpleAtoi(args[3], &number)) {
        return Usage("trials evaluate needs STUDY and a trial number");
      }
      return Evaluate(client, name, number);
    }
    return Usage("unknown command: trials " + verb);
  }

  if (group == "admin") {
    if (verb == "backup") {
      if (!need(3)) return Usage("admin backup needs PATH");
      // PATH is the scheduler's, so it is passed on as given: a relative
      // one is refused there rather than resolved against this directory.
      auto backup = client.BackupDatabase(args[2]);
      if (!backup.ok()) return Fail(backup.status());
      if (json) {
        std::cout << ToJson(*backup) << "\n";
      } else {
        std::cout << "backed up the database to " << backup->path() << " ("
                  << backup->bytes() << " bytes)\n";
      }
      return 0;
    }
    return Usage("unknown command: admin " + verb);
  }
  return Usage("unknown command: " + group);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  auto arg_storage = dial::DashesToUnderscores(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  return Run(args);
}
