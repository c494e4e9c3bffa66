#include "worker/gpu_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dial::worker {

std::vector<std::string> VisibleGpus(
    const std::string& flag,
    const std::function<std::optional<std::string>(const char*)>& env,
    int driver_count) {
  auto list = [](const std::string& s) -> std::vector<std::string> {
    return absl::StrSplit(s, ',', absl::SkipWhitespace());
  };
  if (!flag.empty()) return list(flag);
  if (auto cuda = env("CUDA_VISIBLE_DEVICES")) return list(*cuda);
  if (auto slurm = env("SLURM_JOB_GPUS")) return list(*slurm);
  if (env("SLURM_JOB_ID")) return {};
  std::vector<std::string> all;
  for (int i = 0; i < driver_count; ++i) all.push_back(std::to_string(i));
  return all;
}

int DriverGpuCount() {
  std::error_code ec;
  int count = 0;
  for (auto it =
           std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++count;
  }
  return count;
}

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

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

std::vector<GpuMemory> ParseGpuMemory(const std::string& text,
                                      const std::vector<std::string>& gpus) {
  std::vector<GpuMemory> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (cells.size() != 3) continue;
    GpuMemory g;
    g.id = std::string(absl::StripAsciiWhitespace(cells[0]));
    int64_t used = 0, total = 0;
    if (std::find(gpus.begin(), gpus.end(), g.id) == gpus.end() ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(cells[1]), &used) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(cells[2]), &total)) {
      continue;
    }
    g.used_bytes = used << 20;
    g.total_bytes = total << 20;
    out.push_back(g);
  }
  return out;
}

namespace {

// What `command` prints; nullopt when it cannot run or fails.
std::optional<std::string> Output(const char* command) {
  FILE* pipe = popen(command, "r");
  if (pipe == nullptr) return std::nullopt;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return text;
}

}  // namespace

std::vector<GpuMemory> ReadGpuMemory(const std::vector<std::string>& gpus) {
  if (gpus.empty()) return {};
  auto text = Output(
      "nvidia-smi --query-gpu=index,memory.used,memory.total "
      "--format=csv,noheader,nounits 2>/dev/null");
  return text ? ParseGpuMemory(*text, gpus) : std::vector<GpuMemory>{};
}

std::string ParseGpuModel(const std::string& text,
                          const std::vector<std::string>& gpus) {
  std::map<std::string, std::string> by_index;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> cells =
        absl::StrSplit(line, absl::MaxSplits(',', 1));
    by_index[std::string(absl::StripAsciiWhitespace(cells.first))] =
        std::string(absl::StripAsciiWhitespace(cells.second));
  }
  for (const std::string& id : gpus) {
    auto it = by_index.find(id);
    if (it != by_index.end() && !it->second.empty()) return it->second;
  }
  return "";
}

std::string ReadGpuModel(const std::vector<std::string>& gpus) {
  if (gpus.empty()) return "";
  auto text = Output(
      "nvidia-smi --query-gpu=index,name --format=csv,noheader "
      "2>/dev/null");
  return text ? ParseGpuModel(*text, gpus) : "";
}

}  // namespace dial::worker
