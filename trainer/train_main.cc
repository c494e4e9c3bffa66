// dial-train: the built-in trainer. Runs alone (progress on stdout) or as a
// trial under dial-worker (the trial protocol on DIAL_REPORT_FD /
// DIAL_DECISION_FD). SIGTERM makes it checkpoint, report and exit.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/trainer_knobs.h"
#include "common/trial_protocol.h"
#include "google/protobuf/util/json_util.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, params, "",
          "Hyperparameters as a JSON object; they override knobs of the same "
          "name (default: $DIAL_TRIAL_PARAMS)");
ABSL_FLAG(std::string, knobs, "",
          "Knob defaults as a JSON object, e.g. a study's trial.trainer "
          "(default: $DIAL_TRAINER_KNOBS)");
ABSL_FLAG(std::string, dataset, "", "Shorthand for the dataset knob");
ABSL_FLAG(std::string, data_dir, "", "Shorthand for the data_dir knob");
ABSL_FLAG(int64_t, steps, 0, "Shorthand for the steps knob");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Checkpoint root (default: $DIAL_CHECKPOINT_ROOT; empty: none)");
ABSL_FLAG(std::string, study, "", "Study name for checkpoint ids");
ABSL_FLAG(int64_t, trial, -1, "Trial number for checkpoint ids");
ABSL_FLAG(std::string, restore, "",
          "Checkpoint id to resume from (default: $DIAL_RESTORE_CHECKPOINT)");
ABSL_FLAG(int32_t, threads, 0,
          "CPU threads (default: threads knob, "
          "$DIAL_CPU_THREADS, else 1)");
ABSL_FLAG(bool, help_knobs, false, "Print the knob table and exit");
ABSL_FLAG(std::string, evaluate, "",
          "Evaluate the --restore checkpoint on this split (test or val), "
          "print the metrics as JSON and exit; no training");
ABSL_FLAG(std::string, predictions, "",
          "With --evaluate: write per-example predictions to this CSV file");
ABSL_FLAG(std::string, ensemble, "",
          "With --evaluate: a file of JSON lines {\"checkpoint\": ID, "
          "\"params\": {...}}, one per member; evaluates the average of "
          "their predicted class probabilities (the --knobs apply to all)");

namespace {

std::atomic<bool> g_interrupt{false};
void OnTerm(int) { g_interrupt.store(true); }

std::string FlagOrEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v ? v : "";
}

class ConsoleSink : public dial::trainer::ReportSink {
 public:
  absl::StatusOr<dial::trainer::Decision> OnReport(
      const dial::trainer::Report& r) override {
    auto get = [&](const char* k) {
      auto it = r.metrics.find(k);
      return it == r.metrics.end() ? NAN : it->second;
    };
    std::printf(
        "step %6lld  train_loss %.4f  val_loss %.4f  val_accuracy %.4f  "
        "samples/s %.0f%s%s\n",
        static_cast<long long>(r.step), get("train_loss"), get("val_loss"),
        get("val_accuracy"), get("samples_per_s"),
        r.checkpoint.empty() ? "" : "  checkpoint ", r.checkpoint.c_str());
    std::fflush(stdout);
    return dial::trainer::Action::kContinue;
  }
};

// The trial protocol: a JSON line out per report, a JSON line back.
class ProtocolSink : public dial::trainer::ReportSink {
 public:
  explicit ProtocolSink(dial::TrialPipe pipe) : pipe_(pipe) {}
  absl::StatusOr<dial::trainer::Decision> OnReport(
      const dial::trainer::Report& r) override {
    auto parsed = pipe_.Send({r.step, r.metrics, r.checkpoint});
    if (!parsed.ok()) return parsed.status();
    if (parsed->action == "STOP") return dial::trainer::Action::kStop;
    if (parsed->action == "PAUSE") return dial::trainer::Action::kPause;
    if (parsed->action == "EXPLOIT") {
      dial::trainer::Decision d(dial::trainer::Action::kExploit);
      d.checkpoint = parsed->checkpoint;
      auto status = google::protobuf::util::JsonStringToMessage(
          parsed->params_json, &d.params);
      if (!status.ok()) {
        return absl::InvalidArgumentError(
            "EXPLOIT params are not a JSON object");
      }
      return d;
    }
    return dial::trainer::Action::kContinue;
  }

 private:
  dial::TrialPipe pipe_;
};

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(
    const std::string& what, const std::string& text) {
  google::protobuf::Struct object;
  if (text.empty()) return object;
  auto status = google::protobuf::util::JsonStringToMessage(text, &object);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        what + ": not a JSON object: " + std::string(status.message()));
  }
  return object;
}

int Fail(const absl::Status& status, int code) {
  std::cerr << "dial-train: " << status.message() << std::endl;
  return code;
}

// Prints evaluation metrics as one JSON object; the exit status.
int PrintMetrics(const absl::StatusOr<std::map<std::string, double>>& metrics) {
  if (!metrics.ok()) {
    return Fail(metrics.status(),
                absl::IsInvalidArgument(metrics.status()) ? 2 : 1);
  }
  google::protobuf::Struct out;
  for (const auto& [name, value] : *metrics) {
    (*out.mutable_fields())[name].set_number_value(value);
  }
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(out, &json);
  std::cout << json << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch frees and reallocates activation buffers of megabytes every
  // step. By default glibc serves each with a fresh mmap, so every step
  // pays page faults to zero new pages: the CNN trained 3-4x slower. Keep
  // such buffers in the heap and the heap from shrinking.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  absl::SetProgramUsageMessage(
      "dial-train --params='{\"lr\":0.01}' [--dataset=fashion-mnist] "
      "[--steps=N] [--checkpoint-root=DIR --study=S --trial=N]");
  auto arg_storage = dial::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_help_knobs)) {
    std::cout << dial::KnobTableMarkdown();
    return 0;
  }
  signal(SIGTERM, OnTerm);
  signal(SIGPIPE, SIG_IGN);

  auto knobs = ParseJsonObject(
      "--knobs", FlagOrEnv(absl::GetFlag(FLAGS_knobs), dial::kEnvTrainerKnobs));
  if (!knobs.ok()) return Fail(knobs.status(), 2);
  auto& fields = *knobs->mutable_fields();
  if (!absl::GetFlag(FLAGS_dataset).empty()) {
    fields["dataset"].set_string_value(absl::GetFlag(FLAGS_dataset));
  }
  if (!absl::GetFlag(FLAGS_data_dir).empty()) {
    fields["data_dir"].set_string_value(absl::GetFlag(FLAGS_data_dir));
  }
  if (absl::GetFlag(FLAGS_steps) > 0) {
    fields["steps"].set_number_value(
        static_cast<double>(absl::GetFlag(FLAGS_steps)));
  }
  // A re-evaluation runs with its own seed.
  if (const char* seed = std::getenv(dial::kEnvSeed); seed && *seed) {
    double value;
    if (!absl::SimpleAtod(seed, &value)) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("$", dial::kEnvSeed, ": not a number")),
                  2);
    }
    fields["seed"].set_number_value(value);
  }
  auto params = ParseJsonObject(
      "--params",
      FlagOrEnv(absl::GetFlag(FLAGS_params), dial::kEnvTrialParams));
  if (!params.ok()) return Fail(params.status(), 2);
  auto config = dial::ResolveTrainerConfig(*knobs, *params);
  if (!config.ok()) return Fail(config.status(), 2);

  dial::trainer::RunContext ctx;
  ctx.checkpoint_root =
      FlagOrEnv(absl::GetFlag(FLAGS_checkpoint_root), dial::kEnvCheckpointRoot);
  ctx.study = FlagOrEnv(absl::GetFlag(FLAGS_study), dial::kEnvStudy);
  if (ctx.study.empty()) ctx.study = "local";
  int64_t trial = absl::GetFlag(FLAGS_trial);
  if (trial < 0) {
    const char* env = std::getenv(dial::kEnvTrial);
    if (!env || !absl::SimpleAtoi(env, &trial)) trial = 0;
  }
  ctx.trial = trial;
  ctx.restore_checkpoint =
      FlagOrEnv(absl::GetFlag(FLAGS_restore), dial::kEnvRestoreCheckpoint);
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(config->threads);
  if (threads <= 0) {
    const char* env = std::getenv(dial::kEnvCpuThreads);
    if (!env || !absl::SimpleAtoi(env, &threads)) threads = 1;
  }
  ctx.threads = std::max(1, threads);
  ctx.interrupt = &g_interrupt;

  if (!absl::GetFlag(FLAGS_ensemble).empty()) {
    if (absl::GetFlag(FLAGS_evaluate).empty()) {
      return Fail(absl::InvalidArgumentError("--ensemble needs --evaluate"), 2);
    }
    std::ifstream in(absl::GetFlag(FLAGS_ensemble));
    if (!in) {
      return Fail(absl::InvalidArgumentError("cannot read " +
                                             absl::GetFlag(FLAGS_ensemble)),
                  2);
    }
    std::vector<dial::TrainerConfig> configs;
    std::vector<dial::trainer::RunContext> contexts;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto member = ParseJsonObject("--ensemble", line);
      if (!member.ok()) return Fail(member.status(), 2);
      const auto& f = member->fields();
      auto ckpt = f.find("checkpoint");
      auto mparams = f.find("params");
      if (ckpt == f.end() || !ckpt->second.has_string_value() ||
          mparams == f.end() || !mparams->second.has_struct_value()) {
        return Fail(absl::InvalidArgumentError(
                        "--ensemble: each line needs \"checkpoint\" (text) "
                        "and \"params\" (an object): " +
                        line),
                    2);
      }
      auto member_config =
          dial::ResolveTrainerConfig(*knobs, mparams->second.struct_value());
      if (!member_config.ok()) return Fail(member_config.status(), 2);
      configs.push_back(*member_config);
      contexts.push_back(ctx);
      contexts.back().restore_checkpoint = ckpt->second.string_value();
    }
    return PrintMetrics(dial::trainer::EvaluateEnsemble(
        configs, contexts, absl::GetFlag(FLAGS_evaluate)));
  }

  if (!absl::GetFlag(FLAGS_evaluate).empty()) {
    return PrintMetrics(dial::trainer::EvaluateCheckpoint(
        *config, ctx, absl::GetFlag(FLAGS_evaluate),
        absl::GetFlag(FLAGS_predictions)));
  }

  std::unique_ptr<dial::trainer::ReportSink> sink;
  if (auto pipe = dial::TrialPipe::FromEnv()) {
    sink = std::make_unique<ProtocolSink>(*pipe);
  } else {
    sink = std::make_unique<ConsoleSink>();
  }
  auto result = dial::trainer::Train(*config, ctx, *sink);
  if (!result.ok()) {
    return Fail(result.status(),
                absl::IsInvalidArgument(result.status()) ? 2 : 1);
  }
  // Interrupted: checkpointed but not finished, so not a success.
  return result->interrupted ? 128 + SIGTERM : 0;
}
