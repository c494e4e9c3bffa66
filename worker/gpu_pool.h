// GpuPool: the shares of one worker's GPUs. Each device runs up to
// `trials_per_gpu` trials at once; a trial that needs n GPUs gets n
// distinct devices, the least loaded first. Not thread-safe: the Worker
// guards it with its mutex.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dial::worker {

class GpuPool {
 public:
  GpuPool(const std::vector<std::string>& ids, int trials_per_gpu);

  // Devices with at least one free share: the most GPUs a new trial can get.
  int FreeDevices() const;
  // n distinct devices (n may be 0), or nullopt when fewer are free.
  std::optional<std::vector<std::string>> Take(int n);
  // Gives back the shares a Take returned.
  void Release(const std::vector<std::string>& ids);

 private:
  std::vector<std::pair<std::string, int>> free_;  // device id, free shares
  int shares_;
};

}  // namespace dial::worker
