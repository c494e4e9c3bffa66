// The knobs of the built-in trainer (dial-train): one table, shared by spec
// validation in the scheduler (so a typo fails at CreateStudy, before any GPU
// time) and by the trainer itself. Torch-free. Thread-safe: immutable data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace dial {

enum class KnobType { kString, kInt, kFloat };

struct Knob {
  const char* name;
  KnobType type;
  const char* default_value;  // as text
  const char* doc;
  // kString: allowed values ("" = any); numbers: inclusive bounds.
  std::vector<std::string> choices;
  double min = -1e300;
  double max = 1e300;
};

// Every knob, in documentation order.
const std::vector<Knob>& TrainerKnobs();

// Resolved knob values for one trial.
struct TrainerConfig {
  std::string model;
  int64_t conv_layers = 0;
  int64_t channels = 0;
  int64_t blocks = 0;
  int64_t kernel_size = 0;
  std::string norm;
  std::string pooling;
  std::string dataset;
  std::string data_dir;
  double val_fraction = 0;
  int64_t layers = 0;
  int64_t units = 0;
  std::string activation;
  double dropout = 0;
  std::string optimizer;
  double lr = 0;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;
  std::string lr_schedule;
  int64_t warmup_steps = 0;
  int64_t lr_step_size = 0;
  double lr_gamma = 0;
  double grad_clip = 0;
  double label_smoothing = 0;
  int64_t batch_size = 0;
  std::string precision;
  int64_t replicas = 0;
  int64_t prefetch = 0;
  int64_t eval_every = 0;
  int64_t eval_batch_size = 0;
  int64_t steps = 0;
  int64_t checkpoint_every = 0;
  bool save_predictions = false;
  std::string schedule;
  int64_t seed = 0;
  int64_t threads = 0;
  int64_t synthetic_samples = 0;
  int64_t synthetic_features = 0;
  int64_t synthetic_classes = 0;
};

// Defaults, then `knobs` (the spec's trial.trainer), then `params` (the
// trial's hyperparameters) on top. INVALID_ARGUMENT naming the knob for an
// unknown name, a wrong type or a value out of range.
absl::StatusOr<TrainerConfig> ResolveTrainerConfig(
    const google::protobuf::Struct& knobs,
    const google::protobuf::Struct& params);

// Checks one knob value; `field` prefixes the error.
absl::Status CheckKnob(const std::string& field, const std::string& name,
                       const google::protobuf::Value& value);

// Markdown table of the knobs (for docs and `dial-train --help-knobs`).
std::string KnobTableMarkdown();

}  // namespace dial
