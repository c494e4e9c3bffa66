// dialctl: the command-line client. Human-readable tables by default,
// --json for scripts; any error is one line on stderr and a non-zero exit.
// This file parses flags and holds the command table; what is printed comes
// from client/format.h, the PBT lineage and replay logic from
// client/lineage.h, the evaluation of trained models from
// client/dialctl_evaluate.h.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "client/dialctl_evaluate.h"
#include "client/dialctl_migrate.h"
#include "client/dialctl_notes.h"
#include "client/format.h"
#include "client/lineage.h"
#include "client/terminal_safe.h"
#include "common/export.h"
#include "common/flags.h"
#include "common/grpc_channel.h"
#include "common/spec.h"
#include "common/trial_protocol.h"

ABSL_FLAG(std::string, scheduler, "",
          "Scheduler address (default: $DIAL_SCHEDULER or 127.0.0.1:7070)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate: connect with TLS and check the scheduler's "
          "certificate against it (default: plaintext)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for a scheduler that requires one (with "
          "--tls-key and --tls-ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the scheduler's certificate instead of the host "
          "in --scheduler");
ABSL_FLAG(std::string, token, "",
          "Bearer token sent with every call (default: $DIAL_TOKEN; prefer "
          "the variable: a command line is visible in ps)");
ABSL_FLAG(bool, insecure, false,
          "Send the token without TLS to a scheduler not on this host");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables");
ABSL_FLAG(std::string, by, "owner", "For usage: owner or study");
ABSL_FLAG(absl::Duration, since, absl::ZeroDuration(),
          "For usage: only attempts that ended this long ago or later "
          "(e.g. 24h; 0: all)");
ABSL_FLAG(bool, csv, false, "For usage: CSV (seconds) instead of a table");
ABSL_FLAG(std::string, f, "",
          "Study spec file (YAML or JSON), for study create");
ABSL_FLAG(std::string, state, "",
          "Comma-separated trial states to list, e.g. COMPLETED,RUNNING");
ABSL_FLAG(int32_t, count, 5, "How many trials for trials best");
ABSL_FLAG(std::string, params, "",
          "For trials enqueue: a JSON object of parameter values, or a list");
ABSL_FLAG(int32_t, seeds, 3, "For study reevaluate: new seeds per trial");
ABSL_FLAG(double, top, 0.1,
          "For study importance: share of the completed trials counted as "
          "the best, in (0, 1)");
ABSL_FLAG(std::string, study, "",
          "For admin audit: only this study's events (default: all)");
ABSL_FLAG(int32_t, limit, 100,
          "For admin audit: the newest N events (0: every event)");
ABSL_FLAG(std::string, from, "",
          "For admin migrate: the database to copy (a SQLite path, "
          "sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME)");
ABSL_FLAG(std::string, to, "",
          "For admin migrate: the new, empty database to copy into");
ABSL_FLAG(std::string, db_password_file, "",
          "For admin migrate: a file whose first line is the PostgreSQL "
          "password (default: libpq's PGPASSFILE)");
ABSL_FLAG(int32_t, max_trials, 0, "New max_trials, for study update");
ABSL_FLAG(std::string, priority, "",
          "New priority (-100 to 100), for study update; empty: unchanged");
ABSL_FLAG(int32_t, max_parallel_trials, 0,
          "New max_parallel_trials, for study update");
ABSL_FLAG(int32_t, timeout_s, 30, "Deadline of each call, in seconds");
ABSL_FLAG(std::string, o, "",
          "Output file, for study replay and study export (export: default "
          "stdout)");
ABSL_FLAG(std::string, format, "csv", "For study export: csv or jsonl");
ABSL_FLAG(bool, history, false,
          "For study export: one row per reported step instead of per trial");
ABSL_FLAG(std::string, split, "test",
          "Split for trials evaluate: test (held out) or val");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Checkpoint store the workers write to, for trials evaluate "
          "(default: $DIAL_CHECKPOINT_ROOT)");
ABSL_FLAG(std::string, trainer, "",
          "Path of dial-train, for trials evaluate (default: next to "
          "dialctl, then the build tree, then PATH)");
ABSL_FLAG(std::string, checkpoint, "",
          "For trials download: this checkpoint id of the trial instead of "
          "its latest");
ABSL_FLAG(std::string, predictions, "",
          "For trials evaluate: write per-example predictions to this CSV");
ABSL_FLAG(std::string, service, "",
          "scheduler health: the gRPC service to ask about (default: the "
          "whole server)");

namespace {

namespace fs = std::filesystem;
using dial::client::DialClient;
namespace v1 = dial::v1;
namespace cli = dial::client;
namespace cli_eval = dial::cli;

// Positional arguments: GROUP VERB [ARGS...].
using Args = std::vector<std::string>;

// Standard output without the escaping (GuardTerminal), for dialctl's own
// cursor moves and exports into files and pipes.
std::ostream* raw_stdout = &std::cout;
std::ostream& Raw() { return *raw_stdout; }
using Handler = int (*)(DialClient& client, const Args& args);

struct Command {
  const char* group;
  const char* verb;
  // The arguments and flags after the verb, and what it does (lines split
  // by "\n"; may be empty), for the usage text.
  const char* synopsis;
  const char* help;
  // Whether the command's third word is a STUDY, checked before the handler
  // runs.
  bool takes_study;
  Handler handler;
};

int Fail(const absl::Status& status) {
  std::cerr << cli::FormatError(status);
  return 1;
}

std::string UsageText();

int Usage(const std::string& why) {
  std::cerr << "dialctl: " << why << "\n\n" << UsageText();
  return 2;
}

bool Json() { return absl::GetFlag(FLAGS_json); }

// Parses args[3] as a trial number.
bool TrialNumber(const Args& args, int64_t* number) {
  return args.size() >= 4 && absl::SimpleAtoi(args[3], number);
}

int StudyCreate(DialClient& client, const Args& args) {
  const std::string file = absl::GetFlag(FLAGS_f);
  if (file.empty()) return Usage("study create needs -f SPEC");
  auto spec = dial::LoadStudySpecFile(file);
  if (!spec.ok()) return Fail(spec.status());
  auto study = client.CreateStudy(*spec);
  if (!study.ok()) return Fail(study.status());
  if (Json()) {
    std::cout << cli::ToJson(*study) << "\n";
  } else {
    std::cout << "created study " << study->name() << "\n";
  }
  return 0;
}

int StudyList(DialClient& client, const Args& args) {
  auto studies = client.ListStudies();
  if (!studies.ok()) return Fail(studies.status());
  if (Json()) {
    v1::ListStudiesResponse r;
    for (auto& s : *studies) *r.add_studies() = s;
    std::cout << cli::ToJson(r) << "\n";
  } else {
    std::cout << cli::FormatStudies(*studies);
  }
  return 0;
}

int PrintStudy(const absl::StatusOr<v1::Study>& study) {
  if (!study.ok()) return Fail(study.status());
  if (Json()) {
    std::cout << cli::ToJson(*study) << "\n";
  } else {
    std::cout << cli::FormatStudy(*study);
  }
  return 0;
}

int StudyGet(DialClient& client, const Args& args) {
  return PrintStudy(client.GetStudy(args[2]));
}

int StudyStop(DialClient& client, const Args& args) {
  return PrintStudy(client.StopStudy(args[2]));
}

int StudyUpdate(DialClient& client, const Args& args) {
  std::optional<int32_t> priority;
  if (const std::string p = absl::GetFlag(FLAGS_priority); !p.empty()) {
    int32_t n = 0;
    if (!absl::SimpleAtoi(p, &n)) {
      return Fail(absl::InvalidArgumentError("--priority: '" + p +
                                             "' is not a whole number"));
    }
    priority = n;
  }
  return PrintStudy(client.UpdateStudy(args[2], absl::GetFlag(FLAGS_max_trials),
                                       absl::GetFlag(FLAGS_max_parallel_trials),
                                       priority));
}

int StudyDelete(DialClient& client, const Args& args) {
  auto status = client.DeleteStudy(args[2]);
  if (!status.ok()) return Fail(status);
  if (!Json()) std::cout << "deleted study " << args[2] << "\n";
  return 0;
}

int StudyWatch(DialClient& client, const Args& args) {
  const std::string& study = args[2];
  const bool json = Json();
  const bool tty = isatty(STDOUT_FILENO);
  v1::StudyEvent last;
  auto status = client.WatchStudy(study, [&](const v1::StudyEvent& event) {
    last = event;
    if (json) {
      std::cout << cli::WatchEventJson(event) << std::endl;
    } else if (tty) {
      // The cursor moves are dialctl's own; the line is escaped.
      std::cout << std::flush;
      Raw() << "\r\033[K" << std::flush;
      std::cout << cli::ProgressLine(event) << std::flush;
    } else if (event.kind() != v1::StudyEvent::TRIAL_REPORTED) {
      std::cout << cli::ProgressLine(event) << "\n" << std::flush;
    }
    return true;
  });
  if (!json && tty) std::cout << "\n";
  if (!status.ok()) return Fail(status);
  if (!json) {
    std::cout << "study " << study << " "
              << absl::AsciiStrToLower(
                     cli::StudyStateName(last.study().state()))
              << "\n";
  }
  return 0;
}

// The PBT schedule behind trial `number`, its trials fetched one by one.
absl::StatusOr<std::vector<cli::ScheduleSegment>> FetchSchedule(
    DialClient& client, const std::string& study, int64_t number) {
  auto trial = client.GetTrial(study, number);
  if (!trial.ok()) return trial.status();
  return cli::PbtSchedule(
      *trial, [&](int64_t source) { return client.GetTrial(study, source); });
}

int StudyReplay(DialClient& client, const Args& args) {
  const std::string& study = args[2];
  const std::string out_file = absl::GetFlag(FLAGS_o);
  int64_t number;
  if (!TrialNumber(args, &number) || out_file.empty()) {
    return Usage("study replay needs STUDY, a trial number and -o FILE");
  }
  auto segments = FetchSchedule(client, study, number);
  if (!segments.ok()) return Fail(segments.status());
  // Replay: the study's spec, one trial, the schedule as a trainer knob.
  auto studied = client.GetStudy(study);
  if (!studied.ok()) return Fail(studied.status());
  auto spec = cli::ReplaySpec(study, number, studied->spec(), *segments);
  if (!spec.ok()) return Fail(spec.status());
  std::ofstream out(out_file);
  out << cli::ReplayFile(study, number, *spec);
  if (!out) return Fail(absl::UnavailableError("cannot write " + out_file));
  std::cout << "wrote " << out_file << " (" << segments->size()
            << " segments); run it with: dialctl study create -f " << out_file
            << "\n";
  return 0;
}

int StudyNote(DialClient& client, const Args& args) {
  absl::Status s = dial::cli::RunNote(client, args[2], std::nullopt,
                                      {args.begin() + 3, args.end()}, Json(),
                                      std::cin, std::cout);
  return s.ok() ? 0 : Fail(s);
}

int TrialsNote(DialClient& client, const Args& args) {
  int64_t number = 0;
  if (!TrialNumber(args, &number)) return Usage("trials note needs STUDY N");
  absl::Status s = dial::cli::RunNote(client, args[2], number,
                                      {args.begin() + 4, args.end()}, Json(),
                                      std::cin, std::cout);
  return s.ok() ? 0 : Fail(s);
}

int TrialsList(DialClient& client, const Args& args) {
  auto states = cli::ParseTrialStates(absl::GetFlag(FLAGS_state));
  if (!states.ok()) return Fail(states.status());
  auto trials = client.ListAllTrials(args[2], *states);
  if (!trials.ok()) return Fail(trials.status());
  if (Json()) {
    v1::ListTrialsResponse r;
    for (auto& t : *trials) *r.add_trials() = t;
    std::cout << cli::ToJson(r) << "\n";
  } else {
    std::cout << cli::FormatTrials(*trials);
  }
  return 0;
}

int TrialsEnqueue(DialClient& client, const Args& args) {
  if (absl::GetFlag(FLAGS_params).empty()) {
    return Usage("trials enqueue needs --params=JSON");
  }
  auto study = client.GetStudy(args[2]);
  if (!study.ok()) return Fail(study.status());
  auto configs =
      cli::ParseConfigurations(study->spec(), absl::GetFlag(FLAGS_params));
  if (!configs.ok()) return Fail(configs.status());
  auto queued = client.EnqueueTrials(args[2], *configs);
  if (!queued.ok()) return Fail(queued.status());
  if (Json()) {
    std::cout << cli::ToJson(*queued) << "\n";
  } else {
    std::cout << queued->queued_size() << " configurations queued ("
              << queued->waiting() << " waiting in " << args[2] << ")\n";
  }
  return 0;
}

// --top as a count of trials (the flag is shared with importance's share).
bool TopCount(int32_t* top) {
  const double t = absl::GetFlag(FLAGS_top);
  if (!(t >= 1 && t <= 100 && t == std::floor(t))) return false;
  *top = static_cast<int32_t>(t);
  return true;
}

int StudyReevaluate(DialClient& client, const Args& args) {
  int32_t top;
  if (!TopCount(&top)) {
    return Usage("study reevaluate needs --top=K (1 to 100 best trials)");
  }
  auto r = client.ReevaluateTrials(args[2], top, absl::GetFlag(FLAGS_seeds));
  if (!r.ok()) return Fail(r.status());
  if (Json()) {
    std::cout << cli::ToJson(*r) << "\n";
  } else {
    std::cout << r->queued_size() << " re-evaluations queued; max_trials is "
              << r->max_trials()
              << " now. When they finish, `dialctl trials best " << args[2]
              << "` ranks by the mean over seeds.\n";
  }
  return 0;
}

int TrialsBest(DialClient& client, const Args& args) {
  auto best = client.GetFront(args[2], absl::GetFlag(FLAGS_count));
  if (!best.ok()) return Fail(best.status());
  if (Json()) {
    std::cout << cli::ToJson(*best) << "\n";
  } else {
    std::cout << cli::FormatBest(*best);
  }
  return 0;
}

int StudyExport(DialClient& client, const Args& args) {
  auto format = dial::ParseExportFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return Fail(format.status());
  auto study = client.GetStudy(args[2]);
  if (!study.ok()) return Fail(study.status());
  auto trials = client.ListAllTrials(args[2], {});
  if (!trials.ok()) return Fail(trials.status());
  const bool history = absl::GetFlag(FLAGS_history);
  if (history) {
    for (auto& t : *trials) {
      auto full = client.GetTrial(args[2], t.number());
      if (!full.ok()) return Fail(full.status());
      t = std::move(*full);
    }
  }
  const std::string text =
      dial::ExportTrials(study->spec(), *trials, *format, history);
  const std::string out_file = absl::GetFlag(FLAGS_o);
  if (out_file.empty()) {
    // Data, written as it is into a file or a pipe; escaped on a terminal.
    (isatty(STDOUT_FILENO) ? std::cout : Raw()) << text;
    return 0;
  }
  std::ofstream out(out_file);
  if (!(out << text) || !out.flush()) {
    return Fail(absl::UnavailableError("cannot write " + out_file));
  }
  return 0;
}

int StudyImportance(DialClient& client, const Args& args) {
  auto r = client.GetParameterImportance(args[2], absl::GetFlag(FLAGS_top));
  if (!r.ok()) return Fail(r.status());
  std::cout << (Json() ? cli::ToJson(*r) + "\n" : cli::FormatImportance(*r));
  return 0;
}

int TrialsGet(DialClient& client, const Args& args) {
  const std::string& name = args[2];
  int64_t number;
  if (!TrialNumber(args, &number)) {
    return Usage("trials get needs STUDY and a trial number");
  }
  auto trial = client.GetTrial(name, number);
  if (!trial.ok()) return Fail(trial.status());
  if (Json()) {
    std::cout << cli::ToJson(*trial) << "\n";
    return 0;
  }
  auto study = client.GetStudy(name);
  std::cout << cli::FormatTrial(
      *trial, study.ok() ? study->spec().objective().metric() : "objective");
  return 0;
}

int TrialsLineage(DialClient& client, const Args& args) {
  int64_t number;
  if (!TrialNumber(args, &number)) {
    return Usage("trials lineage needs STUDY and a trial number");
  }
  auto segments = FetchSchedule(client, args[2], number);
  if (!segments.ok()) return Fail(segments.status());
  std::cout << cli::FormatSchedule(*segments);
  return 0;
}

// Options of trials evaluate and study ensemble, from the flags.
cli_eval::EvaluateOptions EvaluateFlags() {
  cli_eval::EvaluateOptions o;
  o.split = absl::GetFlag(FLAGS_split);
  o.trainer = absl::GetFlag(FLAGS_trainer);
  o.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  o.predictions = absl::GetFlag(FLAGS_predictions);
  o.json = Json();
  return o;
}

int TrialsEvaluate(DialClient& client, const Args& args) {
  int64_t number;
  if (!TrialNumber(args, &number)) {
    return Usage("trials evaluate needs STUDY and a trial number");
  }
  const absl::Status status = cli_eval::EvaluateTrial(
      client, args[2], number, EvaluateFlags(), std::cout);
  return status.ok() ? 0 : Fail(status);
}

int StudyEnsemble(DialClient& client, const Args& args) {
  int32_t top;
  if (!TopCount(&top) || top < 2) {
    return Usage("study ensemble needs --top=K (2 to 100 best trials)");
  }
  const absl::Status status = cli_eval::EvaluateEnsemble(
      client, args[2], top, EvaluateFlags(), std::cout);
  return status.ok() ? 0 : Fail(status);
}

// Fetches a trial's checkpoint from the scheduler (no shared filesystem
// needed) into DIR/<last part of its id>.
int TrialsDownload(DialClient& client, const Args& args) {
  int64_t number;
  if (!TrialNumber(args, &number) || args.size() < 5) {
    return Usage("trials download needs STUDY, a trial number and DIR");
  }
  const std::string& name = args[2];
  std::string id = absl::GetFlag(FLAGS_checkpoint);
  if (id.empty()) {
    auto trial = client.GetTrial(name, number);
    if (!trial.ok()) return Fail(trial.status());
    id = trial->checkpoint();
    if (id.empty()) {
      return Fail(absl::FailedPreconditionError(
          absl::StrCat("trial ", number, " has no checkpoint yet")));
    }
  }
  const std::string dest =
      (fs::path(args[4]) / fs::path(id).filename()).string();
  auto got = client.DownloadCheckpoint(name, id, dest);
  if (!got.ok()) return Fail(got.status());
  if (Json()) {
    std::cout << absl::StrCat("{\"checkpoint\":\"", id, "\",\"path\":\"", dest,
                              "\",\"bytes\":", got->bytes_total, "}\n");
  } else {
    std::cout << "downloaded checkpoint " << id << " to " << dest << " ("
              << got->bytes_total << " bytes)\n";
  }
  return 0;
}

int AdminBackup(DialClient& client, const Args& args) {
  if (args.size() < 3) return Usage("admin backup needs NAME");
  // NAME is a file name in the scheduler's --backup-dir; the scheduler
  // checks it (no directories) and answers with the copy's absolute path.
  auto backup = client.BackupDatabase(args[2]);
  if (!backup.ok()) return Fail(backup.status());
  if (Json()) {
    std::cout << cli::ToJson(*backup) << "\n";
  } else {
    std::cout << "backed up the database to " << backup->path() << " ("
              << backup->bytes() << " bytes)\n";
  }
  return 0;
}

// Offline: the scheduler is not asked (stop it first).
int AdminMigrate(DialClient&, const Args&) {
  absl::Status s = dial::cli::MigrateDatabases(
      {absl::GetFlag(FLAGS_from), absl::GetFlag(FLAGS_to),
       absl::GetFlag(FLAGS_db_password_file), Json()},
      std::cout);
  if (absl::IsInvalidArgument(s)) return Usage(std::string(s.message()));
  return s.ok() ? 0 : Fail(s);
}

int AdminAudit(DialClient& client, const Args& args) {
  const int32_t limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Usage("--limit must be 0 (every event) or more");
  constexpr int32_t kMaxPage = 1000;
  v1::ListAuditEventsResponse all;
  std::string token;
  do {
    const int32_t want =
        limit == 0 ? kMaxPage : std::min(kMaxPage, limit - all.events_size());
    auto page = client.ListAuditEvents(absl::GetFlag(FLAGS_study), want, token);
    if (!page.ok()) return Fail(page.status());
    for (auto& e : *page->mutable_events()) *all.add_events() = std::move(e);
    if (!page->next_page_token().empty() && page->next_page_token() == token) {
      return Fail(absl::InternalError(
          "ListAuditEvents: the scheduler returned the same page token twice"));
    }
    token = page->next_page_token();
  } while (!token.empty() && (limit == 0 || all.events_size() < limit));
  if (Json()) {
    std::cout << cli::ToJson(all) << "\n";
  } else {
    std::cout << cli::FormatAuditEvents(
        {all.events().begin(), all.events().end()});
  }
  return 0;
}

int SchedulerHealth(DialClient& client, const Args& args) {
  absl::Status status = client.CheckHealth(absl::GetFlag(FLAGS_service));
  if (!status.ok()) return Fail(status);
  std::cout << "SERVING\n";
  return 0;
}

int UsageCommand(DialClient& client, const Args& args) {
  const absl::Duration since = absl::GetFlag(FLAGS_since);
  if (since < absl::ZeroDuration()) {
    return Fail(absl::InvalidArgumentError("--since: must not be negative"));
  }
  auto r = client.GetUsage(absl::GetFlag(FLAGS_by),
                           since == absl::ZeroDuration() ? absl::InfinitePast()
                                                         : absl::Now() - since);
  if (!r.ok()) return Fail(r.status());
  if (Json()) {
    std::cout << cli::ToJson(*r) << "\n";
  } else {
    std::cout << cli::FormatUsage(*r, absl::GetFlag(FLAGS_by) == "study",
                                  absl::GetFlag(FLAGS_csv));
  }
  return 0;
}

int SchedulerWorkers(DialClient& client, const Args& args) {
  auto r = client.ListWorkers();
  if (!r.ok()) return Fail(r.status());
  if (Json()) {
    std::cout << cli::ToJson(*r) << "\n";
  } else {
    std::cout << cli::FormatWorkers({r->workers().begin(), r->workers().end()});
  }
  return 0;
}

// In the order of the usage text.
constexpr Command kCommands[] = {
    {"study", "create", "-f SPEC", "create a study from a YAML or JSON spec",
     false, StudyCreate},
    {"study", "list", "", "the studies you may read, with owners", false,
     StudyList},
    {"study", "get", "STUDY", "show a study", true, StudyGet},
    {"study", "watch", "STUDY", "live progress until the study ends", true,
     StudyWatch},
    {"study", "stop", "STUDY", "stop suggesting new trials", true, StudyStop},
    {"study", "update",
     "STUDY [--max-trials=N] [--max-parallel-trials=N] [--priority=N]", "",
     true, StudyUpdate},
    {"study", "note", "STUDY [TEXT...]",
     "show the study's note, or set it (\"-\": read\n"
     "it from stdin; \"\": clear it)",
     true, StudyNote},
    {"study", "delete", "STUDY", "delete a study and its trials", true,
     StudyDelete},
    {"study", "export", "STUDY [--format=csv|jsonl] [--history] [-o FILE]",
     "every trial (params, state, value, final\n"
     "metrics), or with --history every reported\n"
     "step, as CSV or JSON lines",
     true, StudyExport},
    {"study", "importance", "STUDY [--top=Q]",
     "how much each parameter matters (PED-ANOVA\n"
     "over the completed trials; Q: the share\n"
     "counted as the best, default 0.1)",
     true, StudyImportance},
    {"trials", "list", "STUDY [--state=S]",
     "list trials (S: PENDING,RUNNING,...)", true, TrialsList},
    {"trials", "best", "STUDY [--count=N]",
     "the best completed trials (several objectives:\n"
     "the Pareto front and its hypervolume)",
     true, TrialsBest},
    {"trials", "enqueue", "STUDY --params=JSON",
     "configurations to run before the searcher's\n"
     "own ({\"lr\": 0.01, ...} or a list of them)",
     true, TrialsEnqueue},
    {"study", "ensemble", "STUDY --top=K [--split=test]",
     "average the predictions of the best K trials'\n"
     "checkpoints (dial-train here; downloads them\n"
     "unless --checkpoint-root has them) and compare\n"
     "with the best single trial",
     true, StudyEnsemble},
    {"study", "reevaluate", "STUDY --top=K [--seeds=S]",
     "run the best K configurations again with S\n"
     "new seeds each (default 3); then trials best\n"
     "ranks by the mean over seeds",
     true, StudyReevaluate},
    {"trials", "get", "STUDY N", "one trial with its metric history", true,
     TrialsGet},
    {"trials", "note", "STUDY N [TEXT...]",
     "show a trial's note, or set it (as study note)", true, TrialsNote},
    {"trials", "lineage", "STUDY N",
     "the hyperparameter schedule behind a PBT trial", true, TrialsLineage},
    {"trials", "evaluate", "STUDY N [--split=test] [--checkpoint-root=DIR]",
     "evaluate a trial's latest checkpoint on the\n"
     "held-out test split (runs dial-train here;\n"
     "downloads the checkpoint unless DIR has it)",
     true, TrialsEvaluate},
    {"trials", "download", "STUDY N DIR [--checkpoint=ID]",
     "fetch a trial's latest checkpoint from the\n"
     "scheduler into DIR",
     true, TrialsDownload},
    {"study", "replay", "STUDY N -o FILE",
     "a spec that retrains that schedule in one trial", true, StudyReplay},
    {"admin", "backup", "NAME",
     "copy the scheduler's database, while it runs,\n"
     "to a new file NAME (no directories) in the\n"
     "scheduler's --backup-dir; prints its path\n"
     "(admins; raise --timeout-s for a large one)",
     false, AdminBackup},
    {"scheduler", "health", "[--service=NAME]",
     "exit 0 when the scheduler serves (gRPC health,\n"
     "no token needed; the Kubernetes probes)",
     false, SchedulerHealth},
    {"scheduler", "workers", "",
     "the registered workers: slots, GPUs, last\n"
     "heartbeat, running trials (admins, viewers)",
     false, SchedulerWorkers},
    {"usage", "", "[--by=owner|study] [--since=DURATION] [--csv]",
     "slot-, GPU- and CPU-hours of worker trials'\n"
     "attempts, by owner or study (a user: their own)",
     false, UsageCommand},
    {"admin", "migrate", "--from=DB --to=DB",
     "copy a stopped scheduler's database into a new,\n"
     "empty one (SQLite to PostgreSQL or back) and\n"
     "verify every study's trial and report counts\n"
     "[--db-password-file=F]",
     false, AdminMigrate},
    {"admin", "audit", "[--study=S] [--limit=N]",
     "the audit log, newest first (admins; --limit=0\n"
     "for every event)",
     false, AdminAudit},
};

// Groups whose every command takes a STUDY: an unknown verb with no third
// word is reported as a missing STUDY, as for a known one.
bool GroupTakesStudy(const std::string& group) {
  return group == "study" || group == "trials";
}

std::string UsageText() {
  // Synopses in a 30-character column, help beside it (or below a longer
  // synopsis), continuation lines under the help.
  constexpr size_t kColumn = 30;
  const std::string indent(2 + kColumn, ' ');
  std::string text =
      "dialctl: the Dial command-line client\n\n"
      "usage: dialctl [--scheduler=ADDR] [--json] [--timeout-s=N]\n"
      "               [--tls-ca=PEM [--tls-cert=PEM --tls-key=PEM]]\n"
      "               [--tls-server-name=NAME] [--token=T] COMMAND ARGS\n\n"
      "The token defaults to $DIAL_TOKEN, the address to $DIAL_SCHEDULER.\n\n";
  for (const Command& c : kCommands) {
    std::string line = absl::StrCat("  ", c.group, " ", c.verb);
    if (*c.synopsis != '\0') absl::StrAppend(&line, " ", c.synopsis);
    bool first = true;
    for (absl::string_view help :
         absl::StrSplit(c.help, '\n', absl::SkipEmpty())) {
      if (first && line.size() < indent.size()) {
        line.resize(indent.size(), ' ');
      } else {
        absl::StrAppend(&line, "\n", indent);
      }
      absl::StrAppend(&line, help);
      first = false;
    }
    absl::StrAppend(&text, line, "\n");
  }
  return text;
}

int Run(const Args& given) {
  Args args = given;
  // The one command of one word.
  if (args.size() == 1 && args[0] == "usage") args.push_back("");
  if (args.size() < 2) return Usage("missing command");
  const std::string& group = args[0];
  const std::string& verb = args[1];

  const Command* command = nullptr;
  bool known_group = false;
  for (const Command& c : kCommands) {
    if (group != c.group) continue;
    known_group = true;
    if (verb == c.verb) command = &c;
  }
  if (args.size() < 3 &&
      (command != nullptr ? command->takes_study : GroupTakesStudy(group))) {
    return Usage(absl::StrCat(group, " ", verb, " needs STUDY"));
  }
  if (command == nullptr) {
    return Usage(known_group
                     ? absl::StrCat("unknown command: ", group, " ", verb)
                     : "unknown command: " + group);
  }
  // After the usage checks, so a usage error is not hidden behind an
  // unreadable certificate file.
  std::string target = absl::GetFlag(FLAGS_scheduler);
  if (target.empty()) {
    const char* env = std::getenv("DIAL_SCHEDULER");
    target = env && *env ? env : "127.0.0.1:7070";
  }
  cli::DialClientOptions options;
  options.target = target;
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.token = dial::TokenFromFlagOrEnv(absl::GetFlag(FLAGS_token));
  options.insecure = absl::GetFlag(FLAGS_insecure);
  auto client_or = DialClient::Create(options);
  if (!client_or.ok()) return Fail(client_or.status());
  return command->handler(**client_or, args);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = UsageText();
  absl::SetProgramUsageMessage(usage);
  // Whatever dialctl prints from here on has its control characters
  // escaped (client/terminal_safe.h).
  raw_stdout = &dial::cli::GuardTerminal();
  auto arg_storage = dial::DashesToUnderscores(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  Args args(positional.begin() + 1, positional.end());
  return Run(args);
}
