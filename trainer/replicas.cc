#include "trainer/replicas.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status.h"

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

absl::StatusOr<std::vector<Replica>> BuildReplicas(const TrainerConfig& c,
                                                   int64_t features,
                                                   int64_t classes, int64_t n,
                                                   int64_t gpus) {
  std::vector<Replica> replicas;
  for (int64_t r = 0; r < n; ++r) {
    Replica rep;
    rep.device = gpus > 0 ? torch::Device(torch::kCUDA, static_cast<int>(r))
                          : torch::Device(torch::kCPU);
    rep.generator = rep.device.is_cpu()
                        ? at::detail::createCPUGenerator()
                        : at::globalContext().defaultGenerator(rep.device);
    // The same initialisation on every replica.
    torch::manual_seed(static_cast<uint64_t>(c.seed));
    DIAL_ASSIGN_OR_RETURN(rep.net,
                          BuildModel(c, features, classes, rep.generator));
    rep.net->to(rep.device);
    rep.optimizer = BuildOptimizer(c, rep.net->parameters());
    rep.loss_sum = torch::zeros(
        {}, torch::TensorOptions().device(rep.device).dtype(torch::kFloat64));
    replicas.push_back(std::move(rep));
  }
  // Different dropout streams per replica, seeded after the builds.
  for (int64_t r = 0; r < n; ++r) {
    auto& gen = replicas[r].generator;
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(SplitMix64(static_cast<uint64_t>(c.seed) ^
                                    SplitMix64(static_cast<uint64_t>(r) + 77)));
  }
  return replicas;
}

namespace {

// Runs a replica's job. The boundary where LibTorch's exceptions (c10::Error,
// std::runtime_error) become a status: they cannot cross threads.
absl::Status RunJob(const std::function<void(int)>& fn, int r) {
  try {
    fn(r);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("libtorch (replica ", r, "): ", e.what()));
  } catch (...) {
    return absl::InternalError(
        absl::StrCat("replica ", r, ": unknown exception"));
  }
  return absl::OkStatus();
}

}  // namespace

ReplicaPool::ReplicaPool(int replicas, int threads_per_replica) {
  for (int r = 1; r < replicas; ++r) {
    threads_.emplace_back([this, r, threads_per_replica] {
      at::set_num_threads(threads_per_replica);
      Loop(r);
    });
  }
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

absl::Status ReplicaPool::Run(const std::function<void(int)>& fn) {
  if (threads_.empty()) return RunJob(fn, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_ = static_cast<int>(threads_.size());
    error_ = absl::OkStatus();
    ++generation_;
  }
  cv_.notify_all();
  absl::Status mine = RunJob(fn, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  if (!mine.ok()) return mine;
  return error_;
}

void ReplicaPool::Loop(int r) {
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
    absl::Status status = RunJob(*job, r);
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    if (--pending_ == 0) done_.notify_all();
  }
}

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

absl::Status SumAcross(AllReduce* nccl,
                       std::vector<std::vector<torch::Tensor>>& tensors) {
  if (nccl != nullptr) return nccl->Sum(tensors);
  AllReduceSum(tensors);
  return absl::OkStatus();
}

absl::Status AverageBuffers(std::vector<Replica>& replicas, AllReduce* nccl) {
  if (replicas.size() < 2) return absl::OkStatus();
  std::vector<std::vector<torch::Tensor>> buffers;
  for (auto& rep : replicas) {
    buffers.emplace_back();
    for (auto& b : rep.net->buffers()) {
      if (b.is_floating_point()) buffers.back().push_back(b);
    }
  }
  torch::NoGradGuard no_grad;
  DIAL_RETURN_IF_ERROR(SumAcross(nccl, buffers));
  for (auto& per_replica : buffers) {
    for (auto& b : per_replica) b.div_(static_cast<double>(replicas.size()));
  }
  return absl::OkStatus();
}

}  // namespace dial::trainer
