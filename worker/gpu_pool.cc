#include "worker/gpu_pool.h"

#include <algorithm>

namespace dial::worker {

GpuPool::GpuPool(const std::vector<std::string>& ids, int trials_per_gpu)
    : shares_(std::max(1, trials_per_gpu)) {
  for (const auto& id : ids) free_.emplace_back(id, shares_);
}

int GpuPool::FreeDevices() const {
  return static_cast<int>(std::count_if(
      free_.begin(), free_.end(), [](const auto& d) { return d.second > 0; }));
}

std::optional<std::vector<std::string>> GpuPool::Take(int n) {
  if (n > FreeDevices()) return std::nullopt;
  std::vector<size_t> order(free_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Least loaded first; ties in the order the devices were given.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return free_[a].second > free_[b].second;
  });
  std::vector<std::string> taken;
  for (int i = 0; i < n; ++i) {
    --free_[order[i]].second;
    taken.push_back(free_[order[i]].first);
  }
  return taken;
}

void GpuPool::Release(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    for (auto& [device, free] : free_) {
      if (device == id) free = std::min(shares_, free + 1);
    }
  }
}

}  // namespace dial::worker
