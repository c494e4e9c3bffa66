#include "worker/trial_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace dial::worker {

absl::StatusOr<std::unique_ptr<TrialProcess>> TrialProcess::Start(
    const TrialProcessOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("trial command is empty");
  }
  int reports[2], decisions[2];
  if (pipe2(reports, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(decisions, O_CLOEXEC) != 0) {
    close(reports[0]);
    close(reports[1]);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  int out = open(options.stdout_path.c_str(),
                 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = open(options.stderr_path.c_str(),
                 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) {
    for (int fd :
         {reports[0], reports[1], decisions[0], decisions[1], out, err}) {
      if (fd >= 0) close(fd);
    }
    return absl::UnavailableError(absl::StrCat("cannot create trial log files ",
                                               options.stdout_path, ": ",
                                               std::strerror(errno)));
  }
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  env["DIAL_REPORT_FD"] = "3";
  env["DIAL_DECISION_FD"] = "4";
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_error = "dial-worker: cannot run " + args[0] + "\n";

  pid_t pid = fork();
  if (pid < 0) {
    for (int fd :
         {reports[0], reports[1], decisions[0], decisions[1], out, err}) {
      close(fd);
    }
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // The worker blocks SIGTERM/SIGINT for its signal thread; the trial must
    // get them (async-signal-safe calls only from here on).
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    setpgid(0, 0);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    // dup2 clears close-on-exec on the copies, so only fds 0-4 survive exec.
    dup2(reports[1], 3);
    dup2(decisions[0], 4);
    signal(SIGPIPE, SIG_DFL);
    execvpe(argv[0], argv.data(), envp.data());
    ssize_t ignored =
        write(STDERR_FILENO, exec_error.data(), exec_error.size());
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so Signal works at once
  close(reports[1]);
  close(decisions[0]);
  close(out);
  close(err);
  std::unique_ptr<TrialProcess> p(new TrialProcess());
  p->pid_ = pid;
  p->report_fd_ = reports[0];
  p->decision_fd_ = decisions[1];
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
  const absl::Time deadline = absl::Now() + grace;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
      break;
    }
    if (r < 0 && errno != EINTR) break;
    if (absl::Now() >= deadline) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      status_ = status;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
