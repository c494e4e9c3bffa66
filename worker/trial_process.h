// TrialProcess: one trial as a child process in its own process group, with
// the trial protocol's two pipes (reports in, decisions out) on fds 3 and 4,
// stdout and stderr to files. Not thread-safe: one owner thread, except
// Signal, which any thread may call.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dial::worker {

struct TrialProcessOptions {
  std::vector<std::string> argv;           // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // on top of the worker's own
  std::string stdout_path;
  std::string stderr_path;
};

class TrialProcess {
 public:
  // UNAVAILABLE if pipes or files cannot be made or fork fails. A program
  // that cannot be executed exits with code 127 and says why on stderr.
  static absl::StatusOr<std::unique_ptr<TrialProcess>> Start(
      const TrialProcessOptions& options);
  ~TrialProcess();  // SIGKILLs the group if it still runs, and reaps it

  // The next line the process reported; nullopt once it closed its end.
  // With a finite `timeout`, gives up when no full line arrives in time
  // and sets *timed_out.
  std::optional<std::string> ReadLine(
      absl::Duration timeout = absl::InfiniteDuration(),
      bool* timed_out = nullptr);
  // UNAVAILABLE once the process has closed its end (with SIGPIPE ignored
  // in this process; otherwise SIGPIPE ends it).
  absl::Status WriteLine(const std::string& line);
  // Sends `signal` to the whole process group.
  void Signal(int signal);
  // Waits for the process to exit; SIGKILLs the group after `grace`.
  // Returns the wait status.
  int WaitOrKill(absl::Duration grace);
  // The last `lines` lines of its stderr.
  std::string StderrTail(int lines) const;
  pid_t pid() const { return pid_; }

 private:
  TrialProcess() = default;
  pid_t pid_ = -1;
  std::atomic<bool> exited_{false};
  int status_ = 0;
  int report_fd_ = -1;    // read end
  int decision_fd_ = -1;  // write end
  std::string buffer_;
  std::string stderr_path_;
};

// "exit code 3", "killed by signal 9 (Killed)".
std::string DescribeExit(int wait_status);

}  // namespace dial::worker
