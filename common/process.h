// Starting and reaping child processes: the one place that forks. The
// worker's trial processes, dialctl's helper commands and the e2e tests'
// daemons all start through Spawn, which builds everything the child needs
// before fork and makes only async-signal-safe calls after it, so it is safe
// in a multi-threaded process. SpawnSupervised adds a supervisor process (a
// child subreaper) between the caller and the program, so that nothing the
// program starts outlives it: not a double-forked daemon, not one that
// called setsid. Thread-safe: free functions; a ScopedFd has one owner.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dial {

// A file descriptor closed when it goes out of scope. Move-only.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  // Closes the current descriptor, if any, and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A pipe whose ends are both close-on-exec, so a child gets one only when
// SpawnOptions hands it over.
struct Pipe {
  ScopedFd read;
  ScopedFd write;
};
// The error's code follows errno (RESOURCE_EXHAUSTED when out of
// descriptors).
absl::StatusOr<Pipe> MakePipe();

// Where one of the child's descriptors comes from.
struct ChildFd {
  enum class Kind {
    kInherit,  // whatever the parent has under the same number
    kNull,     // /dev/null
    kFd,       // a duplicate of the parent's `fd` (which stays the caller's)
    kFile,     // `path`, opened for writing (created 0644)
  };
  static ChildFd Inherit() { return {}; }
  static ChildFd Null() { return {Kind::kNull, -1, "", false}; }
  static ChildFd Fd(int fd) { return {Kind::kFd, fd, "", false}; }
  static ChildFd TruncateFile(std::string path) {
    return {Kind::kFile, -1, std::move(path), false};
  }
  static ChildFd AppendFile(std::string path) {
    return {Kind::kFile, -1, std::move(path), true};
  }

  Kind kind = Kind::kInherit;
  int fd = -1;
  std::string path;
  bool append = false;
};

// The user a child runs as: its uid, primary gid and supplementary groups.
struct RunAs {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string name;  // for messages and USER
  std::string home;
};

// Looks `user` up (a name or a numeric uid) with its groups; a numeric uid
// with no passwd entry (common in containers) is taken as uid = gid. NOT_FOUND
// naming it when there is no such user; INVALID_ARGUMENT for root (uid 0),
// which would defeat the point.
absl::StatusOr<RunAs> LookUpRunAs(const std::string& user);

struct SpawnOptions {
  // argv[0] is the program: a path, or with `search_path` and no '/' in it,
  // a name looked up in the parent's PATH (as execvp does, including
  // running a file without a #! line with /bin/sh).
  std::vector<std::string> argv;
  bool search_path = true;
  // The child's whole environment; nullopt: the parent's. To add to the
  // parent's, start from CurrentEnvironment().
  std::optional<std::map<std::string, std::string>> env;
  // The child leads a new process group (pgid = its pid), so the group can
  // be signalled as a whole (kill(-pid, ...)).
  bool new_process_group = false;
  ChildFd stdin_fd;
  ChildFd stdout_fd;
  ChildFd stderr_fd;
  // More descriptors for the child: child fd (>= 3) -> the parent's fd it
  // becomes. Every other descriptor the parent opened close-on-exec stays
  // out of the child.
  std::map<int, int> extra_fds;
  // When argv[0] cannot be executed, the child writes `exec_failure_note`
  // (if any) to its stderr and exits with code 127. By default Spawn then
  // reaps it and returns the error; with `exec_failure_exits_127` it
  // returns the pid as if exec had worked (as a shell does): for callers
  // that report a child's failure through its exit status and stderr.
  bool exec_failure_exits_127 = false;
  std::string exec_failure_note;
  // A descriptor open for writing on a cgroup v2 `cgroup.procs`: the child
  // joins that cgroup (writes "0") before exec, so everything it starts is
  // in it. A failure to join fails the spawn. -1: none.
  int cgroup_procs_fd = -1;
  // The child drops to this user (groups, gid, then uid, with
  // no_new_privs) after joining the cgroup and before exec; failing to
  // fails the spawn. nullopt: the caller's user.
  std::optional<RunAs> run_as;
  // With run_as: RLIMIT_NPROC for the child (the processes of that user
  // it may have, counted over all of them); 0: unchanged.
  int64_t max_user_processes = 0;
  // The child gets a mount namespace of its own (a slave of the parent's)
  // with a fresh /proc mounted hidepid=2, before it drops to run_as: it
  // sees, and can read the command lines of, only its own user's
  // processes. It also gets an IPC namespace of its own (System V
  // semaphores, shared memory and message queues) and empty tmpfs mounts
  // (mode 1777, nosuid, nodev) on /tmp, /var/tmp and /dev/shm (where they
  // exist), so nothing it leaves there outlives it or reaches the next
  // process of its user. Needs root; failing to fails the spawn.
  bool private_proc = false;
  // With private_proc: the size of each tmpfs, in bytes; 0: the kernel's
  // default (half the memory).
  int64_t private_tmp_bytes = 0;
  // With private_proc: directories (absolute) the child must still see
  // where they lie beneath /tmp, /var/tmp or /dev/shm: bind-mounted back
  // at the same path over the fresh tmpfs (their parents there are made
  // root's, mode 0711). Others are left alone. One beneath another is
  // covered by it.
  std::vector<std::string> private_tmp_keep;
  // The child's working directory, entered after it drops to run_as
  // (failing to fails the spawn); empty: the caller's.
  std::string cwd;
};

// Starts a child process. The child gets an empty signal mask and the
// default action for SIGPIPE, SIGINT, SIGTERM, SIGHUP and SIGQUIT, whatever
// the parent blocks or ignores. Returns its pid; the caller reaps it (see
// WaitForExit). Errors, with nothing left running:
//   INVALID_ARGUMENT: empty argv, a NUL byte in an argument or variable, a
//     variable name that is empty or has '=', a bad descriptor number;
//   NOT_FOUND, PERMISSION_DENIED, ...: a file for stdout or stderr cannot
//     be opened, or (without exec_failure_exits_127) argv[0] cannot be
//     executed; the code follows errno and the message names the file;
//   RESOURCE_EXHAUSTED, UNAVAILABLE, ...: pipe or fork failed (code from
//     errno).
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// A program started by SpawnSupervised. The supervisor is the caller's
// child; the program is the supervisor's child and leads its own process
// group. The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER):
// every process the program starts that is orphaned is re-parented to it.
// When the program exits, the supervisor writes its wait status to
// `exited`, SIGKILLs every process still descended from it (its group, and
// every orphan, whatever its session or group), reaps them and exits 0.
// Closing `lifeline` (or the caller dying) makes it kill the program's
// whole tree at once. The supervisor holds no other descriptor of the
// caller's, and blocks every signal but SIGKILL: signal the program's
// group (kill(-pid, ...)), not the supervisor.
struct SupervisedChild {
  pid_t pid = -1;         // the program; its process group id too
  pid_t supervisor = -1;  // the caller's child: reap it (WaitForExit)
  // Readable once the program has exited: its wait status, an int. EOF
  // without it: the supervisor died first (someone SIGKILLed it).
  ScopedFd exited;
  ScopedFd lifeline;  // write end; closing it kills the program's tree
};

// Spawn, under a supervisor (see SupervisedChild); `new_process_group` is
// implied. The same errors as Spawn; when the program cannot be executed
// (and exec_failure_exits_127 is false) the supervisor is reaped before
// the error returns. Linux only.
absl::StatusOr<SupervisedChild> SpawnSupervised(const SpawnOptions& options);

// The calling process's environment, as a map (for SpawnOptions::env).
std::map<std::string, std::string> CurrentEnvironment();

// Blocks until `pid` (a child of this process) exits; returns its wait
// status. FAILED_PRECONDITION when it is not a child to wait for.
absl::StatusOr<int> WaitForExit(pid_t pid);

// Waits up to `grace` for `pid` to exit, then SIGKILLs it (its whole
// process group with `group`) and reaps it. Returns the wait status;
// FAILED_PRECONDITION when it is not a child to wait for. Polls: meant for
// process lifetimes, not for fine-grained timing.
absl::StatusOr<int> WaitOrKill(pid_t pid, absl::Duration grace, bool group);

}  // namespace dial
