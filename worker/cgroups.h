// Cgroups: one cgroup v2 scope per trial, under the worker's own cgroup (or
// a parent given explicitly), so that every process a trial starts can be
// counted, limited (memory.max from trial.resources.memory_mb) and killed
// at once. Used where the worker can create cgroups (a unified hierarchy,
// delegated to it or run as root); elsewhere the worker relies on the
// trial supervisor alone (common/process.h, SpawnSupervised). On a hybrid
// host (cgroup v1 controllers plus an empty v2 hierarchy) scopes work but
// memory limits do not. Thread-safe: NewScope may be called from any
// thread; a CgroupScope has one owner.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process.h"

namespace dial::worker {

struct CgroupsOptions {
  // Directory of the cgroup (in a mounted cgroup2 hierarchy) under which
  // trial scopes are made; empty: the worker's own cgroup.
  std::string parent;
};

class CgroupScope;

class Cgroups {
 public:
  // FAILED_PRECONDITION (with the reason) when there is no cgroup v2
  // hierarchy, or the parent cannot hold a scope made by this process.
  static absl::StatusOr<std::unique_ptr<Cgroups>> Create(
      const CgroupsOptions& options);

  const std::string& parent() const { return parent_; }
  // Whether scopes can have a memory limit (the memory controller is
  // enabled for the parent's children).
  bool memory_limits() const { return memory_; }
  // Whether scopes can have a process limit (the pids controller).
  bool pid_limits() const { return pids_; }

  // A new empty scope; with memory_mb > 0 and memory_limits(), memory.max
  // is set (FAILED_PRECONDITION when it cannot be); with max_pids > 0 and
  // pid_limits(), pids.max. UNAVAILABLE on I/O errors.
  absl::StatusOr<std::unique_ptr<CgroupScope>> NewScope(int64_t memory_mb,
                                                        int64_t max_pids = 0);

 private:
  Cgroups(std::string parent, bool memory, bool pids)
      : parent_(std::move(parent)), memory_(memory), pids_(pids) {}
  const std::string parent_;
  const bool memory_;
  const bool pids_;
  std::atomic<uint64_t> next_{0};
};

class CgroupScope {
 public:
  ~CgroupScope();  // KillAll, then removes the directory
  CgroupScope(const CgroupScope&) = delete;
  CgroupScope& operator=(const CgroupScope&) = delete;

  const std::string& path() const { return path_; }
  // cgroup.procs, open for writing: a child joins with SpawnOptions::
  // cgroup_procs_fd.
  int procs_fd() const { return procs_.get(); }
  // The processes in it now.
  std::vector<pid_t> Pids() const;
  // CPU time used by everything that ran in it (cpu.stat's usage_usec);
  // nullopt when the kernel does not say.
  std::optional<double> CpuSeconds() const;
  // SIGKILLs every process in it (cgroup.kill where the kernel has it) and
  // waits, up to `timeout`, until none is left. Whether it is empty.
  bool KillAll(absl::Duration timeout = absl::Seconds(5));

 private:
  friend class Cgroups;
  CgroupScope(std::string path, ScopedFd procs)
      : path_(std::move(path)), procs_(std::move(procs)) {}
  const std::string path_;
  ScopedFd procs_;
};

}  // namespace dial::worker
