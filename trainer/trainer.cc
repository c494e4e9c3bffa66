#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/random.h"
#include "common/status.h"
#include "google/protobuf/util/json_util.h"
#include "storage/checkpoint_store.h"
#include "trainer/internal.h"
#include "trainer/lr_schedule.h"

namespace dial::trainer {

// Matrix products go to OpenBLAS, which runs single-threaded here
// (OPENBLAS_NUM_THREADS=1: its own pool fights LibTorch's OpenMP threads),
// so a second intra-op thread only helps the element-wise kernels, and at
// a batch of 128 the MLP ran slower on two threads than on one. Replicas
// of one thread each split the batch instead and compute the same
// gradient. Batch norm would normalise each replica's share on its own,
// which changes the model, so a model with it keeps one replica and gives
// it every thread.
int64_t CpuReplicas(const TrainerConfig& c, int threads) {
  const bool batch_norm = c.model != "mlp" && c.norm == "batch";
  if (batch_norm || threads < 2) return 1;
  return std::clamp<int64_t>(c.batch_size / 32, 1, threads);
}

namespace {

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

// Sets the live learning rate, momentum and weight decay whatever the
// optimiser.
void SetOptimizerKnobs(torch::optim::Optimizer& optimizer,
                       const std::string& kind, double lr, double momentum,
                       double weight_decay) {
  for (auto& group : optimizer.param_groups()) {
    if (kind == "sgd") {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      o.lr(lr).momentum(momentum).weight_decay(weight_decay);
    } else if (kind == "adamw") {
      auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
      o.lr(lr).weight_decay(weight_decay);
    } else if (kind == "rmsprop") {
      auto& o = static_cast<torch::optim::RMSpropOptions&>(group.options());
      o.lr(lr).momentum(momentum).weight_decay(weight_decay);
    } else {
      auto& o = static_cast<torch::optim::AdamOptions&>(group.options());
      o.lr(lr).weight_decay(weight_decay);
    }
  }
}

// Scales gradients to a global norm of at most max_norm, as
// torch::nn::utils::clip_grad_norm_ does, without reading the norm back to
// the host.
void ClipGradNorm(const std::vector<torch::Tensor>& grads, double max_norm) {
  std::vector<torch::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.norm(2));
  if (norms.empty()) return;
  auto coef = (max_norm / (torch::stack(norms).norm(2) + 1e-6)).clamp_max(1.0);
  for (const auto& g : grads) g.mul_(coef);
}

std::vector<torch::Tensor> Grads(torch::nn::Module& net) {
  std::vector<torch::Tensor> grads;
  for (auto& p : net.parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

std::string Serialize(const std::function<void(std::ostream&)>& save) {
  std::ostringstream out;
  save(out);
  return out.str();
}

// One data-parallel replica: a copy of the model and optimiser on one
// device, with its own dropout stream.
struct Replica {
  torch::Device device{torch::kCPU};
  at::Generator generator;
  torch::nn::Sequential net{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  torch::Tensor loss_sum;  // on device: the replica's share of the losses
  bool finite = true;      // the last step's gradients were finite
};

// Runs a job for every replica at once: replica 0's on the calling thread,
// the others' on threads that live as long as the pool (so each keeps its
// OpenMP team). Run is called from one thread at a time.
class ReplicaPool {
 public:
  ReplicaPool(int replicas, int threads_per_replica) {
    for (int r = 1; r < replicas; ++r) {
      threads_.emplace_back([this, r, threads_per_replica] {
        at::set_num_threads(threads_per_replica);
        Loop(r);
      });
    }
  }
  ~ReplicaPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // fn(r) for every replica r; rethrows the first exception.
  void Run(const std::function<void(int)>& fn) {
    if (threads_.empty()) return fn(0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      pending_ = static_cast<int>(threads_.size());
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    std::exception_ptr mine;
    try {
      fn(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void Loop(int r) {
    int64_t seen = 0;
    while (true) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      std::exception_ptr error;
      try {
        (*job)(r);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

// Sums `tensors[r][i]` over replicas r into every replica, in a fixed
// order so the result is the same on every replica and every run. Works
// for CPU and GPU tensors alike (through replica 0's device).
void AllReduceSum(std::vector<std::vector<torch::Tensor>>& tensors) {
  if (tensors.size() < 2) return;
  for (size_t i = 0; i < tensors[0].size(); ++i) {
    auto& total = tensors[0][i];
    for (size_t r = 1; r < tensors.size(); ++r) {
      total.add_(tensors[r][i].to(total.device()));
    }
    for (size_t r = 1; r < tensors.size(); ++r) tensors[r][i].copy_(total);
  }
}

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t examples = 0;
  std::string predictions_csv;  // when asked for
};

// Mean loss and accuracy over every example of `s`. Sums stay on the device
// and are read once; a short last batch counts for what it holds.
EvalResult Evaluate(torch::nn::Sequential& net, const Split& s, int64_t batch,
                    torch::Device device, Precision precision,
                    bool predictions) {
  torch::NoGradGuard no_grad;
  net->eval();
  const int64_t n = s.x.size(0);
  auto options = torch::TensorOptions().device(device);
  auto loss_sum = torch::zeros({}, options.dtype(torch::kFloat64));
  auto correct = torch::zeros({}, options.dtype(torch::kInt64));
  std::vector<torch::Tensor> predicted, confidence;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t end = std::min(n, start + batch);
    auto x = s.x.slice(0, start, end).to(device, /*non_blocking=*/true);
    auto y = s.y.slice(0, start, end).to(device, /*non_blocking=*/true);
    torch::Tensor out;
    {
      AutocastScope autocast(device, precision);
      out = net->forward(x);
    }
    out = out.to(torch::kFloat32);
    loss_sum += torch::nn::functional::cross_entropy(
                    out, y,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(
                        torch::kSum))
                    .to(torch::kFloat64);
    auto pred = out.argmax(1);
    correct += pred.eq(y).sum();
    if (predictions) {
      predicted.push_back(pred.cpu());
      confidence.push_back(out.softmax(1).amax(1).cpu());
    }
  }
  net->train();
  EvalResult result;
  result.examples = n;
  result.loss = loss_sum.item<double>() / double(n);
  result.accuracy = double(correct.item<int64_t>()) / double(n);
  if (predictions) {
    auto p = torch::cat(predicted),
         q = torch::cat(confidence).to(torch::kFloat32);
    auto y = s.y.cpu();
    auto ya = y.accessor<int64_t, 1>();
    auto pa = p.accessor<int64_t, 1>();
    auto qa = q.accessor<float, 1>();
    std::string& csv = result.predictions_csv;
    csv = "index,label,prediction,confidence\n";
    for (int64_t i = 0; i < n; ++i) {
      absl::StrAppend(&csv, i, ",", ya[i], ",", pa[i], ",", qa[i], "\n");
    }
  }
  return result;
}

class Run {
 public:
  Run(const TrainerConfig& c, const RunContext& ctx, ReportSink* sink)
      : c_(c),
        ctx_(ctx),
        sink_(sink),
        precision_(ParsePrecision(c.precision)) {}

  // Data, replicas, checkpoint store and (when asked) the restored state.
  // An evaluation builds one replica: it never steps.
  absl::StatusOr<int64_t> Setup(bool evaluate, bool with_test) {
    const int64_t gpus =
        torch::cuda::is_available() ? torch::cuda::device_count() : 0;
    if (!ctx_.checkpoint_root.empty()) {
      DIAL_ASSIGN_OR_RETURN(
          store_, storage::FileCheckpointStore::Create({ctx_.checkpoint_root}));
    }
    Restored restored;
    if (!ctx_.restore_checkpoint.empty()) {
      DIAL_ASSIGN_OR_RETURN(restored, ReadCheckpoint(ctx_.restore_checkpoint));
    }
    int64_t n = c_.replicas > 0 ? c_.replicas
                : gpus > 0      ? gpus
                                : CpuReplicas(c_, ctx_.threads);
    if (c_.replicas == 0 && gpus == 0 && CpuStreams(restored.rng)) {
      // A resume keeps the CPU replica count it was trained with (it follows
      // the thread count), so every dropout stream goes on where it stopped.
      // Even on fewer threads: then replicas share them.
      n = static_cast<int64_t>(restored.rng.size());
    }
    if (evaluate) n = 1;
#ifdef DIAL_WITH_NCCL
    if (gpus > 0 && n > 1 && n <= gpus) {
      try {
        all_reduce_ = MakeNcclAllReduce(static_cast<int>(n));
      } catch (const std::exception& e) {
        std::fprintf(stderr,
                     "dial-train: %s; summing gradients with device copies\n",
                     e.what());
      }
    }
#endif
    if (gpus > 0 && n > gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replicas ", n, " needs as many GPUs; ", gpus, " are visible"));
    }
    if (precision_ == Precision::kFp16 && gpus == 0) {
      return absl::InvalidArgumentError(
          "precision fp16 needs a CUDA device (autocast on the CPU supports "
          "bf16 only); use bf16 or fp32");
    }
    if (c_.batch_size < n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_size ", c_.batch_size, " is smaller than replicas ", n));
    }
    threads_per_replica_ = std::max<int>(1, ctx_.threads / static_cast<int>(n));
    torch::set_num_threads(threads_per_replica_);
    DIAL_ASSIGN_OR_RETURN(data_, LoadData(c_, with_test));
    if (c_.batch_size > data_.train.x.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_size ", c_.batch_size, " is larger than the training set (",
          data_.train.x.size(0), ")"));
    }
    for (int64_t r = 0; r < n; ++r) {
      Replica rep;
      rep.device = gpus > 0 ? torch::Device(torch::kCUDA, static_cast<int>(r))
                            : torch::Device(torch::kCPU);
      rep.generator = rep.device.is_cpu()
                          ? at::detail::createCPUGenerator()
                          : at::globalContext().defaultGenerator(rep.device);
      // The same initialisation on every replica.
      torch::manual_seed(static_cast<uint64_t>(c_.seed));
      DIAL_ASSIGN_OR_RETURN(rep.net, BuildModel(c_, data_.train.x.size(1),
                                                data_.classes, rep.generator));
      rep.net->to(rep.device);
      rep.optimizer = BuildOptimizer(c_, rep.net->parameters());
      rep.loss_sum = torch::zeros(
          {}, torch::TensorOptions().device(rep.device).dtype(torch::kFloat64));
      replicas_.push_back(std::move(rep));
    }
    // Different dropout streams per replica, seeded after the builds.
    for (int64_t r = 0; r < n; ++r) {
      auto& gen = replicas_[r].generator;
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_current_seed(
          SplitMix64(static_cast<uint64_t>(c_.seed) ^
                     SplitMix64(static_cast<uint64_t>(r) + 77)));
    }
    scaler_ = std::make_unique<LossScaler>(precision_ == Precision::kFp16,
                                           LossScaler::Options{});
    DIAL_RETURN_IF_ERROR(ParseSchedule());
    if (ctx_.restore_checkpoint.empty()) return 0;
    return Restore(restored, /*streams=*/!evaluate);
  }

  absl::StatusOr<RunResult> Train() {
    DIAL_ASSIGN_OR_RETURN(int64_t step,
                          Setup(/*evaluate=*/false, /*with_test=*/false));
    if (step > 0) {
      std::fprintf(stderr,
                   "dial-train: resuming from checkpoint %s at step %lld\n",
                   restored_id_.c_str(), static_cast<long long>(step));
      // A resumed run takes the scheduled knobs in force at its step.
      if (auto it = schedule_.upper_bound(step); it != schedule_.begin()) {
        DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(std::prev(it)->second));
      }
    } else {
      std::fprintf(stderr,
                   "dial-train: starting at step 0 (%zu replica%s, %s)\n",
                   replicas_.size(), replicas_.size() == 1 ? "" : "s",
                   replicas_[0].device.str().c_str());
    }
    return Loop(step);
  }

  absl::StatusOr<std::map<std::string, double>> EvaluateOnly(
      const std::string& split, const std::string& predictions_path) {
    if (ctx_.restore_checkpoint.empty()) {
      return absl::InvalidArgumentError("evaluation needs a checkpoint id");
    }
    DIAL_RETURN_IF_ERROR(
        Setup(/*evaluate=*/true, /*with_test=*/split == "test").status());
    const Split& s = split == "test" ? data_.test : data_.val;
    EvalResult r = EvaluateLead(s, !predictions_path.empty());
    if (!predictions_path.empty()) {
      std::ofstream out(predictions_path, std::ios::trunc);
      out << r.predictions_csv;
      if (!out.flush()) {
        return absl::InvalidArgumentError("cannot write " + predictions_path);
      }
    }
    return std::map<std::string, double>{
        {split + "_loss", r.loss},
        {split + "_accuracy", r.accuracy},
        {split + "_examples", static_cast<double>(r.examples)}};
  }

 private:
  // Evaluates replica 0's model with every thread of the run (training
  // gives this thread only its replica's share).
  EvalResult EvaluateLead(const Split& s, bool predictions) {
    at::set_num_threads(ctx_.threads);
    struct Back {
      int threads;
      ~Back() { at::set_num_threads(threads); }
    } back{threads_per_replica_};
    return Evaluate(replicas_[0].net, s,
                    std::max(c_.eval_batch_size, c_.batch_size),
                    replicas_[0].device, precision_, predictions);
  }

  // Loads weights and optimiser state into every replica.
  absl::Status LoadModel(std::map<std::string, std::string>& files,
                         const std::string& id) {
    if (!files.count("model.pt") || !files.count("optimizer.pt")) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", id, " has no model or optimizer"));
    }
    // Other model knobs, or a CNN saved before Dial fused its block tail.
    auto misfit = [&](absl::string_view why) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", id,
          " does not fit this trial's model and optimizer (written with other "
          "model knobs or by an older Dial?): ",
          why));
    };
    // LibTorch loads a tensor of another shape without a word: compare.
    auto shapes = [](torch::nn::Module& net) {
      std::map<std::string, std::vector<int64_t>> out;
      for (const auto& p : net.named_parameters()) {
        out[p.key()] = p.value().sizes().vec();
      }
      for (const auto& b : net.named_buffers()) {
        out[b.key()] = b.value().sizes().vec();
      }
      return out;
    };
    const auto expected = shapes(*replicas_[0].net);
    try {
      for (auto& rep : replicas_) {
        std::istringstream model(files["model.pt"]);
        torch::load(rep.net, model, rep.device);
        for (const auto& [name, sizes] : shapes(*rep.net)) {
          if (sizes != expected.at(name)) {
            return misfit(absl::StrCat(
                name, " has shape [", absl::StrJoin(sizes, ", "), "] there, [",
                absl::StrJoin(expected.at(name), ", "), "] here"));
          }
        }
        std::istringstream optim(files["optimizer.pt"]);
        torch::load(*rep.optimizer, optim, rep.device);
      }
    } catch (const c10::Error& e) {
      return misfit(e.what_without_backtrace());
    }
    return absl::OkStatus();
  }

  // A checkpoint's files, with its dropout streams read ahead of building
  // the replicas.
  struct Restored {
    std::map<std::string, std::string> files;
    std::vector<torch::Tensor> rng;
  };

  // Whether `rng` holds the streams of as many CPU replicas as `replicas:
  // 0` gives this model on that many threads: a count the resume can take
  // over.
  bool CpuStreams(const std::vector<torch::Tensor>& rng) const {
    static const int64_t cpu_state =
        at::detail::createCPUGenerator().get_state().numel();
    const int64_t n = static_cast<int64_t>(rng.size());
    if (n == 0 || CpuReplicas(c_, static_cast<int>(n)) != n) return false;
    return std::all_of(rng.begin(), rng.end(), [](const torch::Tensor& t) {
      return t.numel() == cpu_state;
    });
  }

  // Reads checkpoint `id`, or the newest earlier one of its trial that
  // verifies when `id` is damaged (restored_id_ says which).
  absl::StatusOr<Restored> ReadCheckpoint(const std::string& id) {
    restored_id_ = id;
    if (!store_) {
      return absl::InvalidArgumentError(
          "restoring a checkpoint needs a checkpoint root");
    }
    auto read = store_->Read(id);
    if (absl::IsDataLoss(read.status())) {
      // A damaged checkpoint (checksum mismatch): fall back to the newest
      // earlier one of this trial that verifies. The steps in between are
      // trained again; the scheduler ignores the reports it already has.
      std::fprintf(stderr, "dial-train: checkpoint %s is damaged (%s)\n",
                   id.c_str(), std::string(read.status().message()).c_str());
      int64_t bad_step = std::numeric_limits<int64_t>::max();
      (void)absl::SimpleAtoi(id.substr(id.rfind('/') + 1), &bad_step);
      auto steps = store_->ListSteps(ctx_.study, ctx_.trial);
      if (steps.ok()) {
        for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
          if (*it >= bad_step) continue;
          const std::string earlier =
              storage::CheckpointStore::MakeId(ctx_.study, ctx_.trial, *it);
          read = store_->Read(earlier);
          if (read.ok()) {
            std::fprintf(stderr, "dial-train: falling back to checkpoint %s\n",
                         earlier.c_str());
            restored_id_ = earlier;
            break;
          }
        }
      }
      if (!read.ok()) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", id,
                         " is damaged and no earlier checkpoint of trial ",
                         ctx_.trial, " verifies"));
      }
    }
    if (!read.ok()) return read.status();
    Restored restored;
    restored.files = std::move(*read);
    auto& files = restored.files;
    if (!files.count("step") || !files.count("rng.pt")) {
      return absl::DataLossError(absl::StrCat("checkpoint ", restored_id_,
                                              " has no step or rng state"));
    }
    std::istringstream rng(files["rng.pt"]);
    torch::load(restored.rng, rng);
    return restored;
  }

  // Puts a read checkpoint's state into the replicas (the dropout streams
  // only when `streams`); returns its step.
  absl::StatusOr<int64_t> Restore(Restored& restored, bool streams) {
    auto& files = restored.files;
    const std::string& id = restored_id_;
    DIAL_RETURN_IF_ERROR(LoadModel(files, id));
    const auto& states = restored.rng;
    if (streams && states.size() != replicas_.size()) {
      std::fprintf(stderr,
                   "dial-train: checkpoint %s has %zu replicas' dropout "
                   "streams, this run %zu: dropout starts fresh streams\n",
                   id.c_str(), states.size(), replicas_.size());
    } else if (streams) {
      try {
        for (size_t r = 0; r < states.size(); ++r) {
          auto& gen = replicas_[r].generator;
          std::lock_guard<std::mutex> lock(gen.mutex());
          gen.set_state(states[r]);
        }
      } catch (const c10::Error&) {  // e.g. a GPU run's streams on the CPU
        std::fprintf(stderr,
                     "dial-train: checkpoint %s has another device's dropout "
                     "streams: dropout starts fresh streams\n",
                     id.c_str());
      }
    }
    if (files.count("scaler"))
      DIAL_RETURN_IF_ERROR(scaler_->Load(files["scaler"]));
    if (!absl::SimpleAtoi(files["step"], &last_checkpoint_step_)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", id, ": bad step"));
    }
    return last_checkpoint_step_;
  }

  // Takes a better trial's weights and optimiser state, then the new
  // optimiser hyperparameters, and goes on from the current step.
  absl::Status Exploit(const Decision& decision) {
    if (!store_) {
      return absl::FailedPreconditionError("EXPLOIT needs a checkpoint root");
    }
    DIAL_ASSIGN_OR_RETURN(auto files, store_->Read(decision.checkpoint));
    DIAL_RETURN_IF_ERROR(LoadModel(files, decision.checkpoint));
    DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(decision.params));
    std::fprintf(stderr, "dial-train: exploited checkpoint %s (lr %g)\n",
                 decision.checkpoint.c_str(), c_.lr);
    return absl::OkStatus();
  }

  // Changes lr, momentum and weight_decay of the live optimisers.
  absl::Status ApplyOptimizerKnobs(const google::protobuf::Struct& params) {
    for (const auto& [name, value] : params.fields()) {
      DIAL_RETURN_IF_ERROR(CheckKnob("params." + name, name, value));
      if (name == "lr") c_.lr = value.number_value();
      if (name == "momentum") c_.momentum = value.number_value();
      if (name == "weight_decay") c_.weight_decay = value.number_value();
    }
    return absl::OkStatus();
  }

  // "STEP:{json};STEP:{json}" -> step -> knobs.
  absl::Status ParseSchedule() {
    if (c_.schedule.empty()) return absl::OkStatus();
    for (absl::string_view part :
         absl::StrSplit(c_.schedule, ';', absl::SkipEmpty())) {
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

  // Batch-norm running statistics (and any other float buffers) averaged
  // over the replicas, so evaluation and checkpoints see all the data.
  void AverageBuffers() {
    if (replicas_.size() < 2) return;
    std::vector<std::vector<torch::Tensor>> buffers;
    for (auto& rep : replicas_) {
      buffers.emplace_back();
      for (auto& b : rep.net->buffers()) {
        if (b.is_floating_point()) buffers.back().push_back(b);
      }
    }
    torch::NoGradGuard no_grad;
    Sum(buffers);
    for (auto& per_replica : buffers) {
      for (auto& b : per_replica) b.div_(static_cast<double>(replicas_.size()));
    }
  }

  // Across replicas: NCCL on GPUs where built with it, else in-process.
  void Sum(std::vector<std::vector<torch::Tensor>>& tensors) {
    if (all_reduce_) return all_reduce_->Sum(tensors);
    AllReduceSum(tensors);
  }

  absl::StatusOr<std::string> Checkpoint(int64_t step,
                                         const std::string& predictions) {
    if (!store_) return std::string();
    if (step == last_checkpoint_step_) {
      return storage::CheckpointStore::MakeId(ctx_.study, ctx_.trial, step);
    }
    Replica& lead = replicas_[0];
    std::map<std::string, std::string> files;
    files["model.pt"] =
        Serialize([&](std::ostream& out) { torch::save(lead.net, out); });
    files["optimizer.pt"] = Serialize(
        [&](std::ostream& out) { torch::save(*lead.optimizer, out); });
    std::vector<torch::Tensor> states;
    for (auto& rep : replicas_) {
      std::lock_guard<std::mutex> lock(rep.generator.mutex());
      states.push_back(rep.generator.get_state());
    }
    files["rng.pt"] =
        Serialize([&](std::ostream& out) { torch::save(states, out); });
    if (scaler_->enabled()) files["scaler"] = scaler_->Save();
    if (!predictions.empty()) files["predictions.csv"] = predictions;
    files["step"] = std::to_string(step);
    auto info = store_->Write(ctx_.study, ctx_.trial, step, files);
    if (absl::IsAlreadyExists(info.status())) {
      // Written by an earlier attempt that got this far: the same state,
      // unless it was damaged since; then this one replaces it.
      const std::string id =
          storage::CheckpointStore::MakeId(ctx_.study, ctx_.trial, step);
      if (!absl::IsDataLoss(store_->Verify(id).status())) return id;
      DIAL_RETURN_IF_ERROR(store_->Delete(id));
      info = store_->Write(ctx_.study, ctx_.trial, step, files);
    }
    if (!info.ok()) return info.status();
    last_checkpoint_step_ = step;
    return info->id;
  }

  // One optimisation step over the global batch: each replica takes its
  // share, gradients are summed across replicas (each replica's loss is
  // weighted by its share, so the sum is the gradient of the global mean),
  // then every replica unscales, clips and steps identically.
  void Step(int64_t step, const Batch& batch) {
    const int64_t n = static_cast<int64_t>(replicas_.size());
    const int64_t per = c_.batch_size / n, extra = c_.batch_size % n;
    const double lr = LearningRate(c_, step);
    pool_->Run([&](int r) {
      Replica& rep = replicas_[r];
      const int64_t from = r * per + std::min<int64_t>(r, extra);
      const int64_t size = per + (r < extra ? 1 : 0);
      auto x = batch.x.slice(0, from, from + size).to(rep.device, true);
      auto y = batch.y.slice(0, from, from + size).to(rep.device, true);
      rep.optimizer->zero_grad();
      torch::Tensor out;
      {
        AutocastScope autocast(rep.device, precision_);
        out = rep.net->forward(x);
      }
      auto loss = torch::nn::functional::cross_entropy(
          out.to(torch::kFloat32), y,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
              c_.label_smoothing));
      if (n > 1) loss = loss * (double(size) / double(c_.batch_size));
      scaler_->Scale(loss).backward();
      rep.loss_sum += loss.detach().to(torch::kFloat64);
    });
    if (n > 1) {
      std::vector<std::vector<torch::Tensor>> grads;
      for (auto& rep : replicas_) grads.push_back(Grads(*rep.net));
      Sum(grads);
    }
    pool_->Run([&](int r) {
      Replica& rep = replicas_[r];
      auto grads = Grads(*rep.net);
      rep.finite = scaler_->Unscale(grads);
      if (!rep.finite) return;  // fp16 overflow: skip this step
      if (c_.grad_clip > 0) ClipGradNorm(grads, c_.grad_clip);
      // The schedule is a function of the step, so resumes continue exactly.
      SetOptimizerKnobs(*rep.optimizer, c_.optimizer, lr, c_.momentum,
                        c_.weight_decay);
      rep.optimizer->step();
    });
    scaler_->Update(replicas_[0].finite);
  }

  double TakeTrainLoss(int64_t steps) {
    double sum = 0;
    for (auto& rep : replicas_) {
      sum += rep.loss_sum.item<double>();
      rep.loss_sum.zero_();
    }
    return steps > 0 ? sum / double(steps) : NAN;
  }

  absl::StatusOr<RunResult> Loop(int64_t step) {
    RunResult result;
    result.last_step = step;
    pool_ = std::make_unique<ReplicaPool>(static_cast<int>(replicas_.size()),
                                          threads_per_replica_);
    Prefetcher input(data_.train, c_.seed, c_.batch_size, step + 1, c_.steps,
                     static_cast<int>(c_.prefetch),
                     !replicas_[0].device.is_cpu());
    const int64_t per_epoch =
        std::max<int64_t>(1, data_.train.x.size(0) / c_.batch_size);
    int64_t loss_steps = 0;
    double train_seconds = 0;
    auto started = std::chrono::steady_clock::now();
    for (auto& rep : replicas_) rep.net->train();
    while (step < c_.steps) {
      if (auto it = schedule_.find(step); it != schedule_.end()) {
        DIAL_RETURN_IF_ERROR(ApplyOptimizerKnobs(it->second));
      }
      if (ctx_.interrupt && ctx_.interrupt->load()) {
        // Asked to stop (e.g. the worker shuts down): save and report.
        AverageBuffers();
        DIAL_ASSIGN_OR_RETURN(std::string id, Checkpoint(step, ""));
        Report report;
        report.step = step;
        report.checkpoint = id;
        report.metrics["train_loss"] = TakeTrainLoss(loss_steps);
        if (step > 0) (void)sink_->OnReport(report);
        result.interrupted = true;
        return result;
      }
      ++step;
      Step(step, input.Next());
      ++loss_steps;

      if (step % c_.eval_every != 0 && step != c_.steps) continue;
      train_seconds += std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - started)
                           .count();
      Report report;
      report.step = step;
      report.metrics["train_loss"] = TakeTrainLoss(loss_steps);
      AverageBuffers();
      const bool checkpoint = c_.checkpoint_every == 0 ||
                              step % c_.checkpoint_every == 0 ||
                              step == c_.steps;
      EvalResult val =
          EvaluateLead(data_.val, checkpoint && store_ && c_.save_predictions);
      report.metrics["val_loss"] = val.loss;
      report.metrics["val_accuracy"] = val.accuracy;
      report.metrics["epoch"] = static_cast<double>(step) / double(per_epoch);
      report.metrics["lr"] = LearningRate(c_, step);
      report.metrics["samples_per_s"] =
          train_seconds > 0 ? double(loss_steps * c_.batch_size) / train_seconds
                            : 0;
      report.metrics["input_wait"] =
          train_seconds > 0 ? input.TakeWaitSeconds() / train_seconds : 0;
      if (scaler_->enabled()) {
        report.metrics["loss_scale"] = scaler_->scale();
        report.metrics["skipped_steps"] = double(scaler_->skipped_steps());
      }
      if (checkpoint) {
        DIAL_ASSIGN_OR_RETURN(report.checkpoint,
                              Checkpoint(step, val.predictions_csv));
      }
      result.last_step = step;
      result.final_metrics = report.metrics;
      DIAL_ASSIGN_OR_RETURN(Decision decision, sink_->OnReport(report));
      if (decision.action == Action::kExploit) {
        DIAL_RETURN_IF_ERROR(Exploit(decision));
        ++result.exploits;
      } else if (decision.action != Action::kContinue) {
        result.stopped = true;
        return result;
      }
      loss_steps = 0;
      train_seconds = 0;
      started = std::chrono::steady_clock::now();
    }
    if (result.final_metrics.empty()) {
      // Resumed at the last step (e.g. requeued right after finishing): the
      // final evaluation is all that is left.
      Report report;
      report.step = step;
      EvalResult val = EvaluateLead(data_.val, false);
      report.metrics["val_loss"] = val.loss;
      report.metrics["val_accuracy"] = val.accuracy;
      DIAL_ASSIGN_OR_RETURN(report.checkpoint, Checkpoint(step, ""));
      result.final_metrics = report.metrics;
      DIAL_RETURN_IF_ERROR(sink_->OnReport(report).status());
    }
    return result;
  }

  TrainerConfig c_;  // a copy: EXPLOIT changes optimiser knobs in place
  const RunContext& ctx_;
  ReportSink* sink_;
  const Precision precision_;
  int threads_per_replica_ = 1;
  Data data_;
  std::vector<Replica> replicas_;
  std::unique_ptr<ReplicaPool> pool_;
  std::unique_ptr<AllReduce> all_reduce_;  // NCCL, multi-GPU builds only
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<storage::FileCheckpointStore> store_;
  int64_t last_checkpoint_step_ = -1;
  std::string restored_id_;  // the checkpoint actually resumed from
  std::map<int64_t, google::protobuf::Struct> schedule_;
};

}  // namespace

absl::StatusOr<RunResult> Train(const TrainerConfig& config,
                                const RunContext& context, ReportSink& sink) {
  try {
    Run run(config, context, &sink);
    return run.Train();
  } catch (const std::exception& e) {  // c10::Error and std::runtime_error
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

absl::StatusOr<std::map<std::string, double>> EvaluateCheckpoint(
    const TrainerConfig& config, const RunContext& context,
    const std::string& split, const std::string& predictions_path) {
  if (split != "test" && split != "val") {
    return absl::InvalidArgumentError("split must be test or val, got '" +
                                      split + "'");
  }
  try {
    Run run(config, context, nullptr);
    return run.EvaluateOnly(split, predictions_path);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

}  // namespace dial::trainer
