// dial-replay: a trial command that replays recorded learning curves
// (bench/curves/FORMAT.md) through the trial protocol, at accelerated time.
// The worker runs it like any command trial; the scheduler's decisions
// (stop, pause and resume, exploit) apply to the recorded curve of the
// configuration nearest to the trial's parameters. docs/testing.md.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/trial_protocol.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "replay/curve_table.h"

ABSL_FLAG(std::string, table, "", "The curve table to replay (CSV or .gz)");
ABSL_FLAG(std::string, resource, "steps",
          "What the reported step counts: steps (the table's) or "
          "milliseconds (elapsed_s, for cost-aware budgets)");
ABSL_FLAG(double, speedup, 0,
          "Wait elapsed_s/speedup between reports (0: no waiting)");

namespace fs = std::filesystem;
using dial::replay::Config;
using dial::replay::CurvePoint;
using dial::replay::CurveTable;

namespace {

int Fail(const std::string& message, int code) {
  std::cerr << "dial-replay: " << message << std::endl;
  return code;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

absl::StatusOr<std::map<std::string, dial::replay::Value>> ParseParams(
    const std::string& json) {
  google::protobuf::Struct object;
  if (!google::protobuf::util::JsonStringToMessage(json.empty() ? "{}" : json,
                                                   &object)
           .ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dial::kEnvTrialParams, " is not a JSON object"));
  }
  std::map<std::string, dial::replay::Value> params;
  for (const auto& [name, v] : object.fields()) {
    if (v.has_number_value()) {
      params[name] = v.number_value();
    } else if (v.has_string_value()) {
      params[name] = v.string_value();
    } else if (v.has_bool_value()) {
      params[name] = v.bool_value() ? "true" : "false";
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "': not a number or a string"));
    }
  }
  return params;
}

// Where a replay stands: the configuration whose curve it follows and the
// table step it has reached. A checkpoint file holds exactly this.
struct Position {
  int64_t config = 0;
  int64_t table_step = 0;
};

absl::StatusOr<Position> ReadPosition(const fs::path& path) {
  std::ifstream in(path);
  Position p;
  if (!(in >> p.config >> p.table_step)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path.string(), " is not a replay's"));
  }
  return p;
}

class Replayer {
 public:
  Replayer(const CurveTable& table, bool milliseconds, double speedup)
      : table_(table), milliseconds_(milliseconds), speedup_(speedup) {}

  // The step a point is reported at: its own, or its elapsed milliseconds
  // (rising: at least one more than the last).
  int64_t Advance(const CurvePoint& p) {
    last_ = milliseconds_
                ? std::max<int64_t>(std::llround(p.elapsed_s * 1000), last_ + 1)
                : p.step;
    return last_;
  }

  int Run(Position at, std::optional<dial::TrialPipe> pipe) {
    const std::string dir = Env(dial::kEnvCheckpointDir);
    const Config* config = table_.Find(at.config);
    double waited_s = 0;
    bool reported = false;
    for (size_t i = 0; i < config->points.size(); ++i) {
      const CurvePoint& p = config->points[i];
      if (p.step <= at.table_step) {
        waited_s = p.elapsed_s;
        if (!reported) (void)Advance(p);  // what a resumed run reported
        continue;
      }
      if (speedup_ > 0) {
        std::this_thread::sleep_for(
            std::chrono::duration<double>((p.elapsed_s - waited_s) / speedup_));
      }
      waited_s = p.elapsed_s;
      dial::TrialReport report;
      report.step = Advance(p);
      reported = true;
      report.metrics = p.metrics;
      report.metrics["elapsed_s"] = p.elapsed_s;
      report.metrics["config_id"] = static_cast<double>(config->id);
      report.metrics["table_step"] = static_cast<double>(p.step);
      if (!dir.empty()) {
        const fs::path file =
            fs::path(dir) / ("replay-" + std::to_string(report.step));
        std::error_code ec;
        fs::create_directories(dir, ec);
        std::ofstream(file) << config->id << " " << p.step << "\n";
        report.checkpoint = file.string();
      }
      if (!pipe) {
        std::cout << dial::EncodeReport(report) << std::endl;
        continue;
      }
      auto decision = pipe->Send(report);
      if (!decision.ok())
        return Fail(std::string(decision.status().message()), 1);
      if (decision->action == "STOP" || decision->action == "PAUSE") return 0;
      if (decision->action != "EXPLOIT") continue;
      // The donor's curve goes on from here: a table holds curves of fixed
      // hyperparameters, so the new values change nothing recorded.
      auto donor = ReadPosition(fs::path(Env(dial::kEnvCheckpointRoot)) /
                                decision->checkpoint);
      if (!donor.ok()) return Fail(std::string(donor.status().message()), 1);
      const Config* next = table_.Find(donor->config);
      if (next == nullptr) {
        return Fail(absl::StrCat("exploit: config_id ", donor->config,
                                 " is not in the table"),
                    1);
      }
      // It goes on from its own step: the donor's checkpoint may be from a
      // later step (a finished donor), past which nothing is recorded.
      at.table_step = p.step;
      config = next;
      i = static_cast<size_t>(-1);
    }
    return 0;
  }

 private:
  const CurveTable& table_;
  const bool milliseconds_;
  const double speedup_;
  int64_t last_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "dial-replay --table=TABLE [--resource=steps|milliseconds] "
      "[--speedup=N]: a trial command replaying recorded curves");
  absl::ParseCommandLine(argc, argv);
  const std::string resource = absl::GetFlag(FLAGS_resource);
  if (resource != "steps" && resource != "milliseconds") {
    return Fail("--resource: '" + resource + "' is not steps or milliseconds",
                2);
  }
  if (absl::GetFlag(FLAGS_table).empty()) return Fail("--table: missing", 2);
  auto table = CurveTable::Load(absl::GetFlag(FLAGS_table));
  if (!table.ok()) return Fail(std::string(table.status().message()), 2);
  auto params = ParseParams(Env(dial::kEnvTrialParams));
  if (!params.ok()) return Fail(std::string(params.status().message()), 2);

  Position at;
  const std::string restore = Env(dial::kEnvRestoreCheckpoint);
  if (!restore.empty()) {
    auto p = ReadPosition(fs::path(Env(dial::kEnvCheckpointRoot)) / restore);
    if (!p.ok()) return Fail(std::string(p.status().message()), 1);
    at = *p;
  } else {
    auto nearest = table->Nearest(*params);
    if (!nearest.ok()) return Fail(std::string(nearest.status().message()), 2);
    at.config = (*nearest)->id;
  }
  if (table->Find(at.config) == nullptr) {
    return Fail(absl::StrCat("checkpoint ", restore, ": config_id ", at.config,
                             " is not in the table"),
                1);
  }
  Replayer replayer(*table, resource == "milliseconds",
                    absl::GetFlag(FLAGS_speedup));
  return replayer.Run(at, dial::TrialPipe::FromEnv());
}
