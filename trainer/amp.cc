#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <cmath>
#include <cstdio>

#include "trainer/internal.h"

// LibTorch 2.4 replaced the per-device autocast setters with ones that take
// the device type; 1.13 (Debian 12) has only the old ones.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DIAL_AUTOCAST_BY_DEVICE_TYPE 1
#endif

namespace dial::trainer {
namespace {

bool AutocastEnabled(torch::DeviceType type) {
#ifdef DIAL_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == torch::kCPU ? at::autocast::is_cpu_enabled()
                             : at::autocast::is_enabled();
#endif
}

at::ScalarType AutocastDtype(torch::DeviceType type) {
#ifdef DIAL_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == torch::kCPU ? at::autocast::get_autocast_cpu_dtype()
                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

void SetAutocast(torch::DeviceType type, bool enabled, at::ScalarType dtype) {
#ifdef DIAL_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == torch::kCPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  }
#endif
}

}  // namespace

Precision ParsePrecision(const std::string& name) {
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return Precision::kFp32;
}

AutocastScope::AutocastScope(torch::Device device, Precision precision)
    : type_(device.type()) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  was_enabled_ = AutocastEnabled(type_);
  old_dtype_ = AutocastDtype(type_);
  SetAutocast(type_, true,
              precision == Precision::kBf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Leaving the outermost scope frees the casts autocast cached.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(type_, was_enabled_, old_dtype_);
}

LossScaler::LossScaler(bool enabled, Options options)
    : enabled_(enabled), options_(options), scale_(options.init_scale) {}

torch::Tensor LossScaler::Scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_ : loss;
}

bool LossScaler::Unscale(const std::vector<torch::Tensor>& grads) const {
  if (!enabled_) return true;
  std::vector<torch::Tensor> finite;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    g.mul_(1.0 / scale_);
    finite.push_back(torch::isfinite(g).all());
  }
  if (finite.empty()) return true;
  return torch::stack(finite).all().item<bool>();
}

void LossScaler::Update(bool finite) {
  if (!enabled_) return;
  if (!finite) {
    scale_ *= options_.backoff;
    good_steps_ = 0;
    ++skipped_;
    return;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth;
    good_steps_ = 0;
  }
}

std::string LossScaler::Save() const {
  char text[96];
  std::snprintf(text, sizeof(text), "%.17g %lld %lld", scale_,
                static_cast<long long>(good_steps_),
                static_cast<long long>(skipped_));
  return text;
}

absl::Status LossScaler::Load(const std::string& text) {
  double scale;
  long long good, skipped;
  if (std::sscanf(text.c_str(), "%lg %lld %lld", &scale, &good, &skipped) !=
          3 ||
      !(scale > 0) || !std::isfinite(scale)) {
    return absl::DataLossError("loss scaler state '" + text + "' is malformed");
  }
  scale_ = scale;
  good_steps_ = good;
  skipped_ = skipped;
  return absl::OkStatus();
}

}  // namespace dial::trainer
