// Internals of the trainer shared by its LibTorch translation units and
// their tests: data and the input pipeline (data.cc), models (models.cc),
// sums over GPUs (nccl.cc) and mixed precision (amp.cc); replicas.h,
// evaluation.h and checkpoint_io.h build on them. This header includes
// <torch/torch.h>, so
// only trainer/ and tests/trainer include it; the public API (trainer.h)
// stays torch-free. Thread-safety is stated per class.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/trainer_knobs.h"

namespace dial::trainer {

// ---------------------------------------------------------------- data.cc

struct Split {
  torch::Tensor x;  // float [N, D], normalised
  torch::Tensor y;  // int64 [N]
};

struct Data {
  Split train;  // what the optimiser sees
  Split val;    // carved from the training data; what the objective sees
  Split test;   // the held-out split; empty unless asked for
  int64_t classes = 0;
};

// Loads `c.dataset`. The validation split is `c.val_fraction` of the
// training data, chosen by a permutation fixed for the dataset (not by the
// trial's seed), so every trial of a study validates on the same examples.
// The test split is read only when `with_test`. INVALID_ARGUMENT for
// missing or malformed files, naming the path.
absl::StatusOr<Data> LoadData(const TrainerConfig& c, bool with_test);

// Epoch `epoch`'s order of n training examples: a function of (seed, epoch)
// only, so a resumed run visits the data as an uninterrupted one did.
torch::Tensor EpochOrder(int64_t seed, int64_t epoch, int64_t n);

// The global batch of one step.
struct Batch {
  int64_t step = 0;
  torch::Tensor x, y;
};

// Gathers the batches of steps first..last on a background thread, at most
// `depth` ahead of the consumer, so the step loop waits on input only when
// the gather is slower than a step. Batches are in pinned memory when
// `pin`. One consumer thread; the destructor stops and joins the producer.
class Prefetcher {
 public:
  Prefetcher(const Split& train, int64_t seed, int64_t batch,
             int64_t first_step, int64_t last_step, int depth, bool pin);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The batch of the next step (first_step, first_step + 1, ...); never
  // call it past last_step. INTERNAL, with LibTorch's message, when the
  // producer failed.
  absl::StatusOr<Batch> Next();
  // Seconds Next() has spent blocked since the last call to this.
  double TakeWaitSeconds();

 private:
  void Produce();
  void ProduceBatches();

  const Split& train_;
  const int64_t seed_, batch_, last_step_;
  const size_t depth_;
  const bool pin_;
  int64_t next_step_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;  // guarded by mu_
  bool stop_ = false;        // guarded by mu_
  std::string error_;        // guarded by mu_
  double wait_seconds_ = 0;  // consumer only
  std::thread thread_;
};

// -------------------------------------------------------------- models.cc

// Builds the `c.model` network for inputs of `features` values (square
// images for cnn and resnet, which arrive flattened) and `classes` outputs.
// Dropout layers draw their masks from `dropout_generator`, so each replica
// has its own stream and a checkpoint can save it. INVALID_ARGUMENT when
// the inputs do not suit the model.
absl::StatusOr<torch::nn::Sequential> BuildModel(
    const TrainerConfig& c, int64_t features, int64_t classes,
    at::Generator dropout_generator);

// --------------------------------------------------------------- fused.cc

// A conv block's batch norm (a BatchNorm2d, registered as `norm`), ReLU
// and 2x2 pooling (max, or avg when `avg`) as one module. On float32 CPU
// input (made channels-last) it runs them as one fused kernel with a
// hand-written backward (training, and evaluation without gradients);
// anything else (CUDA, bf16 autocast) goes through the three LibTorch ops. Both
// paths compute the same function, the fused one without storing the
// intermediate activations.
class NormReluPoolImpl : public torch::nn::Module {
 public:
  NormReluPoolImpl(int64_t channels, bool avg);
  torch::Tensor forward(const torch::Tensor& x);
  // Whether forward(x) takes the fused path.
  bool Fusable(const torch::Tensor& x) const;
  // The same function through LibTorch's own ops (for tests).
  torch::Tensor Unfused(const torch::Tensor& x);

  torch::nn::BatchNorm2d norm{nullptr};

 private:
  bool avg_;
};
TORCH_MODULE(NormReluPool);

// ---------------------------------------------------------------- nccl.cc

// Sums tensors[r][i] over the replicas r in place: every replica ends with
// the total. Called from one thread at a time.
class AllReduce {
 public:
  virtual ~AllReduce() = default;
  // INTERNAL when the tensors do not suit the reduction (another replica
  // count, device, shape, layout or a type it cannot sum; checked before
  // anything is summed) or the reduction itself fails.
  virtual absl::Status Sum(
      std::vector<std::vector<torch::Tensor>>& tensors) = 0;
};

// An NCCL all-reduce over CUDA devices 0 .. devices - 1 (replica r on
// device r). INTERNAL when NCCL cannot set up its communicators (the
// trainer then sums in-process). Defined only in builds with DIAL_WITH_NCCL.
absl::StatusOr<std::unique_ptr<AllReduce>> MakeNcclAllReduce(int devices);

// ----------------------------------------------------------------- amp.cc

enum class Precision { kFp32, kBf16, kFp16 };
Precision ParsePrecision(const std::string& name);

// Turns autocast on for `device`'s type at `precision` while in scope
// (fp32: does nothing). Autocast state is thread-local, so every replica
// thread opens its own scope. The one place that knows how the autocast
// API differs between LibTorch 1.13 and 2.x.
class AutocastScope {
 public:
  AutocastScope(torch::Device device, Precision precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  torch::DeviceType type_;
  bool active_ = false;
  bool was_enabled_ = false;
  at::ScalarType old_dtype_ = at::kFloat;
};

// Dynamic loss scaling for fp16 training: the loss is multiplied by
// scale() before backward; gradients are unscaled before clipping and the
// step. A step whose gradients hold an inf or nan is skipped and the scale
// multiplied by `backoff`; after `growth_interval` good steps in a row the
// scale grows by `growth`. Disabled, it is the identity and never skips.
// Not thread-safe; the trainer calls it from the step loop only.
class LossScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth = 2.0;
    double backoff = 0.5;
    int64_t growth_interval = 2000;
  };
  LossScaler(bool enabled, Options options);

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }

  torch::Tensor Scale(const torch::Tensor& loss) const;
  // Divides `grads` by the scale in place and says whether every one is
  // finite (one host sync when enabled; none when disabled).
  bool Unscale(const std::vector<torch::Tensor>& grads) const;
  // Records the outcome of a step: `finite` false means it was skipped.
  void Update(bool finite);

  // "scale good_steps skipped", for checkpoints.
  std::string Save() const;
  absl::Status Load(const std::string& text);

 private:
  bool enabled_;
  Options options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace dial::trainer
