// TrialProcess: one trial as a child process in its own process group,
// under a supervisor that kills whatever it started once it exits (see
// SpawnSupervised in common/process.h), optionally in its own cgroup
// scope, with the trial protocol's two pipes (reports in, decisions out)
// on fds 3 and 4. Its stdout and stderr go through pipes to files, each
// capped: past `max_log_bytes` a file is rotated to "<file>.1" (one old
// part is kept). Not thread-safe: one owner thread, except Signal, which
// any thread may call.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "worker/cgroups.h"

namespace dial::worker {

// The longest report line a trial may write (without its newline).
inline constexpr size_t kMaxReportLineBytes = 1 << 20;

struct TrialProcessOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  // The process's whole environment (the worker's own is not inherited);
  // DIAL_REPORT_FD and DIAL_DECISION_FD are added.
  std::map<std::string, std::string> env;
  std::string stdout_path;
  std::string stderr_path;
  // Per file: rotated past this size; 0: no cap.
  int64_t max_log_bytes = 0;
  // The cgroup the process joins before exec; null: none.
  std::unique_ptr<CgroupScope> cgroup;
  // The user the process runs as; nullopt: the worker's.
  std::optional<RunAs> run_as;
  // RLIMIT_NPROC for the run-as user; 0: unchanged.
  int64_t max_user_processes = 0;
  // A /proc showing only its user's processes (SpawnOptions::private_proc).
  bool private_proc = false;
  // With private_proc: private /tmp, /var/tmp and /dev/shm of this size
  // each, and the directories to keep visible over them (SpawnOptions).
  int64_t private_tmp_bytes = 0;
  std::vector<std::string> private_tmp_keep;
  // Its working directory; empty: the worker's.
  std::string cwd;
};

// Why ReadLine returned no line.
enum class ReadEnd {
  kNone,         // it returned a line
  kClosed,       // the process closed its end of the report pipe
  kExited,       // the main process exited (whoever still holds the pipe)
  kTimedOut,     // no full line within the timeout
  kLineTooLong,  // a line longer than kMaxReportLineBytes
};

// A log file that rotates: past `max_bytes` it is renamed to "<path>.1"
// (replacing an older part) and started again with a note. Not
// thread-safe.
class RotatingLog {
 public:
  // UNAVAILABLE naming the file if it cannot be created (truncated).
  static absl::StatusOr<std::unique_ptr<RotatingLog>> Open(std::string path,
                                                           int64_t max_bytes);
  void Append(const char* data, size_t size);

 private:
  RotatingLog(std::string path, int64_t max_bytes, ScopedFd fd)
      : path_(std::move(path)), max_bytes_(max_bytes), fd_(std::move(fd)) {}
  void Rotate();
  const std::string path_;
  const int64_t max_bytes_;
  ScopedFd fd_;
  int64_t size_ = 0;
  int rotations_ = 0;
};

class TrialProcess {
 public:
  // UNAVAILABLE if pipes or files cannot be made or fork fails. A program
  // that cannot be executed exits with code 127 and says why on stderr.
  static absl::StatusOr<std::unique_ptr<TrialProcess>> Start(
      TrialProcessOptions options);
  ~TrialProcess();  // kills the tree if it still runs, and reaps it

  // The next line the process reported. nullopt once it closed its end,
  // its main process exited (lines it wrote before are still returned), a
  // line is too long, or, with a finite `timeout`, no full line arrived in
  // time; `*end` says which.
  std::optional<std::string> ReadLine(
      absl::Duration timeout = absl::InfiniteDuration(),
      ReadEnd* end = nullptr);
  // UNAVAILABLE once the process has closed its end (with SIGPIPE ignored
  // in this process; otherwise SIGPIPE ends it).
  absl::Status WriteLine(const std::string& line);
  // Sends `signal` to the whole process group.
  void Signal(int signal);
  // Waits up to `grace` for the main process to exit, then SIGKILLs its
  // group. Everything it started is killed too (the supervisor, then the
  // cgroup). Returns the main process's wait status.
  int WaitOrKill(absl::Duration grace);
  // Whether WaitOrKill had to kill it after the grace period.
  bool killed_after_grace() const { return killed_after_grace_; }
  // The last `lines` lines of its stderr.
  std::string StderrTail(int lines) const;
  pid_t pid() const { return child_.pid; }
  // Its cgroup, or null.
  const CgroupScope* cgroup() const { return cgroup_.get(); }

 private:
  TrialProcess() = default;
  // Reads the main process's wait status from child_.exited (blocking).
  void ReadExitStatus();
  // Moves whatever the report pipe holds now into buffer_.
  void DrainReports();
  void PumpLogs();

  SupervisedChild child_;
  std::atomic<bool> group_gone_{false};
  bool main_exited_ = false;
  bool reaped_ = false;
  bool killed_after_grace_ = false;
  int status_ = 0;
  int report_fd_ = -1;    // read end
  int decision_fd_ = -1;  // write end
  std::string buffer_;
  std::string stderr_path_;
  std::unique_ptr<CgroupScope> cgroup_;
  ScopedFd log_out_;  // read ends of the child's stdout and stderr
  ScopedFd log_err_;
  std::unique_ptr<RotatingLog> out_log_;
  std::unique_ptr<RotatingLog> err_log_;
  Pipe stop_logs_;  // closing the write end ends PumpLogs
  std::thread log_thread_;
};

// "exit code 3", "killed by signal 9 (Killed)".
std::string DescribeExit(int wait_status);

}  // namespace dial::worker
