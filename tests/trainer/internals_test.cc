// The trainer's LibTorch internals: data parallelism against a single
// replica, weight for weight, and the fp16 loss scaler.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/checkpoint_store.h"
#include "tests/trainer/test_util.h"
#include "trainer/internal.h"
#include "trainer/replicas.h"

namespace dial::trainer {
namespace {

// The parameters saved in checkpoint `id`, loaded into a fresh model.
std::vector<torch::Tensor> SavedWeights(const fs::path& root,
                                        const TrainerConfig& c,
                                        const std::string& id) {
  auto store = storage::FileCheckpointStore::Create({root.string()});
  EXPECT_TRUE(store.ok());
  auto files = (*store)->Read(id);
  EXPECT_TRUE(files.ok()) << files.status();
  auto net = BuildModel(c, c.synthetic_features, c.synthetic_classes,
                        at::detail::createCPUGenerator());
  EXPECT_TRUE(net.ok());
  std::istringstream in((*files)["model.pt"]);
  torch::load(*net, in);
  return (*net)->parameters();
}

// 2 replicas with B/2 each (and 3 with an uneven 11/11/10 split) end 50
// steps with the weights of 1 replica with the whole batch B.
TEST_F(TrainerTest, ReplicasWithShardsMatchOneReplicaWithTheWholeBatch) {
  for (const char* optimizer : {"sgd", "adam"}) {
    SCOPED_TRACE(optimizer);
    auto weights = [&](int replicas, double dropout = 0) {
      TrainerConfig c = Config(Knobs({{"steps", 50},
                                      {"eval_every", 50},
                                      {"batch_size", 32},
                                      {"units", 32},
                                      {"lr", 0.02},
                                      {"grad_clip", 5.0},
                                      {"replicas", replicas},
                                      {"threads", 2},
                                      {"dropout", dropout},
                                      {"seed", 11}},
                                     {{"optimizer", optimizer}}));
      const fs::path root = root_ / absl::StrCat(optimizer, replicas, dropout);
      RunContext ctx;
      ctx.checkpoint_root = root.string();
      ctx.threads = 2;
      Recorder sink;
      auto result = Train(c, ctx, sink);
      EXPECT_TRUE(result.ok()) << result.status();
      return SavedWeights(root, c, sink.reports.back().checkpoint);
    };
    auto one = weights(1), two = weights(2), three = weights(3);
    ASSERT_EQ(one.size(), two.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_LT((one[i] - two[i]).abs().max().item<double>(), 1e-5) << i;
      EXPECT_LT((one[i] - three[i]).abs().max().item<double>(), 1e-5) << i;
    }
    // The replicas really ran apart: with dropout, each draws its own
    // masks, so 2 replicas no longer follow 1.
    auto one_dropout = weights(1, 0.5), two_dropout = weights(2, 0.5);
    EXPECT_GT((one_dropout[0] - two_dropout[0]).abs().max().item<double>(),
              1e-4);
  }
}

// A checkpoint whose dropout streams are not a CPU generator's (a GPU
// run's Philox states, 16 bytes each) resumes on the CPU with fresh
// streams instead of failing in LibTorch.
TEST_F(TrainerTest, AnotherDevicesDropoutStreamsStartFresh) {
  TrainerConfig c =
      Config(Knobs({{"steps", 40}, {"eval_every", 20}, {"dropout", 0.3}}));
  RunContext ctx;
  ctx.checkpoint_root = root_.string();
  Recorder first(20);
  ASSERT_TRUE(Train(c, ctx, first).ok());
  auto store = storage::FileCheckpointStore::Create({root_.string()});
  ASSERT_TRUE(store.ok());
  auto files = (*store)->Read(first.reports.back().checkpoint);
  ASSERT_TRUE(files.ok()) << files.status();
  std::vector<torch::Tensor> philox{torch::zeros({16}, torch::kUInt8)};
  std::ostringstream out;
  torch::save(philox, out);
  (*files)["rng.pt"] = out.str();
  auto info = (*store)->Write("gpu-run", 1, 20, *files);
  ASSERT_TRUE(info.ok()) << info.status();
  ctx.restore_checkpoint = info->id;
  Recorder resumed;
  auto result = Train(c, ctx, resumed);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(resumed.reports.size(), 1u);
  EXPECT_EQ(resumed.reports[0].step, 40);
}

// LibTorch's own batch norm, ReLU and pooling ops with the module's
// parameters: what the fused path must compute.
struct Pair {
  NormReluPool fused, plain;
};

Pair MakePair(int64_t channels, bool avg) {
  Pair p{NormReluPool(channels, avg), NormReluPool(channels, avg)};
  torch::NoGradGuard no_grad;
  p.fused->norm->weight.uniform_(0.5, 1.5);
  p.fused->norm->bias.uniform_(-0.5, 0.5);
  p.plain->norm->weight.copy_(p.fused->norm->weight);
  p.plain->norm->bias.copy_(p.fused->norm->bias);
  return p;
}

void ExpectClose(const torch::Tensor& a, const torch::Tensor& b,
                 const std::string& what, double tolerance = 1e-5) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/std::max(1e-4, tolerance),
                              /*atol=*/tolerance))
      << what << ": max difference " << (a - b).abs().max().item<double>();
}

// The fused kernels need AVX2 and FMA; without them the module runs
// LibTorch's ops and there is nothing fused to test.
#define SKIP_WITHOUT_AVX2()                                              \
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) \
  GTEST_SKIP() << "no AVX2/FMA: the fused path is off on this CPU"

// The fused batch norm + ReLU + 2x2 pooling against LibTorch's three ops
// over two training batches with different means: outputs, the gradients
// of the input and of the norm's weight and bias, and the running
// statistics agree, for max and avg pooling, even and odd sizes, 12
// channels (a group of 8 and 4 more), a cumulative running average
// (momentum unset), inputs whose mean is large against their spread, and
// in evaluation.
TEST(NormReluPoolTest, FusedPathComputesWhatLibTorchsOpsDo) {
  SKIP_WITHOUT_AVX2();
  struct Case {
    bool avg;
    int64_t h, w;
    double offset;  // added to the input
    bool cumulative;
  };
  for (const Case& k :
       {Case{false, 8, 8, 0, false}, Case{false, 7, 5, 0, false},
        Case{true, 8, 8, 0, false}, Case{true, 7, 5, 0, true},
        Case{false, 6, 6, 1000, false}, Case{true, 5, 7, 1000, true}}) {
    SCOPED_TRACE(absl::StrCat(k.avg ? "avg " : "max ", k.h, "x", k.w,
                              " offset ", k.offset,
                              k.cumulative ? " cumulative" : ""));
    // Large inputs cost the normalised output float digits in both
    // implementations alike (x * scale + shift).
    const double tol = k.offset > 0 ? 1e-3 : 1e-5;
    torch::manual_seed(3);
    Pair p = MakePair(12, k.avg);
    if (k.cumulative) {
      p.fused->norm->options.momentum(c10::optional<double>());
      p.plain->norm->options.momentum(c10::optional<double>());
    }
    torch::Tensor x;
    for (int batch = 0; batch < 2; ++batch) {
      SCOPED_TRACE(absl::StrCat("batch ", batch));
      x = (torch::randn({6, 12, k.h, k.w}) * 2 + 0.3 + k.offset + 3 * batch)
              .contiguous(torch::MemoryFormat::ChannelsLast);
      auto xa = x.clone().requires_grad_(true);
      auto xb = x.clone().requires_grad_(true);
      ASSERT_TRUE(p.fused->Fusable(xa));
      auto ya = p.fused->forward(xa), yb = p.plain->Unfused(xb);
      ExpectClose(ya, yb, "output", tol);
      auto g = torch::randn_like(yb);
      (ya * g).sum().backward();
      (yb * g).sum().backward();
      ExpectClose(xa.grad(), xb.grad(), "input gradient", tol);
      ExpectClose(p.fused->norm->weight.grad(), p.plain->norm->weight.grad(),
                  "weight gradient", tol);
      ExpectClose(p.fused->norm->bias.grad(), p.plain->norm->bias.grad(),
                  "bias gradient", tol);
      ExpectClose(p.fused->norm->running_mean, p.plain->norm->running_mean,
                  "running mean", tol);
      ExpectClose(p.fused->norm->running_var, p.plain->norm->running_var,
                  "running variance", tol);
      EXPECT_EQ(p.fused->norm->num_batches_tracked.item<int64_t>(), batch + 1);
    }

    p.fused->eval();
    p.plain->eval();
    torch::NoGradGuard no_grad;
    ASSERT_TRUE(p.fused->Fusable(x));
    ExpectClose(p.fused->forward(x), p.plain->Unfused(x), "evaluation", tol);
  }
}

// The batch sums are taken per sample and added in sample order, so one
// thread and two give the same bits: a replica's result does not depend on
// the worker's thread count.
TEST(NormReluPoolTest, OneThreadAndTwoGiveTheSameBits) {
  SKIP_WITHOUT_AVX2();
  const int threads = at::get_num_threads();
  std::vector<std::vector<torch::Tensor>> runs;
  for (int n : {1, 2}) {
    at::set_num_threads(n);
    torch::manual_seed(7);
    Pair p = MakePair(12, /*avg=*/false);
    auto x = (torch::randn({6, 12, 8, 8}) * 2 + 0.3)
                 .contiguous(torch::MemoryFormat::ChannelsLast)
                 .requires_grad_(true);
    auto y = p.fused->forward(x);
    (y * torch::randn_like(y)).sum().backward();
    runs.push_back({y.detach(), x.grad(), p.fused->norm->weight.grad(),
                    p.fused->norm->bias.grad(), p.fused->norm->running_var});
  }
  at::set_num_threads(threads);
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(runs[0][i], runs[1][i])) << i;
  }
}

// A one-channel conv's NCHW output takes the fused path too; a NaN in the
// input poisons its channel as in LibTorch rather than vanishing in the
// ReLU; bf16 input goes through LibTorch's ops.
TEST(NormReluPoolTest, NchwInputNanAndFallback) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(5);
  Pair p = MakePair(3, /*avg=*/false);
  auto x = torch::randn({4, 3, 6, 6});
  ASSERT_TRUE(x.is_contiguous());
  ASSERT_TRUE(p.fused->Fusable(x));
  ExpectClose(p.fused->forward(x), p.plain->Unfused(x), "NCHW input");

  x[1][2][3][4].fill_(NAN);
  auto ya = p.fused->forward(x), yb = p.plain->Unfused(x);
  EXPECT_TRUE(torch::equal(ya.isnan(), yb.isnan()));
  EXPECT_TRUE(ya.select(1, 2).isnan().all().item<bool>());
  EXPECT_FALSE(ya.select(1, 0).isnan().any().item<bool>());

  EXPECT_FALSE(p.fused->Fusable(x.to(torch::kBFloat16)));
}

// A ResNet block that halves the resolution projects its input with a
// unit-stride 1x1 conv after subsampling (models.cc says why): the block
// computes the standard block's strided 1x1 projection, gradients too,
// against a reference with oneDNN off. Its 4 channels-last input channels
// are the case whose strided weight gradient corrupted the heap.
TEST(ResNetTest, ProjectionComputesTheStrided1x1Conv) {
  torch::manual_seed(11);
  TrainerConfig c =
      Config(Knobs({{"synthetic_features", 64}, {"channels", 4}, {"blocks", 1}},
                   {{"model", "resnet"}}));
  auto net = BuildModel(c, 64, 10, at::detail::createCPUGenerator());
  ASSERT_TRUE(net.ok()) << net.status();
  // Unflatten, channels-last, stem conv, norm and ReLU, then a block per
  // stage: the second stage's goes from 4 channels at 8x8 to 8 at 4x4.
  torch::nn::AnyModule& block = *((*net)->begin() + 6);
  auto children = block.ptr()->named_children();
  auto main = children["main"]->as<torch::nn::SequentialImpl>();
  auto shortcut = children["shortcut"]->as<torch::nn::SequentialImpl>();
  ASSERT_TRUE(main && shortcut);
  auto conv = shortcut->ptr(0)->as<torch::nn::Conv2dImpl>();
  auto norm = shortcut->ptr(1)->as<torch::nn::BatchNorm2dImpl>();
  ASSERT_TRUE(conv && norm);

  auto x = torch::randn({32, 4, 8, 8})
               .contiguous(torch::MemoryFormat::ChannelsLast)
               .requires_grad_(true);
  auto y = block.forward(x);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{32, 8, 4, 4}));
  auto g = torch::randn_like(y);
  auto grads = torch::autograd::grad({(y * g).sum()}, {x, conv->weight});

  const bool mkldnn = at::globalContext().userEnabledMkldnn();
  at::globalContext().setUserEnabledMkldnn(false);
  auto xr = x.detach().contiguous().requires_grad_(true);
  auto wr = conv->weight.detach().contiguous().requires_grad_(true);
  auto yr = torch::relu(main->forward(xr) +
                        norm->forward(torch::conv2d(xr, wr, {}, /*stride=*/2)));
  auto ref = torch::autograd::grad({(yr * g).sum()}, {xr, wr});
  at::globalContext().setUserEnabledMkldnn(mkldnn);

  ExpectClose(y, yr, "output");
  ExpectClose(grads[0], ref[0], "input gradient");
  ExpectClose(grads[1], ref[1], "projection weight gradient");
}

// `replicas: 0` on the CPU: one replica per thread for models without
// batch norm, each with at least 32 examples; one with batch norm.
TEST(CpuReplicasTest, OnePerThreadUnlessBatchNorm) {
  TrainerConfig c = Config(Knobs({{"batch_size", 128}}));
  EXPECT_EQ(CpuReplicas(c, 1), 1);
  EXPECT_EQ(CpuReplicas(c, 2), 2);
  EXPECT_EQ(CpuReplicas(c, 8), 4);  // 32 examples each
  c.model = "cnn";
  EXPECT_EQ(CpuReplicas(c, 2), 1);  // norm: batch
  c.norm = "layer";
  EXPECT_EQ(CpuReplicas(c, 2), 2);
}

// A replica's job that throws (LibTorch does) comes back as a status from
// every replica's thread, the caller's first; the pool runs on afterwards.
TEST(ReplicaPoolTest, AJobsExceptionBecomesAStatus) {
  for (int replicas : {1, 3}) {
    SCOPED_TRACE(replicas);
    ReplicaPool pool(replicas, 1);
    std::vector<int> ran(static_cast<size_t>(replicas), 0);
    EXPECT_TRUE(pool.Run([&](int r) { ++ran[static_cast<size_t>(r)]; }).ok());
    EXPECT_THAT(ran, ::testing::Each(1));

    absl::Status status = pool.Run([&](int r) {
      if (r == replicas - 1) {
        (void)torch::ones({2}).view({3});  // c10::Error: a bad shape
      }
    });
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("libtorch"));

    status = pool.Run([&](int r) {
      TORCH_CHECK(r != 0, "first");  // throws c10::Error, as LibTorch does
      TORCH_CHECK(false, "other");
    });
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("first"));

    EXPECT_TRUE(pool.Run([&](int r) { ++ran[static_cast<size_t>(r)]; }).ok());
    EXPECT_THAT(ran, ::testing::Each(2));
  }
}

// The in-process sum leaves the same total on every replica.
TEST(ReplicaSumTest, EveryReplicaGetsTheTotal) {
  std::vector<std::vector<torch::Tensor>> tensors;
  for (int r = 0; r < 3; ++r) {
    tensors.push_back(
        {torch::full({2}, double(r + 1)), torch::full({1, 2}, 10.0 * (r + 1))});
  }
  ASSERT_TRUE(SumAcross(nullptr, tensors).ok());
  for (const auto& per_replica : tensors) {
    EXPECT_TRUE(torch::equal(per_replica[0], torch::full({2}, 6.0)));
    EXPECT_TRUE(torch::equal(per_replica[1], torch::full({1, 2}, 60.0)));
  }
}

// A tiny regression trained with the scaler: an inf injected into the
// gradients of one step skips that step (weights unchanged) and halves the
// scale; training then goes on, and the scale grows back after a run of
// good steps.
TEST(LossScalerTest, SkipsAStepWithAnInfAndRecovers) {
  torch::manual_seed(1);
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.1));
  LossScaler::Options options;
  options.init_scale = 1024;
  options.growth_interval = 5;
  LossScaler scaler(/*enabled=*/true, options);
  auto x = torch::randn({64, 4});
  auto y = x.matmul(torch::tensor({1.0f, -2.0f, 0.5f, 3.0f})).unsqueeze(1);
  std::vector<double> losses;
  for (int step = 1; step <= 20; ++step) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    losses.push_back(loss.item<double>());
    scaler.Scale(loss).backward();
    if (step == 3) model->weight.grad()[0][0] = INFINITY;
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad());
    auto before = model->weight.clone();
    const bool finite = scaler.Unscale(grads);
    if (finite) optimizer.step();
    scaler.Update(finite);
    if (step == 3) {
      EXPECT_FALSE(finite);
      EXPECT_TRUE(torch::equal(before, model->weight));  // skipped
      EXPECT_EQ(scaler.scale(), 512);
      EXPECT_EQ(scaler.skipped_steps(), 1);
    } else {
      EXPECT_TRUE(finite) << step;
      EXPECT_FALSE(torch::equal(before, model->weight)) << step;
    }
  }
  // Five good steps after the skip (4..8) doubled the scale, and 5 more
  // (9..13) and 5 more (14..18) again.
  EXPECT_EQ(scaler.scale(), 512.0 * 8);
  EXPECT_LT(losses.back(), 0.1 * losses.front());
  // Unscaled gradients are the true ones.
  optimizer.zero_grad();
  scaler.Scale(torch::mse_loss(model->forward(x), y)).backward();
  auto scaled = model->weight.grad().clone();
  ASSERT_TRUE(scaler.Unscale({model->weight.grad()}));
  EXPECT_TRUE(torch::allclose(model->weight.grad() * scaler.scale(), scaled));
  // State round-trips through a checkpoint.
  LossScaler restored(true, options);
  ASSERT_TRUE(restored.Load(scaler.Save()).ok());
  EXPECT_EQ(restored.scale(), scaler.scale());
  EXPECT_EQ(restored.skipped_steps(), 1);
  EXPECT_FALSE(restored.Load("nan 1 2").ok());
  // Disabled, it is the identity.
  LossScaler off(false, options);
  auto loss = torch::tensor(3.0);
  EXPECT_TRUE(torch::equal(off.Scale(loss), loss));
}

}  // namespace
}  // namespace dial::trainer
