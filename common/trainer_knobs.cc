#include "common/trainer_knobs.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace dial {
namespace {

const Knob* FindKnob(const std::string& name) {
  for (const Knob& k : TrainerKnobs()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

std::string KnobNames() {
  std::vector<std::string> names;
  for (const Knob& k : TrainerKnobs()) names.push_back(k.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace

const std::vector<Knob>& TrainerKnobs() {
  static const std::vector<Knob>* knobs = new std::vector<Knob>{
      {"model",
       KnobType::kString,
       "mlp",
       "Model family: an MLP, a CNN (conv blocks, then a dense layer of "
       "`units`), or a ResNet (three stages of residual blocks)",
       {"mlp", "cnn", "resnet"}},
      {"conv_layers",
       KnobType::kInt,
       "2",
       "CNN: conv blocks (conv, norm, activation, 2x2 pooling)",
       {},
       1,
       4},
      {"channels",
       KnobType::kInt,
       "32",
       "CNN and ResNet: channels of the first block (stage), doubled in each "
       "next one",
       {},
       1,
       512},
      {"blocks",
       KnobType::kInt,
       "2",
       "ResNet: residual blocks per stage (depth 6*blocks+2)",
       {},
       1,
       8},
      {"kernel_size",
       KnobType::kInt,
       "3",
       "CNN: convolution kernel size (ResNet: always 3)",
       {},
       1,
       7},
      {"norm",
       KnobType::kString,
       "batch",
       "CNN and ResNet: normalisation after each convolution",
       {"none", "batch", "layer"}},
      {"pooling",
       KnobType::kString,
       "max",
       "CNN: 2x2 pooling after each block",
       {"max", "avg"}},
      {"dataset",
       KnobType::kString,
       "fashion-mnist",
       "Training data: Fashion-MNIST IDX files, or seeded synthetic "
       "classification data",
       {"fashion-mnist", "synthetic"}},
      {"data_dir",
       KnobType::kString,
       "/usr/share/datasets/fashion-mnist",
       "Directory of the Fashion-MNIST *-idx?-ubyte.gz files",
       {""}},
      {"val_fraction",
       KnobType::kFloat,
       "0.1",
       "Fraction of the training data held out as the validation split that "
       "val_* metrics use (the test split is only for `dialctl trials "
       "evaluate`)",
       {},
       0.01,
       0.5},
      {"layers", KnobType::kInt, "2", "Hidden layers of the MLP", {}, 0, 16},
      {"units", KnobType::kInt, "256", "Units per hidden layer", {}, 1, 8192},
      {"activation",
       KnobType::kString,
       "relu",
       "Hidden activation",
       {"relu", "tanh", "gelu", "sigmoid"}},
      {"dropout",
       KnobType::kFloat,
       "0",
       "Dropout after each hidden layer",
       {},
       0,
       0.95},
      {"optimizer",
       KnobType::kString,
       "adam",
       "Optimiser",
       {"sgd", "adam", "adamw", "rmsprop"}},
      {"lr", KnobType::kFloat, "0.001", "Learning rate", {}, 1e-12, 10},
      {"momentum", KnobType::kFloat, "0.9", "SGD momentum", {}, 0, 0.9999},
      {"nesterov",
       KnobType::kInt,
       "0",
       "SGD: Nesterov momentum (0 or 1)",
       {},
       0,
       1},
      {"weight_decay",
       KnobType::kFloat,
       "0",
       "Weight decay (decoupled for adamw, L2 otherwise)",
       {},
       0,
       1},
      {"lr_schedule",
       KnobType::kString,
       "cosine",
       "Learning-rate schedule after warm-up",
       {"constant", "step", "cosine"}},
      {"warmup_steps",
       KnobType::kInt,
       "0",
       "Linear learning-rate warm-up from 0 over this many steps",
       {},
       0,
       1e9},
      {"lr_step_size",
       KnobType::kInt,
       "1000",
       "Step schedule: multiply the learning rate by lr_gamma every this many "
       "steps",
       {},
       1,
       1e9},
      {"lr_gamma",
       KnobType::kFloat,
       "0.1",
       "Step schedule: decay factor",
       {},
       0,
       1},
      {"grad_clip",
       KnobType::kFloat,
       "0",
       "Clip the gradients' global norm to this (0: off)",
       {},
       0,
       1e6},
      {"label_smoothing",
       KnobType::kFloat,
       "0",
       "Label smoothing of the training loss",
       {},
       0,
       0.5},
      {"batch_size",
       KnobType::kInt,
       "128",
       "Training batch size (global: split across replicas)",
       {},
       1,
       65536},
      {"precision",
       KnobType::kString,
       "fp32",
       "Autocast precision of forward passes (weights and optimiser state "
       "stay fp32); fp16 adds dynamic loss scaling and needs CUDA",
       {"fp32", "bf16", "fp16"}},
      {"replicas",
       KnobType::kInt,
       "0",
       "Data-parallel replicas (0: one per visible GPU; on the CPU one per "
       "thread for models without batch norm, else 1); on CPU they share "
       "the threads",
       {},
       0,
       64},
      {"prefetch",
       KnobType::kInt,
       "4",
       "Batches a background thread prepares ahead of the step loop",
       {},
       1,
       64},
      {"eval_every",
       KnobType::kInt,
       "200",
       "Evaluate (and report, and checkpoint) every this many steps",
       {},
       1,
       1e9},
      {"eval_batch_size",
       KnobType::kInt,
       "1024",
       "Evaluation batch size (at least batch_size is used)",
       {},
       1,
       1e6},
      {"steps",
       KnobType::kInt,
       "1000",
       "Training steps (the trial's budget)",
       {},
       1,
       1e9},
      {"checkpoint_every",
       KnobType::kInt,
       "0",
       "Checkpoint every this many steps (0: at every evaluation)",
       {},
       0,
       1e9},
      {"save_predictions",
       KnobType::kInt,
       "0",
       "Save per-example validation predictions (predictions.csv) with each "
       "checkpoint (0 or 1)",
       {},
       0,
       1},
      {"schedule",
       KnobType::kString,
       "",
       "Optimiser knobs changed during the run, as STEP:{json};...: after "
       "STEP steps, apply lr, momentum or weight_decay from the JSON (what "
       "`dialctl study replay` writes for a PBT schedule)",
       {""}},
      {"seed",
       KnobType::kInt,
       "0",
       "Seed of initialisation, dropout and data order",
       {},
       0,
       1e15},
      {"threads",
       KnobType::kInt,
       "0",
       "CPU threads (0: the worker's budget, else 1)",
       {},
       0,
       1024},
      {"synthetic_samples",
       KnobType::kInt,
       "4096",
       "Synthetic dataset: training examples (test split: a quarter as many)",
       {},
       16,
       1e7},
      {"synthetic_features",
       KnobType::kInt,
       "32",
       "Synthetic dataset: features",
       {},
       1,
       100000},
      {"synthetic_classes",
       KnobType::kInt,
       "4",
       "Synthetic dataset: classes",
       {},
       2,
       1000},
  };
  return *knobs;
}

absl::Status CheckKnob(const std::string& field, const std::string& name,
                       const google::protobuf::Value& value) {
  const Knob* knob = FindKnob(name);
  if (knob == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", name, "' is not a trainer knob; knobs are ",
                     KnobNames()));
  }
  if (knob->type == KnobType::kString) {
    if (value.kind_case() != google::protobuf::Value::kStringValue) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", name, " must be a string"));
    }
    const auto& choices = knob->choices;
    if (!choices.empty() && !choices[0].empty() &&
        std::find(choices.begin(), choices.end(), value.string_value()) ==
            choices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", name, " '", value.string_value(),
                       "' is not one of ", absl::StrJoin(choices, ", ")));
    }
    return absl::OkStatus();
  }
  if (value.kind_case() != google::protobuf::Value::kNumberValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", name, " must be a number"));
  }
  const double v = value.number_value();
  if (knob->type == KnobType::kInt && v != std::floor(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", name, " must be an integer, got ", v));
  }
  if (!(v >= knob->min && v <= knob->max)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", name, " must be between ", knob->min, " and ",
                     knob->max, ", got ", v));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainerConfig> ResolveTrainerConfig(
    const google::protobuf::Struct& knobs,
    const google::protobuf::Struct& params) {
  std::map<std::string, google::protobuf::Value> values;
  for (const Knob& k : TrainerKnobs()) {
    google::protobuf::Value v;
    if (k.type == KnobType::kString) {
      v.set_string_value(k.default_value);
    } else {
      v.set_number_value(std::strtod(k.default_value, nullptr));
    }
    values[k.name] = v;
  }
  for (const auto* source : {&knobs, &params}) {
    const char* field = source == &knobs ? "trial.trainer" : "params";
    for (const auto& [name, value] : source->fields()) {
      DIAL_RETURN_IF_ERROR(
          CheckKnob(absl::StrCat(field, ".", name), name, value));
      values[name] = value;
    }
  }
  auto s = [&](const char* n) { return values[n].string_value(); };
  auto i = [&](const char* n) {
    return static_cast<int64_t>(values[n].number_value());
  };
  auto d = [&](const char* n) { return values[n].number_value(); };
  TrainerConfig c;
  c.model = s("model");
  c.conv_layers = i("conv_layers");
  c.channels = i("channels");
  c.kernel_size = i("kernel_size");
  c.blocks = i("blocks");
  c.norm = s("norm");
  c.pooling = s("pooling");
  c.dataset = s("dataset");
  c.data_dir = s("data_dir");
  c.val_fraction = d("val_fraction");
  c.layers = i("layers");
  c.units = i("units");
  c.activation = s("activation");
  c.dropout = d("dropout");
  c.optimizer = s("optimizer");
  c.lr = d("lr");
  c.momentum = d("momentum");
  c.weight_decay = d("weight_decay");
  c.nesterov = i("nesterov") != 0;
  c.lr_schedule = s("lr_schedule");
  c.warmup_steps = i("warmup_steps");
  c.lr_step_size = i("lr_step_size");
  c.lr_gamma = d("lr_gamma");
  c.grad_clip = d("grad_clip");
  c.label_smoothing = d("label_smoothing");
  c.batch_size = i("batch_size");
  c.precision = s("precision");
  c.replicas = i("replicas");
  c.prefetch = i("prefetch");
  c.eval_every = i("eval_every");
  c.eval_batch_size = i("eval_batch_size");
  c.steps = i("steps");
  c.checkpoint_every = i("checkpoint_every");
  c.save_predictions = i("save_predictions") != 0;
  c.seed = i("seed");
  c.schedule = s("schedule");
  c.threads = i("threads");
  c.synthetic_samples = i("synthetic_samples");
  c.synthetic_features = i("synthetic_features");
  c.synthetic_classes = i("synthetic_classes");
  return c;
}

std::string KnobTableMarkdown() {
  std::string out =
      "| knob | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const Knob& k : TrainerKnobs()) {
    std::string allowed;
    if (k.type == KnobType::kString) {
      allowed = k.choices.empty() || k.choices[0].empty()
                    ? (std::string(k.name) == "data_dir" ? "any path" : "any")
                    : absl::StrJoin(k.choices, ", ");
    } else {
      allowed = absl::StrCat(k.min, " .. ", k.max);
    }
    absl::StrAppend(&out, "| `", k.name, "` | ",
                    k.type == KnobType::kString ? "string"
                    : k.type == KnobType::kInt  ? "int"
                                                : "float",
                    " | ", k.default_value, " | ", allowed, " | ", k.doc,
                    " |\n");
  }
  return out;
}

}  // namespace dial
