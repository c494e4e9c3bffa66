#include "worker/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace dial::worker {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  const ssize_t n = write(fd, text.data(), text.size());
  const int error = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return absl::ErrnoToStatus(error, absl::StrCat("write ", path));
  }
  return absl::OkStatus();
}

bool HasWord(const std::string& text, absl::string_view word) {
  for (absl::string_view w : absl::StrSplit(text, absl::ByAnyChar(" \n"))) {
    if (w == word) return true;
  }
  return false;
}

// The cgroup2 mount point, or "".
std::string UnifiedMount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "id parent major:minor root mount-point options ... - fstype ..."
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::vector<std::string> after = absl::StrSplit(line.substr(dash + 3), ' ');
    if (after.empty() || after[0] != "cgroup2") continue;
    std::vector<std::string> before = absl::StrSplit(line.substr(0, dash), ' ');
    if (before.size() >= 5) return before[4];
  }
  return "";
}

// This process's cgroup in the unified hierarchy ("/..."), or "".
std::string OwnCgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "0::")) return line.substr(3);
  }
  return "";
}

// Removes the empty cgroups a worker killed with SIGKILL left under
// `parent`: "dial-trial-<pid>-<n>", "dial-worker-<pid>" and
// "dial-probe-<pid>" whose pid is no longer alive. A cgroup that still
// has processes cannot be removed (rmdir fails), so nothing running is
// touched.
void RemoveStale(const std::string& parent) {
  DIR* dir = opendir(parent.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    absl::string_view name = entry->d_name;
    if (!absl::ConsumePrefix(&name, "dial-trial-") &&
        !absl::ConsumePrefix(&name, "dial-worker-") &&
        !absl::ConsumePrefix(&name, "dial-probe-")) {
      continue;
    }
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(0, name.find('-')), &pid) || pid <= 0 ||
        pid == getpid()) {
      continue;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(entry->d_name);
  }
  closedir(dir);
  for (const std::string& name : stale) {
    const std::string path = absl::StrCat(parent, "/", name);
    if (rmdir(path.c_str()) == 0) spdlog::info("removed stale cgroup {}", path);
  }
}

// Enables `controller` for the children of `parent` when it is available
// there; whether it is enabled.
bool EnableController(const std::string& parent, const std::string& own_dir,
                      const std::string& controller) {
  if (HasWord(ReadText(parent + "/cgroup.subtree_control"), controller)) {
    return true;
  }
  if (!HasWord(ReadText(parent + "/cgroup.controllers"), controller)) {
    return false;
  }
  const std::string enable = "+" + controller;
  absl::Status enabled = WriteText(parent + "/cgroup.subtree_control", enable);
  if (!enabled.ok() && !own_dir.empty() && own_dir == parent) {
    // A cgroup with processes of its own cannot hand controllers to its
    // children: move this process into a leaf beside its trials.
    const std::string leaf = absl::StrCat(parent, "/dial-worker-", getpid());
    mkdir(leaf.c_str(), 0755);
    if (WriteText(leaf + "/cgroup.procs", "0").ok()) {
      enabled = WriteText(parent + "/cgroup.subtree_control", enable);
    }
  }
  if (!enabled.ok()) {
    spdlog::warn("cgroups: no {} limits ({})", controller, enabled.ToString());
  }
  return enabled.ok();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Cgroups>> Cgroups::Create(
    const CgroupsOptions& options) {
  std::string parent = options.parent;
  std::string own_dir;
  if (parent.empty()) {
    const std::string mount = UnifiedMount();
    const std::string own = OwnCgroup();
    if (mount.empty() || own.empty()) {
      return absl::FailedPreconditionError(
          "no cgroup v2 (unified) hierarchy is mounted");
    }
    parent = own == "/" ? mount : mount + own;
    own_dir = parent;
  }
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  if (access((parent + "/cgroup.procs").c_str(), F_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(parent, " is not a cgroup v2 directory"));
  }
  // Can this process make (and remove) a scope there?
  const std::string probe = absl::StrCat(parent, "/dial-probe-", getpid());
  if (mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create cgroups under ", parent, ": ", std::strerror(errno)));
  }
  rmdir(probe.c_str());
  RemoveStale(parent);

  const bool memory = EnableController(parent, own_dir, "memory");
  const bool pids = EnableController(parent, own_dir, "pids");
  return std::unique_ptr<Cgroups>(new Cgroups(parent, memory, pids));
}

absl::StatusOr<std::unique_ptr<CgroupScope>> Cgroups::NewScope(
    int64_t memory_mb, int64_t max_pids) {
  if (memory_mb > 0 && !memory_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the memory controller is not available under ", parent_,
                     " (cgroup v2)"));
  }
  // A name can be taken by a scope of an earlier process with this pid
  // that was killed before it removed it (pids are reused): skip it.
  std::string path;
  for (int tries = 0;; ++tries) {
    path = absl::StrCat(parent_, "/dial-trial-", getpid(), "-", next_++);
    if (mkdir(path.c_str(), 0755) == 0) break;
    if (errno != EEXIST || tries == 1000) {
      return absl::UnavailableError(absl::StrCat("cannot create cgroup ", path,
                                                 ": ", std::strerror(errno)));
    }
  }
  ScopedFd procs(open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs.valid()) {
    const int error = errno;
    rmdir(path.c_str());
    return absl::UnavailableError(absl::StrCat(
        "cannot open ", path, "/cgroup.procs: ", std::strerror(error)));
  }
  std::unique_ptr<CgroupScope> scope(new CgroupScope(path, std::move(procs)));
  if (memory_mb > 0) {
    absl::Status set = WriteText(path + "/memory.max",
                                 std::to_string(memory_mb * 1024 * 1024));
    if (!set.ok()) return absl::FailedPreconditionError(set.ToString());
    // Without swap the limit is the trial's real memory (best effort: the
    // file exists only with swap accounting).
    (void)WriteText(path + "/memory.swap.max", "0");
  }
  if (max_pids > 0 && pids_) {
    absl::Status set = WriteText(path + "/pids.max", std::to_string(max_pids));
    if (!set.ok()) return absl::FailedPreconditionError(set.ToString());
  }
  return scope;
}

std::vector<pid_t> CgroupScope::Pids() const {
  std::vector<pid_t> pids;
  for (absl::string_view word :
       absl::StrSplit(ReadText(path_ + "/cgroup.procs"), '\n')) {
    int pid = 0;
    if (absl::SimpleAtoi(word, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

std::optional<double> CgroupScope::CpuSeconds() const {
  for (absl::string_view line :
       absl::StrSplit(ReadText(path_ + "/cpu.stat"), '\n')) {
    int64_t usec = 0;
    if (absl::ConsumePrefix(&line, "usage_usec ") &&
        absl::SimpleAtoi(line, &usec)) {
      return usec / 1e6;
    }
  }
  return std::nullopt;
}

bool CgroupScope::KillAll(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string events = path_ + "/cgroup.events";
  auto populated = [&] {
    return !absl::StrContains(ReadText(events), "populated 0");
  };
  if (!populated()) return true;
  if (!WriteText(path_ + "/cgroup.kill", "1").ok()) {
    // Before Linux 5.14: freeze, kill each, thaw (a frozen cgroup cannot
    // fork away from the kill).
    (void)WriteText(path_ + "/cgroup.freeze", "1");
    for (pid_t pid : Pids()) kill(pid, SIGKILL);
    (void)WriteText(path_ + "/cgroup.freeze", "0");
  }
  // cgroup.events signals every change of "populated" with POLLPRI.
  ScopedFd watch(open(events.c_str(), O_RDONLY | O_CLOEXEC));
  while (populated()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    for (pid_t pid : Pids()) kill(pid, SIGKILL);
    pollfd fd{watch.get(), POLLPRI, 0};
    char buffer[256];
    (void)!pread(watch.get(), buffer, sizeof(buffer), 0);
    poll(&fd, 1,
         static_cast<int>(
             std::min<int64_t>(absl::ToInt64Milliseconds(left), 100)));
  }
  return true;
}

CgroupScope::~CgroupScope() {
  if (!KillAll()) {
    spdlog::warn("cgroup {}: processes left after SIGKILL", path_);
  }
  procs_.reset();
  if (rmdir(path_.c_str()) != 0) {
    spdlog::warn("cannot remove cgroup {}: {}", path_, std::strerror(errno));
  }
}

}  // namespace dial::worker
