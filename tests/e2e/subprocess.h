// Test helper: runs a real binary as a child process (common/process.h)
// with its stdout on a pipe, so a test can wait for a readiness line (with a
// deadline, never a sleep) and kill the process with any signal. Not
// thread-safe.
#pragma once

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/process.h"

// Skips the current test when the build has no dial-train
// (-DDIAL_BUILD_TRAINER=OFF): tests/CMakeLists.txt then defines
// DIAL_TRAIN_BIN as "".
#define DIAL_SKIP_WITHOUT_TRAINER()                                     \
  do {                                                                  \
    if (std::string(DIAL_TRAIN_BIN).empty()) {                          \
      GTEST_SKIP() << "built without the trainer (DIAL_BUILD_TRAINER)"; \
    }                                                                   \
  } while (0)

namespace dial::testing {

class Subprocess {
 public:
  Subprocess() = default;
  Subprocess(const Subprocess&) = delete;
  ~Subprocess() { Kill(SIGKILL); }

  // Starts argv[0] (a path) with the given arguments; stderr goes to
  // `stderr_path` (appended to, or inherited when empty), with `env` added
  // to this process's environment. False when it cannot be started (the
  // reason is logged to stderr).
  bool Start(const std::vector<std::string>& argv,
             const std::string& stderr_path = "",
             const std::map<std::string, std::string>& env = {}) {
    auto out = MakePipe();
    if (!out.ok()) return Failed(out.status());
    SpawnOptions options;
    options.argv = argv;
    if (!env.empty()) {
      options.env = CurrentEnvironment();
      for (const auto& [k, v] : env) (*options.env)[k] = v;
    }
    options.search_path = false;
    options.stdout_fd = ChildFd::Fd(out->write.get());
    if (!stderr_path.empty()) {
      options.stderr_fd = ChildFd::AppendFile(stderr_path);
    }
    auto pid = Spawn(options);
    if (!pid.ok()) return Failed(pid.status());
    pid_ = *pid;
    out_ = out->read.release();
    return true;
  }

  // The next stdout line, or nullopt at EOF or after `timeout`.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Reads lines until one starts with `prefix`; returns the rest of it.
  std::optional<std::string> WaitFor(const std::string& prefix,
                                     std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto line = ReadLine(left);
      if (!line) return std::nullopt;
      if (line->rfind(prefix, 0) == 0) return line->substr(prefix.size());
    }
  }

  // Sends `signal` and reaps the process; returns its wait status.
  int Kill(int signal) {
    if (pid_ <= 0) return -1;
    kill(pid_, signal);
    const int status = WaitForExit(pid_).value_or(-1);
    pid_ = -1;
    if (out_ >= 0) close(out_);
    out_ = -1;
    return status;
  }

  pid_t pid() const { return pid_; }

 private:
  static bool Failed(const absl::Status& status) {
    std::cerr << "Subprocess: " << status << std::endl;
    return false;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
};

}  // namespace dial::testing
