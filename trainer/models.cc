#include <cmath>

#include "absl/strings/str_cat.h"
#include "trainer/internal.h"

namespace dial::trainer {
namespace {

// Inverted dropout whose masks come from a generator of its own, so that
// replicas draw different masks and a checkpoint can hold the stream.
class DropoutImpl : public torch::nn::Module {
 public:
  DropoutImpl(double p, at::Generator generator)
      : p_(p), generator_(std::move(generator)) {}
  torch::Tensor forward(const torch::Tensor& x) {
    if (!is_training() || p_ <= 0) return x;
    auto keep = torch::empty_like(x).bernoulli_(1.0 - p_, generator_);
    return x * keep / (1.0 - p_);
  }

 private:
  double p_;
  at::Generator generator_;
};
TORCH_MODULE(Dropout);

// Images in channels-last layout: oneDNN's convolutions on the CPU run
// 1.3-1.5x faster that way than on the default NCHW layout.
class ChannelsLastImpl : public torch::nn::Module {
 public:
  torch::Tensor forward(const torch::Tensor& x) {
    return x.contiguous(torch::MemoryFormat::ChannelsLast);
  }
};
TORCH_MODULE(ChannelsLast);

void ConvWeightsChannelsLast(torch::nn::Module& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net.parameters()) {
    if (p.dim() == 4)
      p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

torch::nn::AnyModule Activation(const std::string& name) {
  if (name == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  if (name == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  if (name == "sigmoid") return torch::nn::AnyModule(torch::nn::Sigmoid());
  return torch::nn::AnyModule(torch::nn::ReLU());
}

torch::nn::AnyModule Norm(const std::string& kind, int64_t channels) {
  if (kind == "batch") {
    return torch::nn::AnyModule(torch::nn::BatchNorm2d(channels));
  }
  if (kind == "layer") {
    return torch::nn::AnyModule(
        torch::nn::GroupNorm(torch::nn::GroupNormOptions(1, channels)));
  }
  return torch::nn::AnyModule(torch::nn::Identity());
}

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel,
                       int64_t stride = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(kernel / 2)
                               .bias(false));
}

// conv-norm-relu-conv-norm plus the input (projected by a strided 1x1
// conv when the shape changes), then relu: the basic block of ResNet.
//
// The projection subsamples the input and then runs a unit-stride 1x1
// conv: the same function as the strided conv, computed without it. On x86
// CPUs LibTorch 1.13's oneDNN (2.6) copies a strided 1x1 conv's input to
// unit stride in a scratch buffer, and its weight gradient writes past that
// buffer when the input is channels-last with fewer channels than a SIMD
// block (8 floats with AVX2, likely 16 with AVX-512): heap corruption
// that aborts training whenever `channels` (or 2x `channels`) is below
// that width. A 1-wide average pool takes every stride-th pixel exactly
// and keeps the gradient channels-last; it costs no measurable time.
class ResidualBlockImpl : public torch::nn::Module {
 public:
  ResidualBlockImpl(int64_t in, int64_t out, int64_t stride,
                    const std::string& norm)
      : stride_(stride) {
    main_ = register_module("main", torch::nn::Sequential());
    main_->push_back(Conv(in, out, 3, stride));
    main_->push_back(Norm(norm, out));
    main_->push_back(torch::nn::ReLU());
    main_->push_back(Conv(out, out, 3));
    main_->push_back(Norm(norm, out));
    shortcut_ = register_module("shortcut", torch::nn::Sequential());
    if (stride != 1 || in != out) {
      shortcut_->push_back(Conv(in, out, 1));  // after subsampling by stride
      shortcut_->push_back(Norm(norm, out));
    } else {
      shortcut_->push_back(torch::nn::Identity());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor sampled =
        stride_ == 1 ? x : torch::avg_pool2d(x, /*kernel_size=*/1, stride_);
    return torch::relu(main_->forward(x) + shortcut_->forward(sampled));
  }

 private:
  int64_t stride_;
  torch::nn::Sequential main_{nullptr}, shortcut_{nullptr};
};
TORCH_MODULE(ResidualBlock);

absl::StatusOr<int64_t> SquareSide(const TrainerConfig& c, int64_t features) {
  const int64_t side =
      static_cast<int64_t>(std::llround(std::sqrt(double(features))));
  if (side * side != features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", c.model, " needs square images; this dataset has ", features,
        " features (for synthetic data make synthetic_features a square)"));
  }
  return side;
}

// Flattened side x side images back to one-channel channels-last images.
torch::nn::Sequential ImageInput(int64_t side) {
  torch::nn::Sequential net;
  net->push_back(
      torch::nn::Unflatten(torch::nn::UnflattenOptions(1, {1, side, side})));
  net->push_back(ChannelsLast());
  return net;
}

void AddHead(const TrainerConfig& c, torch::nn::Sequential& net, int64_t in,
             int64_t classes, const at::Generator& generator) {
  if (c.dropout > 0) net->push_back(Dropout(c.dropout, generator));
  net->push_back(torch::nn::Linear(in, classes));
}

torch::nn::Sequential Mlp(const TrainerConfig& c, int64_t features,
                          int64_t classes, const at::Generator& generator) {
  torch::nn::Sequential net;
  int64_t width = features;
  for (int64_t i = 0; i < c.layers; ++i) {
    net->push_back(torch::nn::Linear(width, c.units));
    net->push_back(Activation(c.activation));
    if (c.dropout > 0 && i + 1 < c.layers) {
      net->push_back(Dropout(c.dropout, generator));
    }
    width = c.units;
  }
  if (c.layers == 0) {
    net->push_back(torch::nn::Linear(width, classes));
  } else {
    AddHead(c, net, width, classes, generator);
  }
  return net;
}

// Conv blocks (conv, norm, activation, 2x2 pooling), then a dense layer of
// `units` and the classifier.
torch::nn::Sequential Cnn(const TrainerConfig& c, int64_t side, int64_t classes,
                          const at::Generator& generator) {
  torch::nn::Sequential net = ImageInput(side);
  int64_t channels = 1, size = side;
  for (int64_t b = 0; b < c.conv_layers; ++b) {
    const int64_t out = c.channels << b;
    auto conv =
        torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, out, c.kernel_size)
                              .padding(c.kernel_size / 2)
                              .bias(c.norm == "none"));
    net->push_back(conv);
    size = size + 2 * (c.kernel_size / 2) - c.kernel_size + 1;
    if (c.norm == "batch" && c.activation == "relu" && size >= 2) {
      // The common block: its tail runs fused on the CPU.
      net->push_back(NormReluPool(out, c.pooling == "avg"));
      size /= 2;
      channels = out;
      continue;
    }
    net->push_back(Norm(c.norm, out));
    net->push_back(Activation(c.activation));
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
  net->push_back(Activation(c.activation));
  AddHead(c, net, c.units, classes, generator);
  return net;
}

// A CIFAR-style ResNet: a 3x3 stem, three stages of `blocks` residual
// blocks (channels C, 2C, 4C; the last two halve the resolution), global
// average pooling and the classifier. 28x28 gives 28, 14, 7; 32x32 gives
// 32, 16, 8.
torch::nn::Sequential ResNet(const TrainerConfig& c, int64_t side,
                             int64_t classes, const at::Generator& generator) {
  torch::nn::Sequential net = ImageInput(side);
  const int64_t width = c.channels;
  net->push_back(Conv(1, width, 3));
  net->push_back(Norm(c.norm, width));
  net->push_back(torch::nn::ReLU());
  int64_t channels = width;
  for (int64_t stage = 0; stage < 3; ++stage) {
    const int64_t out = width << stage;
    for (int64_t b = 0; b < c.blocks; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      net->push_back(ResidualBlock(channels, out, stride, c.norm));
      channels = out;
    }
  }
  net->push_back(torch::nn::AdaptiveAvgPool2d(
      torch::nn::AdaptiveAvgPool2dOptions({1, 1})));
  net->push_back(torch::nn::Flatten());
  AddHead(c, net, channels, classes, generator);
  return net;
}

}  // namespace

absl::StatusOr<torch::nn::Sequential> BuildModel(
    const TrainerConfig& c, int64_t features, int64_t classes,
    at::Generator dropout_generator) {
  if (c.model == "mlp") return Mlp(c, features, classes, dropout_generator);
  auto side = SquareSide(c, features);
  if (!side.ok()) return side.status();
  if (c.model == "resnet") {
    if (*side < 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model resnet needs images of at least 8x8; this dataset has ", *side,
          "x", *side));
    }
    auto net = ResNet(c, *side, classes, dropout_generator);
    ConvWeightsChannelsLast(*net);
    return net;
  }
  auto net = Cnn(c, *side, classes, dropout_generator);
  ConvWeightsChannelsLast(*net);
  return net;
}

}  // namespace dial::trainer
