#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status.h"
#include "trainer/idx.h"
#include "trainer/internal.h"

namespace dial::trainer {
namespace {

absl::StatusOr<Split> LoadFashionSplit(const std::string& dir,
                                       const std::string& prefix) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  auto images = ReadIdxGz(images_path);
  if (absl::IsNotFound(images.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fashion-MNIST not found: ", images.status().message(),
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
  split.y = torch::from_blob(labels.data.data(), {n}, torch::kUInt8)
                .to(torch::kInt64);
  return split;
}

// Gaussian clusters around seeded class centres; the test split uses the
// same centres and fresh noise.
std::pair<Split, Split> MakeSynthetic(const TrainerConfig& c) {
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
  Split train = make(c.synthetic_samples);
  Split test = make(std::max<int64_t>(16, c.synthetic_samples / 4));
  return {train, test};
}

}  // namespace

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

absl::StatusOr<Data> LoadData(const TrainerConfig& c, bool with_test) {
  Split all;
  Data data;
  if (c.dataset == "synthetic") {
    auto [train, test] = MakeSynthetic(c);
    all = train;
    if (with_test) data.test = test;
    data.classes = c.synthetic_classes;
  } else {
    DIAL_ASSIGN_OR_RETURN(all, LoadFashionSplit(c.data_dir, "train"));
    if (with_test) {
      DIAL_ASSIGN_OR_RETURN(data.test, LoadFashionSplit(c.data_dir, "t10k"));
    }
    data.classes = 10;
  }
  // A fixed permutation (not the trial's seed): the same validation
  // examples for every trial, disjoint from the ones it trains on.
  const int64_t n = all.x.size(0);
  const int64_t val = std::max<int64_t>(
      1, static_cast<int64_t>(std::llround(c.val_fraction * double(n))));
  if (val >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction ", c.val_fraction,
                     " leaves no training examples of ", n));
  }
  torch::Tensor order = EpochOrder(/*seed=*/0x7a1d, /*epoch=*/0, n);
  auto take = [&](int64_t from, int64_t to) {
    auto ids = order.slice(0, from, to);
    return Split{all.x.index_select(0, ids), all.y.index_select(0, ids)};
  };
  data.val = take(0, val);
  data.train = take(val, n);
  return data;
}

Prefetcher::Prefetcher(const Split& train, int64_t seed, int64_t batch,
                       int64_t first_step, int64_t last_step, int depth,
                       bool pin)
    : train_(train),
      seed_(seed),
      batch_(batch),
      last_step_(last_step),
      depth_(static_cast<size_t>(std::max(1, depth))),
      pin_(pin),
      next_step_(first_step),
      thread_([this] { Produce(); }) {}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Prefetcher::Produce() {
  // Gathering a batch is cheap next to a step. Run it only on idle CPU time
  // so it never preempts the step loop's OpenMP threads (on a loaded
  // machine that made 2-thread training slower than 1-thread): when the
  // queue runs dry, the step loop blocks and the CPU it frees runs this.
  sched_param idle{};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  try {
    ProduceBatches();
  } catch (const std::exception& e) {  // LibTorch: out of memory, say
    std::lock_guard<std::mutex> lock(mu_);
    error_ = e.what();
    cv_.notify_all();
  }
}

void Prefetcher::ProduceBatches() {
  const int64_t n = train_.x.size(0);
  const int64_t per_epoch = std::max<int64_t>(1, n / batch_);
  int64_t epoch = -1;
  torch::Tensor order;
  for (int64_t step = next_step_; step <= last_step_; ++step) {
    const int64_t e = (step - 1) / per_epoch;
    if (e != epoch) {
      epoch = e;
      order = EpochOrder(seed_, epoch, n);
    }
    const int64_t b = (step - 1) % per_epoch;
    auto ids = order.slice(0, b * batch_, (b + 1) * batch_);
    Batch batch{step, train_.x.index_select(0, ids),
                train_.y.index_select(0, ids)};
    if (pin_) {
      batch.x = batch.x.pin_memory();
      batch.y = batch.y.pin_memory();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || queue_.size() < depth_; });
    if (stop_) return;
    queue_.push_back(std::move(batch));
    cv_.notify_all();
  }
}

absl::StatusOr<Batch> Prefetcher::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty()) {
    const auto start = std::chrono::steady_clock::now();
    cv_.wait(lock, [&] { return !queue_.empty() || !error_.empty(); });
    if (queue_.empty()) {
      return absl::InternalError("input pipeline: " + error_);
    }
    wait_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return batch;
}

double Prefetcher::TakeWaitSeconds() {
  const double w = wait_seconds_;
  wait_seconds_ = 0;
  return w;
}

}  // namespace dial::trainer
