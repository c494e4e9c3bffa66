// GpuPool: the shares of one worker's GPUs. Each device runs up to
// `trials_per_gpu` trials at once; a trial that needs n GPUs gets n
// distinct devices, the least loaded first. Not thread-safe: the Worker
// guards it with its mutex.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dial::worker {

// The GPUs a worker offers, in order of precedence:
//  1. `flag` (--gpus), a comma list;
//  2. $CUDA_VISIBLE_DEVICES, when set (empty: no GPU), as Slurm's gres and
//     Kubernetes' device plugin set it;
//  3. $SLURM_JOB_GPUS, when a Slurm job sets it without the former;
//  4. inside a Slurm job ($SLURM_JOB_ID set) that was given no GPU: none,
//     so a CPU job on a GPU node never takes the node's GPUs;
//  5. every GPU the driver lists (`driver_count`, from /proc/driver/nvidia).
// `env` looks a variable up (nullopt: unset).
std::vector<std::string> VisibleGpus(
    const std::string& flag,
    const std::function<std::optional<std::string>(const char*)>& env,
    int driver_count);
// GPUs the NVIDIA driver lists on this host (0 without the driver).
int DriverGpuCount();
// Memory of a GPU, as the driver's nvidia-smi reports it.
struct GpuMemory {
  std::string id;  // the device index, as in `gpus`
  int64_t used_bytes = 0, total_bytes = 0;
};
// nvidia-smi's `--query-gpu=index,memory.used,memory.total
// --format=csv,noheader,nounits` output (MiB) for the devices in `gpus`;
// lines it cannot read are skipped.
std::vector<GpuMemory> ParseGpuMemory(const std::string& text,
                                      const std::vector<std::string>& gpus);
// The same, running nvidia-smi; empty without GPUs or without nvidia-smi.
std::vector<GpuMemory> ReadGpuMemory(const std::vector<std::string>& gpus);
// The model of the first of `gpus` in nvidia-smi's `--query-gpu=index,name
// --format=csv,noheader` output (e.g. "NVIDIA H100 80GB HBM3"), the value
// of the worker's `gpu.model` label; empty when none of them is listed.
std::string ParseGpuModel(const std::string& text,
                          const std::vector<std::string>& gpus);
// The same, running nvidia-smi; empty without GPUs or without nvidia-smi.
std::string ReadGpuModel(const std::vector<std::string>& gpus);
// CPUs this process may run on (its affinity mask, as Slurm's task plugins
// and cpusets restrict it), at least 1.
int AvailableCpus();

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
