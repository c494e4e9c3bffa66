#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

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
  int status_fd = -1;  // write end: errno if exec fails
};

[[noreturn]] void ChildFail(const ChildPlan& plan, int status_fd, int error) {
  if (!plan.note->empty()) {
    (void)!write(STDERR_FILENO, plan.note->data(), plan.note->size());
  }
  (void)!write(status_fd, &error, sizeof(error));
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
  // Park every source (and the status pipe) above all target numbers first,
  // so that no dup2 below overwrites a descriptor still to be moved.
  int status_fd = fcntl(plan.status_fd, F_DUPFD_CLOEXEC, plan.lowest_free);
  if (status_fd < 0) ChildFail(plan, plan.status_fd, errno);
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    plan.parked[i] =
        fcntl(plan.moves[i].second, F_DUPFD_CLOEXEC, plan.lowest_free);
    if (plan.parked[i] < 0) ChildFail(plan, status_fd, errno);
  }
  // dup2 clears close-on-exec on the copy: only these survive exec.
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    if (dup2(plan.parked[i], plan.moves[i].first) < 0) {
      ChildFail(plan, status_fd, errno);
    }
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
  ChildFail(plan, status_fd, error);
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

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("spawn: the command is empty");
  }
  for (const auto& a : options.argv) {
    if (HasNul(a)) {
      return absl::InvalidArgumentError("spawn: an argument has a NUL byte");
    }
  }
  // Everything the child touches is built here, before fork.
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  if (options.env) {
    for (const auto& [k, v] : *options.env) {
      if (k.empty() || k.find('=') != std::string::npos || HasNul(k) ||
          HasNul(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("spawn: bad environment variable name '", k, "'"));
      }
      env_strings.push_back(k + "=" + v);
    }
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
  }

  ChildPlan plan;
  plan.new_process_group = options.new_process_group;
  plan.argv = argv.data();
  plan.envp = options.env ? envp.data() : environ;
  plan.note = &options.exec_failure_note;

  std::vector<std::string> programs;
  const std::string& program = options.argv[0];
  if (options.search_path && program.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    for (absl::string_view dir :
         absl::StrSplit(path != nullptr ? path : "/bin:/usr/bin", ':')) {
      programs.push_back(absl::StrCat(dir.empty() ? "." : dir, "/", program));
    }
  } else {
    programs.push_back(program);
  }
  for (const auto& p : programs) plan.programs.push_back(p.c_str());
  plan.sh_fallback = options.search_path;
  std::string shell = "/bin/sh";
  plan.sh_argv.push_back(shell.data());
  plan.sh_argv.push_back(nullptr);  // the program, set in the child
  for (size_t i = 1; i + 1 < argv.size(); ++i) plan.sh_argv.push_back(argv[i]);
  plan.sh_argv.push_back(nullptr);

  ScopedFd opened[3];
  const ChildFd* stdio[3] = {&options.stdin_fd, &options.stdout_fd,
                             &options.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    auto fd = OpenChildFd(*stdio[target], target, &opened[target]);
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
  plan.status_fd = status_pipe->write.get();

  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) RunChild(plan);

  // Also from the parent, so the group can be signalled at once (EACCES
  // once the child has exec'd: it has done it itself by then).
  if (options.new_process_group) setpgid(pid, pid);
  status_pipe->write.reset();
  int exec_error = 0;
  ssize_t n;
  do {
    n = read(status_pipe->read.get(), &exec_error, sizeof(exec_error));
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(exec_error)) ||
      options.exec_failure_exits_127) {
    return pid;  // exec'd (the pipe closed on exec), or exits 127 itself
  }
  (void)WaitForExit(pid);
  return absl::ErrnoToStatus(exec_error, absl::StrCat("cannot run ", program));
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
