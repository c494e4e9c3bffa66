// The built-in trainer: builds a model from a TrainerConfig, trains it on
// Fashion-MNIST or synthetic data with one or more data-parallel replicas,
// evaluates on a validation split every `eval_every` steps,
// checkpoints through the CheckpointStore layout, resumes exactly from a
// checkpoint, and hands each evaluation to a ReportSink that answers with the
// scheduler's decision. This header is torch-free; LibTorch stays in
// trainer/*.cc. Not thread-safe: one Train call per process at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/trainer_knobs.h"
#include "google/protobuf/struct.pb.h"

namespace dial::trainer {

enum class Action { kContinue, kStop, kPause, kExploit };

// What the scheduler said. kExploit: load `checkpoint` (weights and
// optimiser state of a better trial) and go on with `params` (lr, momentum,
// weight_decay changed in place).
struct Decision {
  Decision(Action a = Action::kContinue) : action(a) {}  // NOLINT: implicit
  Action action;
  std::string checkpoint;
  google::protobuf::Struct params;
};

struct Report {
  int64_t step = 0;
  std::map<std::string, double> metrics;
  std::string checkpoint;  // id, if one was written at this step
};

class ReportSink {
 public:
  virtual ~ReportSink() = default;
  // The decision for `report`; an error ends training with that error.
  virtual absl::StatusOr<Decision> OnReport(const Report& report) = 0;
};

struct RunContext {
  std::string checkpoint_root;  // empty: no checkpoints
  std::string study = "local";
  int64_t trial = 0;
  std::string restore_checkpoint;  // checkpoint id to resume from
  int threads = 1;
  // When set (SIGTERM), training checkpoints, reports and returns.
  const std::atomic<bool>* interrupt = nullptr;
};

struct RunResult {
  int64_t last_step = 0;
  int exploits = 0;                             // EXPLOIT decisions applied
  std::map<std::string, double> final_metrics;  // the last report's metrics
  bool stopped = false;      // a STOP or PAUSE decision ended the run
  bool interrupted = false;  // `interrupt` ended the run
};

// INVALID_ARGUMENT for unusable data or knobs (e.g. missing dataset files,
// naming the path); NOT_FOUND / DATA_LOSS for a bad restore checkpoint;
// INTERNAL for LibTorch errors, with their message.
absl::StatusOr<RunResult> Train(const TrainerConfig& config,
                                const RunContext& context, ReportSink& sink);

// Loads the weights of `context.restore_checkpoint` and evaluates them on
// `split`: "test" (the held-out split, which training never touches) or
// "val". Metrics: <split>_loss, <split>_accuracy, <split>_examples. When
// `predictions_path` is not empty, writes one CSV row per example there
// (index, label, prediction, confidence). INVALID_ARGUMENT for a bad split,
// knobs or data; NOT_FOUND / DATA_LOSS for a bad checkpoint.
// An ensemble: each member (its own config and context.restore_checkpoint)
// predicts class probabilities on `split`; their average is evaluated.
// Metrics: <split>_accuracy and <split>_loss of the average,
// <split>_examples, members, and member_<i>_accuracy for each.
// INVALID_ARGUMENT when members disagree on the split's labels or classes
// (e.g. "val" carved with different seeds: use "test").
absl::StatusOr<std::map<std::string, double>> EvaluateEnsemble(
    const std::vector<TrainerConfig>& configs,
    const std::vector<RunContext>& contexts, const std::string& split);

absl::StatusOr<std::map<std::string, double>> EvaluateCheckpoint(
    const TrainerConfig& config, const RunContext& context,
    const std::string& split, const std::string& predictions_path);

}  // namespace dial::trainer
