#include "worker/trial_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process.h"
#include "common/trial_protocol.h"

namespace dial::worker {

absl::StatusOr<std::unique_ptr<TrialProcess>> TrialProcess::Start(
    const TrialProcessOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("trial command is empty");
  }
  auto reports = MakePipe();
  if (!reports.ok()) return absl::UnavailableError(reports.status().message());
  auto decisions = MakePipe();
  if (!decisions.ok()) {
    return absl::UnavailableError(decisions.status().message());
  }
  SpawnOptions spawn;
  spawn.argv = options.argv;
  spawn.env = CurrentEnvironment();
  for (const auto& [k, v] : options.env) (*spawn.env)[k] = v;
  (*spawn.env)[kEnvReportFd] = "3";
  (*spawn.env)[kEnvDecisionFd] = "4";
  spawn.new_process_group = true;
  spawn.stdin_fd = ChildFd::Null();
  spawn.stdout_fd = ChildFd::TruncateFile(options.stdout_path);
  spawn.stderr_fd = ChildFd::TruncateFile(options.stderr_path);
  spawn.extra_fds = {{3, reports->write.get()}, {4, decisions->read.get()}};
  // A program that cannot be run fails like one that exits 127, with a
  // line on its stderr (docs/trial-protocol.md).
  spawn.exec_failure_exits_127 = true;
  spawn.exec_failure_note =
      absl::StrCat("dial-worker: cannot run ", options.argv[0], "\n");
  auto pid = Spawn(spawn);
  if (!pid.ok()) {
    if (absl::IsInvalidArgument(pid.status())) return pid.status();
    return absl::UnavailableError(absl::StrCat(
        "cannot start the trial process: ", pid.status().message()));
  }
  std::unique_ptr<TrialProcess> p(new TrialProcess());
  p->pid_ = *pid;
  p->report_fd_ = reports->read.release();
  p->decision_fd_ = decisions->write.release();
  p->stderr_path_ = options.stderr_path;
  return p;
}

TrialProcess::~TrialProcess() {
  if (!exited_.load()) WaitOrKill(absl::ZeroDuration());
  if (report_fd_ >= 0) close(report_fd_);
  if (decision_fd_ >= 0) close(decision_fd_);
}

std::optional<std::string> TrialProcess::ReadLine(absl::Duration timeout,
                                                  bool* timed_out) {
  const absl::Time deadline = absl::Now() + timeout;
  if (timed_out) *timed_out = false;
  while (true) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (timeout != absl::InfiniteDuration()) {
      const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      pollfd fd{report_fd_, POLLIN, 0};
      const int ready =
          left_ms <= 0
              ? 0
              : poll(&fd, 1,
                     static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        if (timed_out) *timed_out = true;
        return std::nullopt;
      }
    }
    char chunk[4096];
    ssize_t n = read(report_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<size_t>(n));
    if (buffer_.size() > (1 << 20)) return std::nullopt;  // not a protocol peer
  }
}

absl::Status TrialProcess::WriteLine(const std::string& line) {
  std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(decision_fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError("trial process closed its decision pipe");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void TrialProcess::Signal(int signal) {
  if (pid_ > 0 && !exited_.load()) kill(-pid_, signal);
}

int TrialProcess::WaitOrKill(absl::Duration grace) {
  if (exited_.load()) return status_;
  auto status = dial::WaitOrKill(pid_, grace, /*group=*/true);
  if (status.ok()) status_ = *status;
  // Anything else left in the group goes too.
  kill(-pid_, SIGKILL);
  exited_.store(true);
  return status_;
}

std::string TrialProcess::StderrTail(int lines) const {
  std::ifstream in(stderr_path_, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > 8192 ? size - 8192 : 0;
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return text;  // a trial that wrote nothing
  size_t pos = text.size();
  for (int i = 0; i < lines && pos != std::string::npos && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
  }
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

}  // namespace dial::worker
