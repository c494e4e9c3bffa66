#include "client/dialctl_evaluate.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "client/format.h"
#include "common/flags.h"
#include "common/process.h"
#include "common/status.h"
#include "common/trial_protocol.h"

namespace dial::cli {
namespace {

namespace fs = std::filesystem;

// Runs `argv` and returns what it printed on stdout; its stderr passes
// through. FAILED_PRECONDITION when it exits non-zero.
absl::StatusOr<std::string> RunAndCapture(
    const std::vector<std::string>& argv) {
  auto out = MakePipe();
  if (!out.ok()) return absl::InternalError("pipe failed");
  SpawnOptions options;
  options.argv = argv;
  options.stdout_fd = ChildFd::Fd(out->write.get());
  auto pid = Spawn(options);
  out->write.reset();
  if (!pid.ok()) {
    return absl::IsInvalidArgument(pid.status())
               ? pid.status()
               : absl::NotFoundError(pid.status().message());
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out->read.get(), buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  out->read.reset();
  auto status = WaitForExit(*pid);
  if (!status.ok() || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(argv[0], " failed (see its message above)"));
  }
  return text;
}

// Where dial-train reads checkpoints: --checkpoint-root (or
// $DIAL_CHECKPOINT_ROOT) when it holds them all, else a temporary root the
// scheduler's copies are downloaded into, removed afterwards.
class CheckpointRoot {
 public:
  ~CheckpointRoot() {
    std::error_code ec;
    if (!temp_.empty()) fs::remove_all(temp_, ec);
  }
  absl::Status Fetch(client::DialClient& client, const std::string& study,
                     const std::vector<std::string>& ids,
                     const std::string& root) {
    path_ = root;
    if (path_.empty() && std::getenv(kEnvCheckpointRoot)) {
      path_ = std::getenv(kEnvCheckpointRoot);
    }
    std::error_code ec;
    bool all = !path_.empty();
    for (const auto& id : ids)
      all = all && fs::exists(fs::path(path_) / id, ec);
    if (all) return absl::OkStatus();
    temp_ = (fs::temp_directory_path() / "dialctl-evaluate-XXXXXX").string();
    if (mkdtemp(temp_.data()) == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "cannot make a temporary directory: ", std::strerror(errno)));
    }
    path_ = temp_;
    for (const auto& id : ids) {
      auto got =
          client.DownloadCheckpoint(study, id, (fs::path(path_) / id).string());
      if (!got.ok()) return got.status();
    }
    return absl::OkStatus();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_, temp_;
};

std::string Trainer(const EvaluateOptions& options) {
  return options.trainer.empty() ? DefaultTrainerPath() : options.trainer;
}

// The study's trainer knobs, as dial-train's --knobs takes them.
std::string Knobs(const v1::Study& study) {
  std::string knobs;
  (void)google::protobuf::util::MessageToJsonString(
      study.spec().trial().trainer(), &knobs);
  return knobs;
}

// Runs dial-train and parses the metrics it prints.
absl::StatusOr<google::protobuf::Struct> RunTrainer(
    const std::vector<std::string>& argv) {
  DIAL_ASSIGN_OR_RETURN(std::string output, RunAndCapture(argv));
  google::protobuf::Struct metrics;
  if (!google::protobuf::util::JsonStringToMessage(output, &metrics).ok()) {
    return absl::InternalError("dial-train printed no metrics: " + output);
  }
  return metrics;
}

}  // namespace

absl::Status EvaluateTrial(client::DialClient& client, const std::string& name,
                           int64_t number, const EvaluateOptions& options,
                           std::ostream& out) {
  auto study = client.GetStudy(name);
  if (!study.ok()) return study.status();
  if (!study->spec().trial().has_trainer()) {
    return absl::FailedPreconditionError(
        absl::StrCat("study ", name,
                     " does not run the built-in trainer; evaluate its "
                     "trials with your own code"));
  }
  auto trial = client.GetTrial(name, number);
  if (!trial.ok()) return trial.status();
  if (trial->checkpoint().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trial ", number, " has no checkpoint to evaluate"));
  }
  CheckpointRoot root;
  DIAL_RETURN_IF_ERROR(
      root.Fetch(client, name, {trial->checkpoint()}, options.checkpoint_root));
  std::vector<std::string> argv = {Trainer(options),
                                   "--evaluate=" + options.split,
                                   "--restore=" + trial->checkpoint(),
                                   "--checkpoint_root=" + root.path(),
                                   "--knobs=" + Knobs(*study),
                                   "--params=" + ParamsJson(trial->params())};
  if (!options.predictions.empty()) {
    argv.push_back("--predictions=" + options.predictions);
  }
  DIAL_ASSIGN_OR_RETURN(google::protobuf::Struct metrics, RunTrainer(argv));
  (*metrics.mutable_fields())["trial"].set_number_value(
      static_cast<double>(number));
  (*metrics.mutable_fields())["checkpoint"].set_string_value(
      trial->checkpoint());
  if (options.json) {
    out << client::ToJson(metrics) << "\n";
  } else {
    out << client::FormatEvaluation(number, trial->checkpoint(), metrics);
  }
  return absl::OkStatus();
}

absl::Status EvaluateEnsemble(client::DialClient& client,
                              const std::string& name, int32_t top,
                              const EvaluateOptions& options,
                              std::ostream& out) {
  auto study = client.GetStudy(name);
  if (!study.ok()) return study.status();
  if (!study->spec().trial().has_trainer()) {
    return absl::FailedPreconditionError(
        absl::StrCat("study ", name, " does not run the built-in trainer"));
  }
  auto best = client.GetBestTrials(name, top);
  if (!best.ok()) return best.status();
  std::vector<v1::Trial> members;
  for (auto& t : *best) {
    if (!t.checkpoint().empty()) members.push_back(std::move(t));
  }
  if (members.size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("study ", name, " has ", members.size(),
                     " completed trials with a checkpoint; an ensemble "
                     "needs at least 2"));
  }
  std::vector<std::string> ids;
  for (const auto& t : members) ids.push_back(t.checkpoint());
  CheckpointRoot root;
  DIAL_RETURN_IF_ERROR(root.Fetch(client, name, ids, options.checkpoint_root));
  // The members, one JSON line each, beside the checkpoints.
  const std::string list = (fs::path(root.path()).parent_path() /
                            ("dialctl-ensemble-" + std::to_string(getpid())))
                               .string();
  {
    std::ofstream file(list, std::ios::trunc);
    for (const auto& t : members) {
      google::protobuf::Value id;
      id.set_string_value(t.checkpoint());
      file << "{\"checkpoint\": " << client::ToJson(id)
           << ", \"params\": " << ParamsJson(t.params()) << "}\n";
    }
    if (!file.flush()) return absl::UnavailableError("cannot write " + list);
  }
  struct RemoveList {
    std::string path;
    ~RemoveList() { std::remove(path.c_str()); }
  } remove_list{list};
  DIAL_ASSIGN_OR_RETURN(
      google::protobuf::Struct metrics,
      RunTrainer({Trainer(options), "--evaluate=" + options.split,
                  "--ensemble=" + list, "--checkpoint_root=" + root.path(),
                  "--knobs=" + Knobs(*study)}));
  if (options.json) {
    out << client::ToJson(metrics) << "\n";
  } else {
    std::vector<int64_t> numbers;
    for (const auto& t : members) numbers.push_back(t.number());
    out << client::FormatEnsemble(options.split, numbers, metrics);
  }
  return absl::OkStatus();
}

}  // namespace dial::cli
