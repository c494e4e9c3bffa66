#include "common/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace dial {
namespace {

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// What the child does between fork and exec: only async-signal-safe calls
// on data built before fork, no allocation, no locks.
struct ChildPlan {
  std::vector<std::pair<int, int>> moves;  // {child fd, parent fd}
  std::vector<int> parked;                 // moves' sources, above all targets
  int lowest_free = 3;                     // above every target fd
  bool new_process_group = false;
  std::vector<const char*> programs;  // execve candidates, in order
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  std::vector<char*> sh_argv;  // "/bin/sh", <program>, argv[1..], null
  bool sh_fallback = false;
  const std::string* note = nullptr;
  // Write end: the child's pid first when `report_pid`; then, on failure,
  // a ChildFailure.
  int status_fd = -1;
  bool report_pid = false;
  int cgroup_fd = -1;             // cgroup.procs to join, or -1
  const RunAs* run_as = nullptr;  // the user to become, or null
  rlim_t max_user_processes = 0;  // RLIMIT_NPROC with run_as; 0: unchanged
  bool private_proc = false;      // a mount namespace, /proc hidepid=2
  const char* tmpfs_options = nullptr;  // "mode=1777[,size=N]"
  std::vector<const char*> tmp_mounts;  // /tmp, /var/tmp, /dev/shm
  // Directories bound back over the tmpfs mounts: each mkdirs[i] is made
  // (0711) before binds[i] = {source "/proc/self/fd/N", target}.
  std::vector<std::vector<const char*>> keep_mkdirs;
  // {a buffer for "/proc/self/fd/N", the directory}.
  std::vector<std::pair<char*, const char*>> keep_binds;
  const char* cwd = nullptr;  // chdir after dropping the user, or null
};

char* AppendNumber(char* out, long value);

// What a child that cannot start writes on the status pipe.
struct ChildFailure {
  int stage = 0;  // kSetupFailed or kExecFailed
  int error = 0;  // errno
};
constexpr int kSetupFailed = 1;
constexpr int kExecFailed = 2;

[[noreturn]] void ChildFail(const ChildPlan& plan, int status_fd, int stage,
                            int error) {
  if (stage == kExecFailed && !plan.note->empty()) {
    (void)!write(STDERR_FILENO, plan.note->data(), plan.note->size());
  }
  const ChildFailure failure{stage, error};
  (void)!write(status_fd, &failure, sizeof(failure));
  _exit(127);
}

[[noreturn]] void RunChild(ChildPlan& plan) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    signal(sig, SIG_DFL);
  }
  if (plan.new_process_group) setpgid(0, 0);
  // The pid comes first on the status pipe, before any failure.
  if (plan.report_pid) {
    const pid_t self = getpid();
    (void)!write(plan.status_fd, &self, sizeof(self));
  }
  // Join the cgroup before anything else can be started.
  if (plan.cgroup_fd >= 0 && write(plan.cgroup_fd, "0", 1) != 1) {
    ChildFail(plan, plan.status_fd, kSetupFailed, errno);
  }
  if (plan.private_proc) {
    // Before the descriptors move (a move may land on a kept directory's
    // descriptor). A /proc of its own that shows only its user's
    // processes, IPC objects and temporary directories of its own. The
    // mount namespace is made a slave first, so the new mounts do not
    // propagate back to the host.
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "hidepid=2") != 0) {
      ChildFail(plan, plan.status_fd, kSetupFailed, errno);
    }
    // Opened in the new namespace (a bind mount's source must be a mount
    // of the caller's own), before the tmpfs mounts hide them.
    constexpr size_t kFdPrefix = sizeof("/proc/self/fd/") - 1;
    for (auto& [source, target] : plan.keep_binds) {
      const int fd = open(target, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) ChildFail(plan, plan.status_fd, kSetupFailed, errno);
      AppendNumber(source + kFdPrefix, fd);
    }
    for (const char* dir : plan.tmp_mounts) {
      if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV,
                plan.tmpfs_options) != 0) {
        ChildFail(plan, plan.status_fd, kSetupFailed, errno);
      }
    }
    for (size_t i = 0; i < plan.keep_binds.size(); ++i) {
      for (const char* dir : plan.keep_mkdirs[i]) {
        if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
          ChildFail(plan, plan.status_fd, kSetupFailed, errno);
        }
      }
      if (mount(plan.keep_binds[i].first, plan.keep_binds[i].second, nullptr,
                MS_BIND | MS_REC, nullptr) != 0) {
        ChildFail(plan, plan.status_fd, kSetupFailed, errno);
      }
    }
  }
  // Park every source (and the status pipe) above all target numbers first,
  // so that no dup2 below overwrites a descriptor still to be moved.
  int status_fd = fcntl(plan.status_fd, F_DUPFD_CLOEXEC, plan.lowest_free);
  if (status_fd < 0) ChildFail(plan, plan.status_fd, kSetupFailed, errno);
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    plan.parked[i] =
        fcntl(plan.moves[i].second, F_DUPFD_CLOEXEC, plan.lowest_free);
    if (plan.parked[i] < 0) ChildFail(plan, status_fd, kSetupFailed, errno);
  }
  // dup2 clears close-on-exec on the copy: only these survive exec.
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    if (dup2(plan.parked[i], plan.moves[i].first) < 0) {
      ChildFail(plan, status_fd, kSetupFailed, errno);
    }
  }
  if (plan.run_as != nullptr) {
    const RunAs& user = *plan.run_as;
    if (plan.max_user_processes > 0) {
      const rlimit limit{plan.max_user_processes, plan.max_user_processes};
      if (setrlimit(RLIMIT_NPROC, &limit) != 0) {
        ChildFail(plan, status_fd, kSetupFailed, errno);
      }
    }
    if (setgroups(user.groups.size(), user.groups.data()) != 0 ||
        setgid(user.gid) != 0 || setuid(user.uid) != 0 ||
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
      ChildFail(plan, status_fd, kSetupFailed, errno);
    }
  }
  // As the user it runs as, so a directory it may not enter fails here.
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) {
    ChildFail(plan, status_fd, kSetupFailed, errno);
  }
  // As execvp: remember EACCES, go on past missing entries, stop at
  // anything else.
  int error = ENOENT;
  bool denied = false;
  for (const char* program : plan.programs) {
    execve(program, plan.argv, plan.envp);
    error = errno;
    if (error == ENOEXEC && plan.sh_fallback) {
      plan.sh_argv[1] = const_cast<char*>(program);
      execve(plan.sh_argv[0], plan.sh_argv.data(), plan.envp);
      error = errno;
    }
    if (error == EACCES) {
      denied = true;
    } else if (error != ENOENT && error != ENOTDIR && error != ESTALE &&
               error != ENODEV && error != ETIMEDOUT) {
      break;
    }
  }
  if (denied && (error == ENOENT || error == ENOTDIR)) error = EACCES;
  ChildFail(plan, status_fd, kExecFailed, error);
}

// The supervisor's part (SupervisedChild). Only async-signal-safe calls:
// it is a fork of a possibly multi-threaded process and never execs.
struct SupervisorPlan {
  int exited_fd = -1;    // write end
  int lifeline_fd = -1;  // read end
};

// Closes every descriptor but `keep` (ascending).
void CloseAllExcept(const int* keep, int n) {
  unsigned int low = 0;
  for (int i = 0; i <= n; ++i) {
    const unsigned int high = i < n ? static_cast<unsigned int>(keep[i]) : ~0u;
    if (high > low) {
#ifdef SYS_close_range
      if (syscall(SYS_close_range, low, high - 1, 0) == 0) {
        low = high + 1;
        continue;
      }
#endif
      rlimit limit{};
      unsigned int end = high;
      if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
          limit.rlim_cur < static_cast<rlim_t>(end)) {
        end = static_cast<unsigned int>(limit.rlim_cur);
      }
      for (unsigned int fd = low; fd < end; ++fd) close(static_cast<int>(fd));
    }
    low = high + 1;
  }
}

// Writes the decimal digits of `value` at `out`; returns the end.
char* AppendNumber(char* out, long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (n > 0) *out++ = digits[--n];
  *out = '\0';
  return out;
}

// Calls `visit(pid)` for every number in the file at `path` (a list of
// pids separated by spaces); false if it cannot be opened.
template <typename Visit>
bool ForEachPidIn(const char* path, Visit visit) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[4096];
  long value = -1;
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] >= '0' && buffer[i] <= '9') {
        value = (value < 0 ? 0 : value * 10) + (buffer[i] - '0');
      } else if (value >= 0) {
        visit(static_cast<pid_t>(value));
        value = -1;
      }
    }
  }
  if (value >= 0) visit(static_cast<pid_t>(value));
  close(fd);
  return true;
}

// Without /proc/<pid>/task/<pid>/children (CONFIG_PROC_CHILDREN): every
// process in /proc whose parent is `self`.
template <typename Visit>
void ForEachChildByScan(pid_t self, Visit visit) {
  const int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char entries[8192];
  long n;
  while ((n = syscall(SYS_getdents64, dir, entries, sizeof(entries))) > 0) {
    for (long offset = 0; offset < n;) {
      struct Entry {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* e = reinterpret_cast<const Entry*>(entries + offset);
      offset += e->reclen;
      long pid = 0;
      const char* c = e->name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 0) continue;
      char path[64] = "/proc/";
      char* end = AppendNumber(path + 6, pid);
      const char stat[] = "/stat";
      for (size_t i = 0; i < sizeof(stat); ++i) end[i] = stat[i];
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char text[512];
      const ssize_t got = read(fd, text, sizeof(text) - 1);
      close(fd);
      if (got <= 0) continue;
      text[got] = '\0';
      // "pid (comm) state ppid ...": comm may hold anything but ends at
      // the last ')'.
      const char* p = nullptr;
      for (ssize_t i = got - 1; i >= 0; --i) {
        if (text[i] == ')') {
          p = text + i;
          break;
        }
      }
      if (p == nullptr || p[1] == '\0' || p[2] == '\0' || p[3] == '\0') {
        continue;
      }
      p += 4;  // past ") S "
      long ppid = 0;
      for (; *p >= '0' && *p <= '9'; ++p) ppid = ppid * 10 + (*p - '0');
      if (ppid == self) visit(static_cast<pid_t>(pid));
    }
  }
  close(dir);
}

// SIGKILLs and reaps every descendant of this process (a subreaper: each
// orphan is re-parented here, so killing the children over and over until
// none is left reaches them all, whatever their session or group).
void KillDescendants(pid_t program) {
  const pid_t self = getpid();
  char children[96] = "/proc/self/task/";
  char* end = AppendNumber(children + 16, self);
  const char tail[] = "/children";
  for (size_t i = 0; i < sizeof(tail); ++i) end[i] = tail[i];
  auto kill_child = [](pid_t pid) { kill(pid, SIGKILL); };
  while (true) {
    kill(-program, SIGKILL);
    if (!ForEachPidIn(children, kill_child)) {
      ForEachChildByScan(self, kill_child);
    }
    int status = 0;
    const pid_t reaped = waitpid(-1, &status, 0);
    if (reaped < 0 && errno == ECHILD) return;
  }
}

[[noreturn]] void RunSupervisor(ChildPlan& plan, const SupervisorPlan& sp) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  const pid_t program = fork();
  if (program < 0) {
    const pid_t none = -1;
    (void)!write(plan.status_fd, &none, sizeof(none));
    const ChildFailure failure{kSetupFailed, errno};
    (void)!write(plan.status_fd, &failure, sizeof(failure));
    _exit(127);
  }
  if (program == 0) RunChild(plan);
  int keep[2] = {std::min(sp.exited_fd, sp.lifeline_fd),
                 std::max(sp.exited_fd, sp.lifeline_fd)};
  CloseAllExcept(keep, 2);

  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const int signals = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  int status = 0;
  bool done = false;
  pollfd fds[2] = {{signals, POLLIN, 0}, {sp.lifeline_fd, POLLIN, 0}};
  while (!done) {
    if (signals >= 0) {
      const int ready = poll(fds, 2, -1);
      if (ready < 0 && errno != EINTR) break;
      if (fds[1].revents != 0) {
        // The caller let go (or died): the program's tree goes now.
        kill(-program, SIGKILL);
        fds[1].fd = -1;
      }
      signalfd_siginfo info;
      while (read(signals, &info, sizeof(info)) > 0) {
      }
    }
    while (true) {
      int s = 0;
      const pid_t reaped = waitpid(-1, &s, signals >= 0 ? WNOHANG : 0);
      if (reaped < 0 && errno == ECHILD) done = true;
      if (reaped <= 0) break;
      if (reaped == program) {
        status = s;
        done = true;
        break;
      }
    }
  }
  (void)!write(sp.exited_fd, &status, sizeof(status));
  KillDescendants(program);
  _exit(0);
}

// The child's descriptor for `spec` at `target`, opened (close-on-exec)
// into `*owned` when Spawn opens it; -1 for kInherit.
absl::StatusOr<int> OpenChildFd(const ChildFd& spec, int target,
                                ScopedFd* owned) {
  switch (spec.kind) {
    case ChildFd::Kind::kInherit:
      return -1;
    case ChildFd::Kind::kNull:
      owned->reset(open("/dev/null", O_RDWR | O_CLOEXEC));
      if (!owned->valid()) return absl::ErrnoToStatus(errno, "/dev/null");
      return owned->get();
    case ChildFd::Kind::kFd:
      if (spec.fd < 0 || fcntl(spec.fd, F_GETFD) < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fd ", spec.fd, " for the child's fd ", target, " is not open"));
      }
      return spec.fd;
    case ChildFd::Kind::kFile: {
      if (spec.path.empty() || HasNul(spec.path)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad file name for the child's fd ", target));
      }
      const int flags =
          O_WRONLY | O_CREAT | O_CLOEXEC | (spec.append ? O_APPEND : O_TRUNC);
      owned->reset(open(spec.path.c_str(), flags, 0644));
      if (!owned->valid()) {
        return absl::ErrnoToStatus(errno,
                                   absl::StrCat("cannot open ", spec.path));
      }
      return owned->get();
    }
  }
  return absl::InvalidArgumentError("unknown ChildFd kind");
}

}  // namespace

void ScopedFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe");
  Pipe p;
  p.read.reset(fds[0]);
  p.write.reset(fds[1]);
  return p;
}

absl::StatusOr<RunAs> LookUpRunAs(const std::string& user) {
  std::vector<char> buffer(1 << 16);
  passwd entry{};
  passwd* found = nullptr;
  uint32_t uid = 0;
  if (absl::SimpleAtoi(user, &uid)) {
    getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found);
  } else {
    getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
  }
  if (found == nullptr && absl::SimpleAtoi(user, &uid) && uid != 0) {
    // A container image often has no entry for the uid it is told to use:
    // the uid as its own group, no supplementary groups.
    RunAs out;
    out.uid = uid;
    out.gid = uid;
    out.groups = {static_cast<gid_t>(uid)};
    out.name = user;
    out.home = "/";
    return out;
  }
  if (found == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("user '", user, "' does not exist on this host"));
  }
  if (entry.pw_uid == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "user '", user, "' is root: trials must run as an unprivileged user"));
  }
  RunAs out;
  out.uid = entry.pw_uid;
  out.gid = entry.pw_gid;
  out.name = entry.pw_name;
  out.home = entry.pw_dir != nullptr ? entry.pw_dir : "/";
  int count = 64;
  out.groups.resize(count);
  if (getgrouplist(entry.pw_name, entry.pw_gid, out.groups.data(), &count) <
      0) {
    out.groups.resize(count);
    getgrouplist(entry.pw_name, entry.pw_gid, out.groups.data(), &count);
  }
  out.groups.resize(std::max(count, 0));
  return out;
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

namespace {

// Everything a child needs, built before fork; the plan points into it.
struct Prepared {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<std::string> programs;
  std::string shell = "/bin/sh";
  // private_proc: the tmpfs options, the mount points, and what is bound
  // back over them.
  std::string tmpfs_options;
  std::vector<std::string> tmp_mounts;
  std::vector<std::string> keep_sources;
  std::vector<std::string> keep_targets;
  std::vector<std::vector<std::string>> keep_mkdirs;
  ScopedFd opened[3];
  Pipe status;
  ChildPlan plan;
};

// Whether `path` is `dir` or lies beneath it (both normal and absolute).
bool Beneath(const std::string& path, const std::string& dir) {
  return path == dir ||
         (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
          path[dir.size()] == '/');
}

// The tmpfs mounts of a private_proc child and the directories bound back
// over them, opened (O_PATH) here, in the caller's view.
absl::Status PreparePrivateTmp(const SpawnOptions& options, Prepared& p) {
  p.tmpfs_options = "mode=1777";
  if (options.private_tmp_bytes > 0) {
    absl::StrAppend(&p.tmpfs_options, ",size=", options.private_tmp_bytes);
  }
  for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
    struct stat st;
    if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
      p.tmp_mounts.push_back(dir);
    }
  }
  std::vector<std::string> keep;
  for (const std::string& path : options.private_tmp_keep) {
    std::error_code ec;
    std::string real = std::filesystem::canonical(path, ec).string();
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("spawn: directory to keep ", path, ": ", ec.message()));
    }
    for (const std::string& mount_point : p.tmp_mounts) {
      if (Beneath(real, mount_point) && real != mount_point) {
        keep.push_back(real);
        break;
      }
    }
  }
  std::sort(keep.begin(), keep.end());
  for (size_t i = 0; i < keep.size(); ++i) {
    // One beneath another already kept is seen through it.
    if (std::any_of(
            p.keep_targets.begin(), p.keep_targets.end(),
            [&](const std::string& t) { return Beneath(keep[i], t); })) {
      continue;
    }
    // The child opens it and writes the number in: room for any.
    p.keep_sources.push_back(std::string("/proc/self/fd/") +
                             std::string(24, '\0'));
    p.keep_targets.push_back(keep[i]);
    std::vector<std::string> mkdirs;
    for (size_t slash = keep[i].find('/', 1); slash != std::string::npos;
         slash = keep[i].find('/', slash + 1)) {
      mkdirs.push_back(keep[i].substr(0, slash));
    }
    mkdirs.push_back(keep[i]);
    p.keep_mkdirs.push_back(std::move(mkdirs));
  }
  ChildPlan& plan = p.plan;
  plan.tmpfs_options = p.tmpfs_options.c_str();
  for (const auto& dir : p.tmp_mounts) plan.tmp_mounts.push_back(dir.c_str());
  for (size_t i = 0; i < p.keep_targets.size(); ++i) {
    plan.keep_binds.push_back(
        {p.keep_sources[i].data(), p.keep_targets[i].c_str()});
    std::vector<const char*> dirs;
    for (const auto& d : p.keep_mkdirs[i]) dirs.push_back(d.c_str());
    plan.keep_mkdirs.push_back(std::move(dirs));
  }
  return absl::OkStatus();
}

absl::Status Prepare(const SpawnOptions& options, Prepared& p) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("spawn: the command is empty");
  }
  for (const auto& a : options.argv) {
    if (HasNul(a)) {
      return absl::InvalidArgumentError("spawn: an argument has a NUL byte");
    }
  }
  p.args = options.argv;
  for (auto& a : p.args) p.argv.push_back(a.data());
  p.argv.push_back(nullptr);

  if (options.env) {
    for (const auto& [k, v] : *options.env) {
      if (k.empty() || k.find('=') != std::string::npos || HasNul(k) ||
          HasNul(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("spawn: bad environment variable name '", k, "'"));
      }
      p.env_strings.push_back(k + "=" + v);
    }
    for (auto& s : p.env_strings) p.envp.push_back(s.data());
    p.envp.push_back(nullptr);
  }

  ChildPlan& plan = p.plan;
  plan.new_process_group = options.new_process_group;
  plan.argv = p.argv.data();
  plan.envp = options.env ? p.envp.data() : environ;
  plan.note = &options.exec_failure_note;
  plan.cgroup_fd = options.cgroup_procs_fd;
  if (options.run_as) plan.run_as = &*options.run_as;
  plan.max_user_processes =
      static_cast<rlim_t>(std::max<int64_t>(options.max_user_processes, 0));
  plan.private_proc = options.private_proc;
  if (options.private_proc) {
    absl::Status tmp = PreparePrivateTmp(options, p);
    if (!tmp.ok()) return tmp;
  }
  if (!options.cwd.empty()) plan.cwd = options.cwd.c_str();

  const std::string& program = options.argv[0];
  if (options.search_path && program.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    for (absl::string_view dir :
         absl::StrSplit(path != nullptr ? path : "/bin:/usr/bin", ':')) {
      p.programs.push_back(absl::StrCat(dir.empty() ? "." : dir, "/", program));
    }
  } else {
    p.programs.push_back(program);
  }
  for (const auto& prog : p.programs) plan.programs.push_back(prog.c_str());
  plan.sh_fallback = options.search_path;
  plan.sh_argv.push_back(p.shell.data());
  plan.sh_argv.push_back(nullptr);  // the program, set in the child
  for (size_t i = 1; i + 1 < p.argv.size(); ++i) {
    plan.sh_argv.push_back(p.argv[i]);
  }
  plan.sh_argv.push_back(nullptr);

  const ChildFd* stdio[3] = {&options.stdin_fd, &options.stdout_fd,
                             &options.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    auto fd = OpenChildFd(*stdio[target], target, &p.opened[target]);
    if (!fd.ok()) return fd.status();
    if (*fd >= 0) plan.moves.push_back({target, *fd});
  }
  const long open_max = sysconf(_SC_OPEN_MAX);
  for (const auto& [target, source] : options.extra_fds) {
    if (target < 3 || source < 0 || fcntl(source, F_GETFD) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spawn: cannot give the child fd ", target, " from fd ", source,
          " (the child's fd must be >= 3, the source an open fd)"));
    }
    plan.moves.push_back({target, source});
  }
  for (const auto& [target, source] : plan.moves) {
    plan.lowest_free = std::max(plan.lowest_free, target + 1);
  }
  if (open_max > 0 &&
      plan.lowest_free + static_cast<long>(plan.moves.size()) + 1 >= open_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("spawn: child fd numbers up to ", plan.lowest_free - 1,
                     " exceed the descriptor limit ", open_max));
  }
  plan.parked.assign(plan.moves.size(), -1);

  auto status_pipe = MakePipe();
  if (!status_pipe.ok()) return status_pipe.status();
  p.status = std::move(*status_pipe);
  plan.status_fd = p.status.write.get();
  return absl::OkStatus();
}

// Reads exactly `size` bytes unless EOF comes first; returns what it read.
size_t ReadFull(int fd, void* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, static_cast<char*>(out) + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::Status FailureStatus(const ChildFailure& failure,
                           const std::string& program) {
  return failure.stage == kExecFailed
             ? absl::ErrnoToStatus(failure.error,
                                   absl::StrCat("cannot run ", program))
             : absl::ErrnoToStatus(
                   failure.error,
                   absl::StrCat("cannot set up the child for ", program));
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  Prepared p;
  absl::Status prepared = Prepare(options, p);
  if (!prepared.ok()) return prepared;

  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) RunChild(p.plan);

  // Also from the parent, so the group can be signalled at once (EACCES
  // once the child has exec'd: it has done it itself by then).
  if (options.new_process_group) setpgid(pid, pid);
  p.status.write.reset();
  ChildFailure failure;
  const size_t n = ReadFull(p.status.read.get(), &failure, sizeof(failure));
  if (n != sizeof(failure) ||
      (options.exec_failure_exits_127 && failure.stage == kExecFailed)) {
    return pid;  // exec'd (the pipe closed on exec), or exits 127 itself
  }
  (void)WaitForExit(pid);
  return FailureStatus(failure, options.argv[0]);
}

absl::StatusOr<SupervisedChild> SpawnSupervised(const SpawnOptions& options) {
  Prepared p;
  absl::Status prepared = Prepare(options, p);
  if (!prepared.ok()) return prepared;
  p.plan.new_process_group = true;
  p.plan.report_pid = true;
  auto exited = MakePipe();
  if (!exited.ok()) return exited.status();
  auto lifeline = MakePipe();
  if (!lifeline.ok()) return lifeline.status();
  SupervisorPlan sp;
  sp.exited_fd = exited->write.get();
  sp.lifeline_fd = lifeline->read.get();

  const pid_t supervisor = fork();
  if (supervisor < 0) return absl::ErrnoToStatus(errno, "fork");
  if (supervisor == 0) RunSupervisor(p.plan, sp);

  p.status.write.reset();
  exited->write.reset();
  lifeline->read.reset();
  SupervisedChild child;
  child.supervisor = supervisor;
  child.exited = std::move(exited->read);
  child.lifeline = std::move(lifeline->write);
  pid_t pid = -1;
  if (ReadFull(p.status.read.get(), &pid, sizeof(pid)) != sizeof(pid)) {
    (void)WaitForExit(supervisor);
    return absl::InternalError("the trial supervisor died at start");
  }
  ChildFailure failure;
  const size_t n = ReadFull(p.status.read.get(), &failure, sizeof(failure));
  if (pid > 0 && (n != sizeof(failure) || (options.exec_failure_exits_127 &&
                                           failure.stage == kExecFailed))) {
    child.pid = pid;
    return child;
  }
  // It exits (127) at once; the supervisor follows it.
  (void)WaitForExit(supervisor);
  if (n != sizeof(failure)) {
    return absl::InternalError("the trial supervisor could not start it");
  }
  return pid < 0 ? absl::ErrnoToStatus(failure.error, "fork")
                 : FailureStatus(failure, options.argv[0]);
}

absl::StatusOr<int> WaitForExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::FailedPreconditionError(
          absl::StrCat("waitpid ", pid, ": ", std::strerror(errno)));
    }
  }
  return status;
}

absl::StatusOr<int> WaitOrKill(pid_t pid, absl::Duration grace, bool group) {
  const absl::Time deadline = absl::Now() + grace;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) {
      return absl::FailedPreconditionError(
          absl::StrCat("waitpid ", pid, ": ", std::strerror(errno)));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      kill(group ? -pid : pid, SIGKILL);
      return WaitForExit(pid);
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(
        std::clamp(left, absl::Milliseconds(1), absl::Milliseconds(20))));
  }
}

}  // namespace dial
