#include "common/random.h"
#include "trainer/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "storage/checkpoint_store.h"
#include "trainer/idx.h"
#include "trainer/lr_schedule.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"

namespace dial::trainer {
namespace {

struct Split {
  torch::Tensor x;  // float [N, D]
  torch::Tensor y;  // int64 [N]
};

struct Data {
  Split train;
  Split val;
  int64_t classes = 0;
};

absl::StatusOr<Split> LoadFashionSplit(const std::string& dir,
                                       const std::string& prefix) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  auto images = ReadIdxGz(images_path);
  if (absl::IsNotFound(images.status())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Fashion-MNIST not found: ", images.status().message(),
        " (install dataset-fashion-mnist or set data_dir)"));
  }
  if (!images.ok()) return images.status();
  DIAL_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxGz(labels_path));
  if (images->dims.size() != 3 || labels.dims.size() != 1 ||
      images->dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": images and labels do not match"));
  }
  const int64_t n = images->dims[0];
  const int64_t d = images->dims[1] * images->dims[2];
  Split split;
  split.x = torch::from_blob(images->data.data(), {n, d}, torch::kUInt8)
                .to(torch::kFloat32)
                .div_(255.0)
                .sub_(0.2860)
                .div_(0.3530);
  split.y =
      torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return split;
}

// Gaussian clusters around seeded class centres; the validation split uses
// the same centres and fresh noise.
Data MakeSynthetic(const TrainerConfig& c) {
  const int64_t d = c.synthetic_features, k = c.synthetic_classes;
  std::mt19937_64 rng(SplitMix64(static_cast<uint64_t>(c.seed) ^ 0x5157));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centres(static_cast<size_t>(k * d));
  for (auto& v : centres) v = 0.3f * normal(rng);
  auto make = [&](int64_t n) {
    std::vector<float> x(static_cast<size_t>(n * d));
    std::vector<int64_t> y(static_cast<size_t>(n));
    std::uniform_int_distribution<int64_t> cls(0, k - 1);
    for (int64_t i = 0; i < n; ++i) {
      y[i] = cls(rng);
      for (int64_t j = 0; j < d; ++j) {
        x[i * d + j] = centres[y[i] * d + j] + normal(rng);
      }
    }
    Split s;
    s.x = torch::from_blob(x.data(), {n, d}, torch::kFloat32).clone();
    s.y = torch::from_blob(y.data(), {n}, torch::kInt64).clone();
    return s;
  };
  Data data;
  data.train = make(c.synthetic_samples);
  data.val = make(std::max<int64_t>(16, c.synthetic_samples / 4));
  data.classes = k;
  return data;
}

absl::StatusOr<Data> LoadData(const TrainerConfig& c) {
  if (c.dataset == "synthetic") return MakeSynthetic(c);
  Data data;
  DIAL_ASSIGN_OR_RETURN(data.train, LoadFashionSplit(c.data_dir, "train"));
  // Held-out split: the official test images.
  DIAL_ASSIGN_OR_RETURN(data.val, LoadFashionSplit(c.data_dir, "t10k"));
  data.classes = 10;
  return data;
}

torch::nn::AnyModule Activation(const TrainerConfig& c) {
  if (c.activation == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  if (c.activation == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  if (c.activation == "sigmoid") {
    return torch::nn::AnyModule(torch::nn::Sigmoid());
  }
  return torch::nn::AnyModule(torch::nn::ReLU());
}

// Conv blocks on square single-channel images (side x side), then a dense
// layer and the classifier. Inputs arrive flattened.
absl::StatusOr<torch::nn::Sequential> BuildCnn(const TrainerConfig& c,
                                               int64_t in, int64_t classes) {
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(double(in))));
  if (side * side != in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model cnn needs square images; this dataset has ", in,
        " features (for synthetic data make synthetic_features a square)"));
  }
  torch::nn::Sequential net;
  net->push_back(torch::nn::Unflatten(torch::nn::UnflattenOptions(1, {1, side, side})));
  int64_t channels = 1, size = side;
  for (int64_t b = 0; b < c.conv_layers; ++b) {
    const int64_t out = c.channels << b;
    net->push_back(torch::nn::Conv2d(
        torch::nn::Conv2dOptions(channels, out, c.kernel_size)
            .padding(c.kernel_size / 2)));
    if (c.norm == "batch") net->push_back(torch::nn::BatchNorm2d(out));
    if (c.norm == "layer") {
      net->push_back(torch::nn::GroupNorm(torch::nn::GroupNormOptions(1, out)));
    }
    net->push_back(Activation(c));
    size = size + 2 * (c.kernel_size / 2) - c.kernel_size + 1;
    if (size >= 2) {
      if (c.pooling == "avg") {
        net->push_back(torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions(2)));
      } else {
        net->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      }
      size /= 2;
    }
    channels = out;
  }
  net->push_back(torch::nn::Flatten());
  net->push_back(torch::nn::Linear(channels * size * size, c.units));
  net->push_back(Activation(c));
  if (c.dropout > 0) net->push_back(torch::nn::Dropout(c.dropout));
  net->push_back(torch::nn::Linear(c.units, classes));
  return net;
}

torch::nn::Sequential BuildMlp(const TrainerConfig& c, int64_t in,
                               int64_t classes) {
  torch::nn::Sequential net;
  int64_t width = in;
  for (int64_t i = 0; i < c.layers; ++i) {
    net->push_back(torch::nn::Linear(width, c.units));
    if (c.activation == "tanh") {
      net->push_back(torch::nn::Tanh());
    } else if (c.activation == "gelu") {
      net->push_back(torch::nn::GELU());
    } else if (c.activation == "sigmoid") {
      net->push_back(torch::nn::Sigmoid());
    } else {
      net->push_back(torch::nn::ReLU());
    }
    if (c.dropout > 0) net->push_back(torch::nn::Dropout(c.dropout));
    width = c.units;
  }
  net->push_back(torch::nn::Linear(width, classes));
  return net;
}

std::unique_ptr<torch::optim::Optimizer> BuildOptimizer(
    const TrainerConfig& c, std::vector<torch::Tensor> params) {
  if (c.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(c.lr)
                    .momentum(c.momentum)
                    .nesterov(c.nesterov && c.momentum > 0)
                    .weight_decay(c.weight_decay));
  }
  if (c.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  }
  if (c.optimizer == "rmsprop") {
    return std::make_unique<torch::optim::RMSprop>(
        params, torch::optim::RMSpropOptions(c.lr)
                    .momentum(c.momentum)
                    .weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(
      params, torch::optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
}

// Sets the live learning rate (and, when given, momentum and weight decay)
// whatever the optimiser.
void SetOptimizerKnobs(torch::optim::Optimizer& optimizer,
                       const std::string& kind, double lr, double momentum,
                       double weight_decay) {
  for (auto& group : optimizer.param_groups()) {
    if (kind == "sgd") {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      o.lr(lr);
      o.momentum(momentum);
      o.weight_decay(weight_decay);
    } else if (kind == "adamw") {
      auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
      o.lr(lr);
      o.weight_decay(weight_decay);
    } else if (kind == "rmsprop") {
      auto& o = static_cast<torch::optim::RMSpropOptions&>(group.options());
      o.lr(lr);
      o.momentum(momentum);
      o.weight_decay(weight_decay);
    } else {
      auto& o = static_cast<torch::optim::AdamOptions&>(group.options());
      o.lr(lr);
      o.weight_decay(weight_decay);
    }
  }
}

// Epoch e's order of the training examples: a function of (seed, e) only,
// so a resumed run visits the data exactly as an uninterrupted one.
torch::Tensor EpochOrder(int64_t seed, int64_t epoch, int64_t n) {
  std::mt19937_64 rng(SplitMix64(static_cast<uint64_t>(seed)) ^
                      SplitMix64(static_cast<uint64_t>(epoch) + 1));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
  }
  return torch::from_blob(order.data(), {n}, torch::kInt64).clone();
}

std::pair<double, double> Evaluate(torch::nn::Sequential& net, const Split& s,
                                   int64_t batch) {
  torch::NoGradGuard no_grad;
  net->eval();
  const int64_t n = s.x.size(0);
  double loss_sum = 0, correct = 0;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t end = std::min(n, start + batch);
    auto out = net->forward(s.x.slice(0, start, end));
    auto y = s.y.slice(0, start, end);
    // Summed, not averaged, so a short last batch weighs what it holds.
    loss_sum += torch::nn::functional::cross_entropy(
                    out, y,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(
                        torch::kSum))
                    .item<double>();
    correct += out.argmax(1).eq(y).sum().item<double>();
  }
  net->train();
  return {loss_sum / n, correct / n};
}

std::string Serialize(const std::function<void(std::ostream&)>& save) {
  std::ostringstream out;
  save(out);
  return out.str();
}

class Run {
 public:
  Run(const TrainerConfig& c, const RunContext& ctx, ReportSink& sink)
      : c_(c), ctx_(ctx), sink_(sink) {}

  absl::StatusOr<RunResult> Go() {
    torch::set_num_threads(std::max(1, ctx_.threads));
    DIAL_ASSIGN_OR_RETURN(data_, LoadData(c_));
    if (c_.batch_size > data_.train.x.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_size ", c_.batch_size, " is larger than the training set (",
          data_.train.x.size(0), ")"));
    }
    torch::manual_seed(static_cast<uint64_t>(c_.seed));
    if (c_.model == "cnn") {
      DIAL_ASSIGN_OR_RETURN(net_, BuildCnn(c_, data_.train.x.size(1), data_.classes));
    } else {
      net_ = BuildMlp(c_, data_.train.x.size(1), data_.classes);
    }
    optimizer_ = BuildOptimizer(c_, net_->parameters());
    if (!ctx_.checkpoint_root.empty()) {
      DIAL_ASSIGN_OR_RETURN(store_, storage::FileCheckpointStore::Create(
                                        {ctx_.checkpoint_root}));
    }
    DIAL_RETURN_IF_ERROR(ParseSchedule());
    int64_t step = 0;
    if (!ctx_.restore_checkpoint.empty()) {
      DIAL_ASSIGN_OR_RETURN(step, Restore(ctx_.restore_checkpoint));
      std::fprintf(stderr, "dial-train: resuming from checkpoint %s at step %lld\n",
                   ctx_.restore_checkpoint.c_str(),
                   static_cast<long long>(step));
    } else {
      std::fprintf(stderr, "dial-train: starting at step 0\n");
    }
    // A resumed run takes the scheduled knobs in force at its step.
    if (auto it = schedule_.upper_bound(step); it != schedule_.begin() && step > 0) {
      DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(std::prev(it)->second));
    }
    return Loop(step);
  }

 private:
  absl::StatusOr<int64_t> Restore(const std::string& id) {
    if (!store_) {
      return absl::InvalidArgumentError(
          "restoring a checkpoint needs a checkpoint root");
    }
    DIAL_ASSIGN_OR_RETURN(auto files, store_->Read(id));
    for (const char* name : {"model.pt", "optimizer.pt", "rng.pt", "step"}) {
      if (!files.count(name)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", id, " has no ", name));
      }
    }
    std::istringstream model(files["model.pt"]);
    torch::load(net_, model);
    std::istringstream optim(files["optimizer.pt"]);
    torch::load(*optimizer_, optim);
    std::istringstream rng(files["rng.pt"]);
    torch::Tensor state;
    torch::load(state, rng);
    auto gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
    last_checkpoint_step_ = std::stoll(files["step"]);
    return last_checkpoint_step_;
  }

  // Takes a better trial's weights and optimiser state, then the new
  // optimiser hyperparameters, and goes on from the current step.
  absl::Status Exploit(const Decision& decision) {
    if (!store_) {
      return absl::FailedPreconditionError("EXPLOIT needs a checkpoint root");
    }
    DIAL_ASSIGN_OR_RETURN(auto files, store_->Read(decision.checkpoint));
    if (!files.count("model.pt") || !files.count("optimizer.pt")) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", decision.checkpoint, " has no model or optimizer"));
    }
    std::istringstream model(files["model.pt"]);
    torch::load(net_, model);
    std::istringstream optim(files["optimizer.pt"]);
    torch::load(*optimizer_, optim);
    DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(decision.params));
    std::fprintf(stderr, "dial-train: exploited checkpoint %s (lr %g)\n",
                 decision.checkpoint.c_str(), c_.lr);
    return absl::OkStatus();
  }

  // Changes lr, momentum and weight_decay of the live optimiser.
  absl::Status ApplyOptimizerKnobs(const google::protobuf::Struct& params) {
    for (const auto& [name, value] : params.fields()) {
      DIAL_RETURN_IF_ERROR(CheckKnob("params." + name, name, value));
      if (name == "lr") c_.lr = value.number_value();
      if (name == "momentum") c_.momentum = value.number_value();
      if (name == "weight_decay") c_.weight_decay = value.number_value();
    }
    SetOptimizerKnobs(*optimizer_, c_.optimizer, c_.lr, c_.momentum,
                      c_.weight_decay);
    return absl::OkStatus();
  }

  // "STEP:{json};STEP:{json}" -> step -> knobs.
  absl::Status ParseSchedule() {
    if (c_.schedule.empty()) return absl::OkStatus();
    for (absl::string_view part : absl::StrSplit(c_.schedule, ';', absl::SkipEmpty())) {
      const size_t colon = part.find(':');
      int64_t step;
      google::protobuf::Struct knobs;
      if (colon == absl::string_view::npos ||
          !absl::SimpleAtoi(part.substr(0, colon), &step) || step < 0 ||
          !google::protobuf::util::JsonStringToMessage(
               std::string(part.substr(colon + 1)), &knobs)
               .ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule: '", std::string(part), "' is not STEP:{json}"));
      }
      schedule_[step] = knobs;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Checkpoint(int64_t step) {
    if (!store_) return std::string();
    if (step == last_checkpoint_step_) {
      return storage::CheckpointStore::MakeId(ctx_.study, ctx_.trial, step);
    }
    std::map<std::string, std::string> files;
    files["model.pt"] =
        Serialize([&](std::ostream& out) { torch::save(net_, out); });
    files["optimizer.pt"] =
        Serialize([&](std::ostream& out) { torch::save(*optimizer_, out); });
    torch::Tensor state;
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      state = gen.get_state();
    }
    files["rng.pt"] =
        Serialize([&](std::ostream& out) { torch::save(state, out); });
    files["step"] = std::to_string(step);
    auto info = store_->Write(ctx_.study, ctx_.trial, step, files);
    if (absl::IsAlreadyExists(info.status())) {
      // Written by an earlier attempt that got this far: same state.
      return storage::CheckpointStore::MakeId(ctx_.study, ctx_.trial, step);
    }
    if (!info.ok()) return info.status();
    last_checkpoint_step_ = step;
    return info->id;
  }

  absl::StatusOr<RunResult> Loop(int64_t step) {
    RunResult result;
    result.last_step = step;
    const int64_t n = data_.train.x.size(0);
    const int64_t per_epoch = std::max<int64_t>(1, n / c_.batch_size);
    int64_t epoch = -1;
    torch::Tensor order;
    torch::Tensor loss_sum = torch::zeros({}, torch::kFloat64);
    int64_t loss_steps = 0;
    double train_seconds = 0;
    auto started = std::chrono::steady_clock::now();
    net_->train();
    while (step < c_.steps) {
      if (auto it = schedule_.find(step); it != schedule_.end()) {
        DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(it->second));
      }
      if (ctx_.interrupt && ctx_.interrupt->load()) {
        // Asked to stop (e.g. the worker shuts down): save and report.
        DIAL_ASSIGN_OR_RETURN(std::string id, Checkpoint(step));
        Report report;
        report.step = step;
        report.checkpoint = id;
        report.metrics["train_loss"] =
            loss_steps ? loss_sum.item<double>() / loss_steps : NAN;
        if (step > 0) (void)sink_.OnReport(report);
        result.interrupted = true;
        return result;
      }
      ++step;
      const int64_t e = (step - 1) / per_epoch;
      if (e != epoch) {
        epoch = e;
        order = EpochOrder(c_.seed, epoch, n);
      }
      const int64_t b = (step - 1) % per_epoch;
      auto ids = order.slice(0, b * c_.batch_size, (b + 1) * c_.batch_size);
      auto x = data_.train.x.index_select(0, ids);
      auto y = data_.train.y.index_select(0, ids);
      // The schedule is a function of the step, so resumes continue exactly.
      SetOptimizerKnobs(*optimizer_, c_.optimizer, LearningRate(c_, step),
                        c_.momentum, c_.weight_decay);
      optimizer_->zero_grad();
      auto loss = torch::nn::functional::cross_entropy(
          net_->forward(x), y,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
              c_.label_smoothing));
      loss.backward();
      if (c_.grad_clip > 0) {
        torch::nn::utils::clip_grad_norm_(net_->parameters(), c_.grad_clip);
      }
      optimizer_->step();
      loss_sum += loss.detach().to(torch::kFloat64);
      ++loss_steps;

      if (step % c_.eval_every != 0 && step != c_.steps) continue;
      train_seconds += std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started)
                           .count();
      Report report;
      report.step = step;
      auto [val_loss, val_accuracy] =
          Evaluate(net_, data_.val, c_.eval_batch_size);
      report.metrics["train_loss"] = loss_sum.item<double>() / loss_steps;
      report.metrics["val_loss"] = val_loss;
      report.metrics["val_accuracy"] = val_accuracy;
      report.metrics["epoch"] = static_cast<double>(step) / per_epoch;
      report.metrics["lr"] = LearningRate(c_, step);
      report.metrics["samples_per_s"] =
          train_seconds > 0 ? loss_steps * c_.batch_size / train_seconds : 0;
      if (c_.checkpoint_every == 0 || step % c_.checkpoint_every == 0 ||
          step == c_.steps) {
        DIAL_ASSIGN_OR_RETURN(report.checkpoint, Checkpoint(step));
      }
      result.last_step = step;
      result.final_metrics = report.metrics;
      DIAL_ASSIGN_OR_RETURN(Decision decision, sink_.OnReport(report));
      if (decision.action == Action::kExploit) {
        DIAL_RETURN_IF_ERROR(Exploit(decision));
        ++result.exploits;
      } else if (decision.action != Action::kContinue) {
        result.stopped = true;
        return result;
      }
      loss_sum.zero_();
      loss_steps = 0;
      train_seconds = 0;
      started = std::chrono::steady_clock::now();
    }
    if (result.final_metrics.empty()) {
      // Resumed at the last step (e.g. requeued right after finishing): the
      // final evaluation is all that is left.
      Report report;
      report.step = step;
      auto [val_loss, val_accuracy] =
          Evaluate(net_, data_.val, c_.eval_batch_size);
      report.metrics["val_loss"] = val_loss;
      report.metrics["val_accuracy"] = val_accuracy;
      DIAL_ASSIGN_OR_RETURN(report.checkpoint, Checkpoint(step));
      result.final_metrics = report.metrics;
      DIAL_RETURN_IF_ERROR(sink_.OnReport(report).status());
    }
    return result;
  }

  TrainerConfig c_;  // a copy: EXPLOIT changes optimiser knobs in place
  const RunContext& ctx_;
  ReportSink& sink_;
  Data data_;
  torch::nn::Sequential net_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<storage::FileCheckpointStore> store_;
  int64_t last_checkpoint_step_ = -1;
  std::map<int64_t, google::protobuf::Struct> schedule_;
};

}  // namespace

absl::StatusOr<RunResult> Train(const TrainerConfig& config,
                                const RunContext& context, ReportSink& sink) {

  try {
    Run run(config, context, sink);
    return run.Go();
  } catch (const std::exception& e) {  // c10::Error and std::runtime_error
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

}  // namespace dial::trainer
