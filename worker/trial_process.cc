#include "worker/trial_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/trial_protocol.h"

namespace dial::worker {
namespace {

// Waits up to `timeout` (infinite: no limit) for `fd` to be readable (or
// at EOF). Whether it is.
bool WaitReadable(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int wait_ms = -1;
    if (timeout != absl::InfiniteDuration()) {
      wait_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    return ready > 0;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RotatingLog>> RotatingLog::Open(
    std::string path, int64_t max_bytes) {
  unlink((path + ".1").c_str());  // a stale part of an earlier run
  ScopedFd fd(open(path.c_str(),
                   O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                   0600));
  // An older file keeps its mode through O_CREAT: the worker's alone now.
  if (fd.valid() && fchmod(fd.get(), 0600) != 0) fd.reset();
  if (!fd.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<RotatingLog>(
      new RotatingLog(std::move(path), max_bytes, std::move(fd)));
}

void RotatingLog::Append(const char* data, size_t size) {
  while (size > 0) {
    if (max_bytes_ > 0 && size_ >= max_bytes_) Rotate();
    size_t chunk = size;
    if (max_bytes_ > 0) {
      chunk = std::min<size_t>(chunk, static_cast<size_t>(max_bytes_ - size_));
    }
    const ssize_t n = write(fd_.get(), data, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk loses log lines, not the trial
    size_ += n;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void RotatingLog::Rotate() {
  const std::string old = path_ + ".1";
  rename(path_.c_str(), old.c_str());
  fd_.reset(open(path_.c_str(),
                 O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd_.valid() && fchmod(fd_.get(), 0600) != 0) fd_.reset();
  size_ = 0;
  ++rotations_;
  const std::string note = absl::StrCat(
      "[dial-worker: this log reached --max-log-bytes (", max_bytes_,
      " bytes) ", rotations_, " time(s); the part before this line is in ", old,
      ", older output was dropped]\n");
  if (fd_.valid()) {
    (void)!write(fd_.get(), note.data(), note.size());
    size_ = static_cast<int64_t>(note.size());
  }
}

absl::StatusOr<std::unique_ptr<TrialProcess>> TrialProcess::Start(
    TrialProcessOptions options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("trial command is empty");
  }
  auto reports = MakePipe();
  if (!reports.ok()) return absl::UnavailableError(reports.status().message());
  auto decisions = MakePipe();
  if (!decisions.ok()) {
    return absl::UnavailableError(decisions.status().message());
  }
  auto out = MakePipe();
  if (!out.ok()) return absl::UnavailableError(out.status().message());
  auto err = MakePipe();
  if (!err.ok()) return absl::UnavailableError(err.status().message());
  auto stop = MakePipe();
  if (!stop.ok()) return absl::UnavailableError(stop.status().message());
  auto out_log = RotatingLog::Open(options.stdout_path, options.max_log_bytes);
  if (!out_log.ok()) return out_log.status();
  auto err_log = RotatingLog::Open(options.stderr_path, options.max_log_bytes);
  if (!err_log.ok()) return err_log.status();

  SpawnOptions spawn;
  spawn.argv = options.argv;
  spawn.env = options.env;
  (*spawn.env)[kEnvReportFd] = "3";
  (*spawn.env)[kEnvDecisionFd] = "4";
  spawn.new_process_group = true;
  spawn.stdin_fd = ChildFd::Null();
  spawn.stdout_fd = ChildFd::Fd(out->write.get());
  spawn.stderr_fd = ChildFd::Fd(err->write.get());
  spawn.extra_fds = {{3, reports->write.get()}, {4, decisions->read.get()}};
  if (options.cgroup) spawn.cgroup_procs_fd = options.cgroup->procs_fd();
  spawn.run_as = options.run_as;
  spawn.max_user_processes = options.max_user_processes;
  spawn.private_proc = options.private_proc;
  spawn.private_tmp_bytes = options.private_tmp_bytes;
  spawn.private_tmp_keep = options.private_tmp_keep;
  spawn.cwd = options.cwd;
  // A program that cannot be run fails like one that exits 127, with a
  // line on its stderr (docs/trial-protocol.md).
  spawn.exec_failure_exits_127 = true;
  spawn.exec_failure_note =
      absl::StrCat("dial-worker: cannot run ", options.argv[0], "\n");
  auto child = SpawnSupervised(spawn);
  if (!child.ok()) {
    if (absl::IsInvalidArgument(child.status())) return child.status();
    return absl::UnavailableError(absl::StrCat(
        "cannot start the trial process: ", child.status().message()));
  }
  std::unique_ptr<TrialProcess> p(new TrialProcess());
  p->child_ = std::move(*child);
  p->report_fd_ = reports->read.release();
  p->decision_fd_ = decisions->write.release();
  p->stderr_path_ = options.stderr_path;
  p->cgroup_ = std::move(options.cgroup);
  p->log_out_ = std::move(out->read);
  p->log_err_ = std::move(err->read);
  p->out_log_ = std::move(*out_log);
  p->err_log_ = std::move(*err_log);
  p->stop_logs_ = std::move(*stop);
  TrialProcess* self = p.get();
  p->log_thread_ = std::thread([self] { self->PumpLogs(); });
  return p;
}

TrialProcess::~TrialProcess() {
  if (!reaped_) {
    Signal(SIGKILL);
    WaitOrKill(absl::ZeroDuration());
  }
  stop_logs_.write.reset();
  if (log_thread_.joinable()) log_thread_.join();
  if (report_fd_ >= 0) close(report_fd_);
  if (decision_fd_ >= 0) close(decision_fd_);
}

void TrialProcess::PumpLogs() {
  pollfd fds[3] = {{log_out_.get(), POLLIN, 0},
                   {log_err_.get(), POLLIN, 0},
                   {stop_logs_.read.get(), POLLIN, 0}};
  RotatingLog* logs[2] = {out_log_.get(), err_log_.get()};
  char buffer[65536];
  bool stopping = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    // Once told to stop, takes only what is already there.
    const int ready = poll(fds, 3, stopping ? 0 : -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    if (fds[2].revents != 0) {
      stopping = true;
      fds[2].fd = -1;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;  // every writer is gone
      } else {
        logs[i]->Append(buffer, static_cast<size_t>(n));
      }
    }
  }
}

void TrialProcess::ReadExitStatus() {
  int status = 0;
  size_t done = 0;
  while (done < sizeof(status)) {
    const ssize_t n =
        read(child_.exited.get(), reinterpret_cast<char*>(&status) + done,
             sizeof(status) - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  main_exited_ = true;
  if (done == sizeof(status)) {
    status_ = status;
  } else {
    // The supervisor died before it could say: its wait status stands in.
    kill(-child_.pid, SIGKILL);
    status_ = W_EXITCODE(0, SIGKILL);
  }
}

void TrialProcess::DrainReports() {
  const int flags = fcntl(report_fd_, F_GETFL);
  fcntl(report_fd_, F_SETFL, flags | O_NONBLOCK);
  char chunk[65536];
  while (buffer_.size() <= kMaxReportLineBytes) {
    const ssize_t n = read(report_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
  fcntl(report_fd_, F_SETFL, flags);
}

std::optional<std::string> TrialProcess::ReadLine(absl::Duration timeout,
                                                  ReadEnd* end) {
  const absl::Time deadline = absl::Now() + timeout;
  ReadEnd ignored;
  if (end == nullptr) end = &ignored;
  *end = ReadEnd::kNone;
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos && nl <= kMaxReportLineBytes) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (buffer_.size() > kMaxReportLineBytes) {
      *end = ReadEnd::kLineTooLong;
      return std::nullopt;
    }
    if (main_exited_) {
      // Lines it wrote before it exited are in the pipe; nothing later
      // counts, whoever still holds the pipe.
      DrainReports();
      const size_t last = buffer_.find('\n');
      if (last != std::string::npos && last <= kMaxReportLineBytes) continue;
      if (buffer_.size() > kMaxReportLineBytes) continue;
      *end = ReadEnd::kExited;
      return std::nullopt;
    }
    int wait_ms = -1;
    if (timeout != absl::InfiniteDuration()) {
      wait_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 1 << 30));
    }
    pollfd fds[2] = {{report_fd_, POLLIN, 0}, {child_.exited.get(), POLLIN, 0}};
    const int ready = poll(fds, 2, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      *end = ReadEnd::kTimedOut;
      return std::nullopt;
    }
    if (fds[0].revents != 0) {
      char chunk[65536];
      const ssize_t n = read(report_fd_, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        *end = ReadEnd::kClosed;
        return std::nullopt;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
      continue;  // what it wrote first is read first
    }
    if (fds[1].revents != 0) ReadExitStatus();
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
  if (child_.pid > 0 && !group_gone_.load()) kill(-child_.pid, signal);
}

int TrialProcess::WaitOrKill(absl::Duration grace) {
  if (reaped_) return status_;
  if (!main_exited_) {
    if (!WaitReadable(child_.exited.get(), grace)) {
      killed_after_grace_ = true;
      kill(-child_.pid, SIGKILL);
      WaitReadable(child_.exited.get(), absl::InfiniteDuration());
    }
    ReadExitStatus();
  }
  // The supervisor kills and reaps the rest of the tree, then exits.
  child_.lifeline.reset();
  (void)WaitForExit(child_.supervisor);
  group_gone_.store(true);
  reaped_ = true;
  // Every writer of its stdout and stderr is gone: what they wrote is in
  // the pipes, and lands in the files before StderrTail reads them.
  stop_logs_.write.reset();
  if (log_thread_.joinable()) log_thread_.join();
  // Belt and braces: anything in its cgroup (there should be nothing).
  if (cgroup_) cgroup_->KillAll();
  return status_;
}

std::string TrialProcess::StderrTail(int lines) const {
  auto tail_of = [](const std::string& path, std::streamoff max) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::string();
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    const std::streamoff start = size > max ? size - max : 0;
    in.seekg(start);
    return std::string((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
  };
  constexpr std::streamoff kTail = 8192;
  std::string text = tail_of(stderr_path_, kTail);
  if (static_cast<std::streamoff>(text.size()) < kTail) {
    // Just rotated: the lines before are in the older part.
    const std::string older = tail_of(
        stderr_path_ + ".1", kTail - static_cast<std::streamoff>(text.size()));
    text = older + text;
  }
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
