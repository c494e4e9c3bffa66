// The fused tail of a conv block: batch norm, ReLU and 2x2 pooling in one
// forward pass and a two-pass backward over channels-last float32 CPU
// tensors. LibTorch 1.13 runs them as five memory-bound kernels (and its
// channels-last batch-norm backward is slow); here the block's conv output
// is read twice forward and twice backward, and neither the normalised nor
// the rectified activations are ever stored. See docs/decisions.md.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "trainer/internal.h"

namespace dial::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The kernels below are compiled for AVX2 with FMA; the module takes the
// fused path only on CPUs that have them (every x86-64 CPU since 2013).
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// Eight floats in one value (GCC vector extensions): the loops over
// channels run on these, then on plain floats for the last C % 8
// channels. Comparisons give lane masks that `?:` selects with, so the
// code below is written once for both types and has no branches.
using F8 = float __attribute__((vector_size(32)));

template <class T>
T Load(const float* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *p;
  } else {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
}

template <class T>
void Store(float* p, T v) {
  if constexpr (std::is_same_v<T, float>) {
    *p = v;
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

// body.template operator()<T>(c) for every channel c, eight at a time.
template <class Body>
void ForChannels(int64_t channels, const Body& body) {
  int64_t c = 0;
  for (; c + 8 <= channels; c += 8) body.template operator()<F8>(c);
  for (; c < channels; ++c) body.template operator()<float>(c);
}

template <class T>
T Relu(T h) {  // keeps NaN, as LibTorch's relu does
  return h < 0 ? T{} : h;
}

// A pooling window over four rectified values r = relu(h). Max: the first
// largest value (NaN counts as largest, as in LibTorch) takes the whole
// gradient; avg: each takes a quarter. Either way only where the ReLU let
// the value through.
struct MaxPool {
  template <class T>
  static T Out(T r0, T r1, T r2, T r3) {
    T m = r0;
    m = ((r1 > m) | (r1 != r1)) ? r1 : m;
    m = ((r2 > m) | (r2 != r2)) ? r2 : m;
    return ((r3 > m) | (r3 != r3)) ? r3 : m;
  }
  // The gradients d[k] of the window's pre-activation values h[k], given
  // the gradient g of its output.
  template <class T>
  static void Grad(const T h[4], T g, T d[4]) {
    T r[4], m = Relu(h[0]);
    decltype(m > m) moved[4];
    for (int k = 1; k < 4; ++k) {
      r[k] = Relu(h[k]);
      moved[k] = (r[k] > m) | (r[k] != r[k]);
      m = moved[k] ? r[k] : m;
    }
    // Where the ReLU passed the value on (NaN included, as LibTorch's
    // threshold_backward does).
    const T gg = m <= 0 ? T{} : g;
    d[0] = gg;
    for (int k = 1; k < 4; ++k) {
      for (int j = 0; j < k; ++j) d[j] = moved[k] ? T{} : d[j];
      d[k] = moved[k] ? gg : T{};
    }
  }
};

struct AvgPool {
  template <class T>
  static T Out(T r0, T r1, T r2, T r3) {
    return (((r0 + r1) + r2) + r3) / 4.0f;
  }
  template <class T>
  static void Grad(const T h[4], T g, T d[4]) {
    const T q = g / 4.0f;
    for (int k = 0; k < 4; ++k) d[k] = h[k] <= 0 ? T{} : q;
  }
};

struct Shape {
  int64_t n, c, h, w;
  int64_t ho() const { return h / 2; }
  int64_t wo() const { return w / 2; }
  // Offset of pixel (i, y, x)'s channel 0 in the channels-last layout.
  int64_t At(int64_t i, int64_t y, int64_t x) const {
    return ((i * h + y) * w + x) * c;
  }
  // Offset of pooled pixel (i, y, x)'s channel 0.
  int64_t Out(int64_t i, int64_t y, int64_t x) const {
    return ((i * ho() + y) * wo() + x) * c;
  }
};

Shape ShapeOf(const torch::Tensor& x) {
  return {x.size(0), x.size(1), x.size(2), x.size(3)};
}

// Per-channel sums of two quantities over a batch: each sample's sums are
// taken in parallel, in float along a row of pixels and in double across
// rows, then added up in sample order, so the result does not depend on
// the thread count. `row(i, y, a, b)` adds row y of sample i into the C
// floats a and b.
template <class Row>
std::pair<std::vector<double>, std::vector<double>> ChannelSums(
    const Shape& s, int64_t rows, const Row& row) {
  const int64_t C = s.c;
  std::vector<double> part(static_cast<size_t>(s.n * 2 * C), 0.0);
  at::parallel_for(0, s.n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> a(C), b(C);
    for (int64_t i = begin; i < end; ++i) {
      double* pa = &part[i * 2 * C];
      double* pb = pa + C;
      for (int64_t y = 0; y < rows; ++y) {
        std::fill(a.begin(), a.end(), 0.0f);
        std::fill(b.begin(), b.end(), 0.0f);
        row(i, y, a.data(), b.data());
        for (int64_t c = 0; c < C; ++c) {
          pa[c] += a[c];
          pb[c] += b[c];
        }
      }
    }
  });
  std::vector<double> a(C, 0.0), b(C, 0.0);
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      a[c] += part[i * 2 * C + c];
      b[c] += part[i * 2 * C + C + c];
    }
  }
  return {std::move(a), std::move(b)};
}

// out = pool(relu(x * scale + shift)), per channel.
template <class Pool>
void Forward(const Shape& s, const float* x, const float* scale,
             const float* shift, float* out) {
  const int64_t C = s.c, row = s.w * C;
  at::parallel_for(0, s.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t y = 0; y < s.ho(); ++y) {
        for (int64_t xo = 0; xo < s.wo(); ++xo) {
          const float* p = x + s.At(i, 2 * y, 2 * xo);
          float* o = out + s.Out(i, y, xo);
          ForChannels(C, [&]<class T>(int64_t c) {
            const T a = Load<T>(scale + c), b = Load<T>(shift + c);
            auto r = [&](int64_t at) {
              return Relu(Load<T>(p + at + c) * a + b);
            };
            Store(o + c, Pool::Out(r(0), r(C), r(row), r(row + C)));
          });
        }
      }
    }
  });
}

// Calls fn.template operator()<T>(c, offset, x, dh) for every window of
// pooled row y of sample i and every channel group: offset is the x
// offset of the window's top-left pixel at channel c, x[k] and dh[k] the
// input and the gradient of the batch norm's output at the window's four
// pixels (top-left, top-right, bottom-left, bottom-right).
template <class Pool, class Fn>
void ForEachWindow(const Shape& s, int64_t i, int64_t y, const float* x,
                   const float* g, const float* scale, const float* shift,
                   const Fn& fn) {
  const int64_t C = s.c, row = s.w * C;
  const int64_t at4[4] = {0, C, row, row + C};
  for (int64_t xo = 0; xo < s.wo(); ++xo) {
    const int64_t base = s.At(i, 2 * y, 2 * xo);
    const float* gw = g + s.Out(i, y, xo);
    ForChannels(C, [&]<class T>(int64_t c) {
      const T a = Load<T>(scale + c), b = Load<T>(shift + c);
      T v[4], h[4], d[4];
      for (int k = 0; k < 4; ++k) {
        v[k] = Load<T>(x + base + at4[k] + c);
        h[k] = v[k] * a + b;
      }
      Pool::Grad(h, Load<T>(gw + c), d);
      fn.template operator()<T>(c, base + c, v, d);
    });
  }
}

struct NormReluPoolFn : torch::autograd::Function<NormReluPoolFn> {
  // x: [N, C, H, W] channels-last; mean, invstd: the batch statistics
  // (constants here: backward accounts for their dependence on x).
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor gamma, torch::Tensor beta,
                               torch::Tensor mean, torch::Tensor invstd,
                               bool avg) {
    const Shape s = ShapeOf(x);
    auto scale = (gamma * invstd).contiguous();
    auto shift = (beta - mean * scale).contiguous();
    auto out = torch::empty(
        {s.n, s.c, s.ho(), s.wo()},
        x.options().memory_format(torch::MemoryFormat::ChannelsLast));
    (avg ? Forward<AvgPool>
         : Forward<MaxPool>)(s, x.data_ptr<float>(), scale.data_ptr<float>(),
                             shift.data_ptr<float>(), out.data_ptr<float>());
    ctx->save_for_backward({x, gamma, mean, invstd, scale, shift});
    ctx->saved_data["avg"] = avg;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const bool avg = ctx->saved_data["avg"].toBool();
    return avg ? Backward<AvgPool>(saved, grads[0])
               : Backward<MaxPool>(saved, grads[0]);
  }

  template <class Pool>
  static variable_list Backward(const variable_list& saved,
                                const torch::Tensor& grad) {
    const auto &x = saved[0], &gamma = saved[1], &mean = saved[2],
               &invstd = saved[3], &scale = saved[4], &shift = saved[5];
    const Shape s = ShapeOf(x);
    const int64_t C = s.c;
    auto g = grad.contiguous(torch::MemoryFormat::ChannelsLast);
    const float *px = x.data_ptr<float>(), *pg = g.data_ptr<float>(),
                *pa = scale.data_ptr<float>(), *pb = shift.data_ptr<float>(),
                *pm = mean.data_ptr<float>(), *pi = invstd.data_ptr<float>();
    // Pass 1: per channel, the sums of dh and of dh * xhat: the gradients
    // of beta and gamma.
    auto [sum_dh, sum_dh_xhat] =
        ChannelSums(s, s.ho(), [&](int64_t i, int64_t y, float* a, float* b) {
          ForEachWindow<Pool>(
              s, i, y, px, pg, pa, pb,
              [&]<class T>(int64_t c, int64_t, const T* v, const T* d) {
                const T m = Load<T>(pm + c), inv = Load<T>(pi + c);
                T da = Load<T>(a + c), db = Load<T>(b + c);
                for (int k = 0; k < 4; ++k) {
                  da += d[k];
                  db += d[k] * ((v[k] - m) * inv);
                }
                Store(a + c, da);
                Store(b + c, db);
              });
        });
    // Pass 2: dx = gamma * invstd * (dh - mean(dh) - xhat * mean(dh xhat))
    // = k_dh * dh + k_x * x + k_0.
    const double count = double(s.n * s.h * s.w);
    std::vector<float> k_dh(C), k_x(C), k_0(C);
    for (int64_t c = 0; c < C; ++c) {
      const double a = pa[c], inv = pi[c];
      const double m_dh = sum_dh[c] / count, m_dhx = sum_dh_xhat[c] / count;
      k_dh[c] = float(a);
      k_x[c] = float(-a * m_dhx * inv);
      k_0[c] = float(a * (m_dhx * inv * double(pm[c]) - m_dh));
    }
    auto dx = torch::empty_like(x);
    float* pdx = dx.data_ptr<float>();
    const int64_t row = s.w * C, at4[4] = {0, C, row, row + C};
    at::parallel_for(0, s.n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t y = 0; y < s.ho(); ++y) {
          ForEachWindow<Pool>(
              s, i, y, px, pg, pa, pb,
              [&]<class T>(int64_t c, int64_t at, const T* v, const T* d) {
                const T kd = Load<T>(&k_dh[c]), kx = Load<T>(&k_x[c]),
                        k0 = Load<T>(&k_0[c]);
                for (int k = 0; k < 4; ++k) {
                  Store(pdx + at + at4[k], kd * d[k] + kx * v[k] + k0);
                }
              });
        }
        // An odd last row or column lies in no window: dh is 0 there.
        for (int64_t y = 0; y < s.h; ++y) {
          for (int64_t xx = y < 2 * s.ho() ? 2 * s.wo() : 0; xx < s.w; ++xx) {
            const int64_t at = s.At(i, y, xx);
            for (int64_t c = 0; c < C; ++c) {
              pdx[at + c] = k_x[c] * px[at + c] + k_0[c];
            }
          }
        }
      }
    });
    auto to_param = [&](const std::vector<double>& v) {
      return torch::tensor(v, torch::dtype(torch::kFloat64))
          .to(gamma.options());
    };
    return {dx, to_param(sum_dh_xhat), to_param(sum_dh), {}, {}, {}};
  }
};

// Per channel, the batch mean and (biased) variance. The sums are of x - k,
// k being sample 0's top-left pixel of the channel, which keeps
// E[(x-k)^2] - E[x-k]^2 exact when the mean is large against the spread.
std::pair<std::vector<double>, std::vector<double>> MeanVar(const Shape& s,
                                                            const float* px) {
  auto [sum, sum_sq] =
      ChannelSums(s, s.h, [&](int64_t i, int64_t y, float* a, float* b) {
        const float* p = px + s.At(i, y, 0);
        for (int64_t xx = 0; xx < s.w; ++xx, p += s.c) {
          ForChannels(s.c, [&]<class T>(int64_t c) {
            const T v = Load<T>(p + c) - Load<T>(px + c);
            Store(a + c, Load<T>(a + c) + v);
            Store(b + c, Load<T>(b + c) + v * v);
          });
        }
      });
  const double count = double(s.n * s.h * s.w);
  for (int64_t c = 0; c < s.c; ++c) {
    const double shifted = sum[c] / count;
    sum_sq[c] = std::max(0.0, sum_sq[c] / count - shifted * shifted);
    sum[c] = double(px[c]) + shifted;
  }
  return {std::move(sum), std::move(sum_sq)};
}

#pragma GCC pop_options

}  // namespace

NormReluPoolImpl::NormReluPoolImpl(int64_t channels, bool avg) : avg_(avg) {
  norm = register_module("norm", torch::nn::BatchNorm2d(channels));
}

bool NormReluPoolImpl::Fusable(const torch::Tensor& x) const {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 && x.device().is_cpu() && x.scalar_type() == torch::kFloat &&
         x.dim() == 4 && x.size(2) >= 2 && x.size(3) >= 2 &&
         (is_training() || !torch::GradMode::is_enabled());
}

torch::Tensor NormReluPoolImpl::Unfused(const torch::Tensor& x) {
  auto r = torch::relu(norm->forward(x));
  return avg_ ? torch::avg_pool2d(r, 2) : torch::max_pool2d(r, 2);
}

torch::Tensor NormReluPoolImpl::forward(const torch::Tensor& input) {
  if (!Fusable(input)) return Unfused(input);
  // A one-channel input's conv comes back NCHW.
  const auto x = input.contiguous(torch::MemoryFormat::ChannelsLast);
  const auto& o = norm->options;
  torch::Tensor mean, invstd;
  {
    torch::NoGradGuard no_grad;
    if (is_training()) {
      const Shape s = ShapeOf(x);
      auto [m, var] = MeanVar(s, x.data_ptr<float>());
      const double count = double(s.n * s.h * s.w);
      auto dopts = torch::TensorOptions().dtype(torch::kFloat64);
      auto mean64 = torch::tensor(m, dopts), var64 = torch::tensor(var, dopts);
      mean = mean64.to(torch::kFloat);
      invstd = (var64 + o.eps()).rsqrt().to(torch::kFloat);
      if (o.track_running_stats()) {
        // What BatchNorm2d does: an exponential average with the unbiased
        // variance.
        norm->num_batches_tracked += 1;
        const double f = o.momentum().has_value()
                             ? *o.momentum()
                             : 1.0 / norm->num_batches_tracked.item<double>();
        norm->running_mean.mul_(1 - f).add_(mean64.to(torch::kFloat), f);
        norm->running_var.mul_(1 - f).add_(
            (var64 * (count / std::max(1.0, count - 1))).to(torch::kFloat), f);
      }
    } else {
      mean = norm->running_mean;
      invstd = (norm->running_var + o.eps()).rsqrt();
    }
  }
  return NormReluPoolFn::apply(x, norm->weight, norm->bias, mean, invstd, avg_);
}

}  // namespace dial::trainer
