// Data-parallel replicas (replicas.cc): building one copy of the model and
// optimiser per device, the thread pool that runs a job on every replica
// at once, and sums across replicas. Includes LibTorch (through
// trainer/internal.h): for trainer/ and tests/trainer only.
// Thread-safety is stated per declaration.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/trainer_knobs.h"
#include "trainer/internal.h"

namespace dial::trainer {

// Replicas for `replicas: 0` on the CPU with `threads` threads: one per
// thread (at least 32 examples each) unless the model has batch norm,
// which a split batch would change; then 1.
int64_t CpuReplicas(const TrainerConfig& c, int threads);

// `c.optimizer` over `params`, with the configured knobs.
std::unique_ptr<torch::optim::Optimizer> BuildOptimizer(
    const TrainerConfig& c, std::vector<torch::Tensor> params);

// One data-parallel replica: a copy of the model and optimiser on one
// device, with its own dropout stream. Used by one thread at a time.
struct Replica {
  torch::Device device{torch::kCPU};
  at::Generator generator;
  torch::nn::Sequential net{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  torch::Tensor loss_sum;  // on device: the replica's share of the losses
  bool finite = true;      // the last step's gradients were finite
};

// `n` replicas of `c.model` for `features` inputs and `classes` outputs:
// replica r on cuda:r when `gpus` > 0, else on the CPU. Every replica
// starts from the same weights (seeded by c.seed); the dropout streams
// differ. INVALID_ARGUMENT when the inputs do not suit the model.
absl::StatusOr<std::vector<Replica>> BuildReplicas(const TrainerConfig& c,
                                                   int64_t features,
                                                   int64_t classes, int64_t n,
                                                   int64_t gpus);

// Runs a job for every replica at once: replica 0's on the calling thread,
// the others' on threads that live as long as the pool (so each keeps its
// OpenMP team). Run is called from one thread at a time.
class ReplicaPool {
 public:
  ReplicaPool(int replicas, int threads_per_replica);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // fn(r) for every replica r, returning once all have finished. `fn` calls
  // LibTorch, which throws: the pool catches what a job throws and returns
  // INTERNAL with its message (replica 0's error first, else the first
  // other replica's to fail).
  absl::Status Run(const std::function<void(int)>& fn);

 private:
  void Loop(int r);

  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;  // guarded by mu_
  int64_t generation_ = 0;                         // guarded by mu_
  int pending_ = 0;                                // guarded by mu_
  bool stop_ = false;                              // guarded by mu_
  absl::Status error_;                             // guarded by mu_
  std::vector<std::thread> threads_;
};

// Sums `tensors[r][i]` over replicas r into every replica, in a fixed
// order so the result is the same on every replica and every run. Works
// for CPU and GPU tensors alike (through replica 0's device).
void AllReduceSum(std::vector<std::vector<torch::Tensor>>& tensors);

// The same sum through `nccl` when there is one (multi-GPU builds), else
// in-process. Errors are NCCL's (see AllReduce::Sum).
absl::Status SumAcross(AllReduce* nccl,
                       std::vector<std::vector<torch::Tensor>>& tensors);

// Batch-norm running statistics (and any other float buffers) averaged
// over the replicas, so evaluation and checkpoints see all the data.
absl::Status AverageBuffers(std::vector<Replica>& replicas, AllReduce* nccl);

}  // namespace dial::trainer
