// The end-to-end fixture: a real dial-scheduler on 127.0.0.1 (a SQLite
// file and a checkpoint root in a per-test directory), real dial-worker
// processes started on demand, a DialClient, and dialctl. Not thread-safe.
#pragma once

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/e2e/subprocess.h"

namespace dial {

namespace fs = std::filesystem;

// The whole of a text file ("" when it cannot be read).
inline std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class WorkerE2eTest : public ::testing::Test {
 protected:
  using DialClient = client::DialClient;

  void SetUp() override {
    DIAL_SKIP_WITHOUT_TRAINER();
    dir_ = fs::temp_directory_path() /
           ("dial-e2e-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_TRUE(scheduler_.Start(SchedulerArgv("127.0.0.1:0"),
                                 (dir_ / "scheduler.log").string()));
    auto address = scheduler_.WaitFor("dial-scheduler listening on ",
                                      std::chrono::seconds(30));
    ASSERT_TRUE(address.has_value());
    address_ = *address;
    auto client = DialClient::Create({address_, absl::Seconds(20)});
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
  }
  // SIGKILLs the scheduler and starts a new one on the same database,
  // checkpoint root and address (so workers find it again).
  void RestartScheduler() {
    scheduler_.Kill(SIGKILL);
    ASSERT_TRUE(scheduler_.Start(SchedulerArgv(address_),
                                 (dir_ / "scheduler.log").string()));
    ASSERT_TRUE(
        scheduler_
            .WaitFor("dial-scheduler listening on ", std::chrono::seconds(30))
            .has_value());
    auto client = DialClient::Create({address_, absl::Seconds(20)});
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
  }
  // The scheduler's command line, listening on `listen`, with
  // SchedulerFlags() added.
  std::vector<std::string> SchedulerArgv(const std::string& listen) const {
    std::vector<std::string> argv = {
        DIAL_SCHEDULER_BIN, "--db=" + (dir_ / "dial.db").string(),
        "--checkpoint-root=" + (dir_ / "ckpt").string(), "--listen=" + listen,
        "--worker-lease-ms=1500"};
    for (const std::string& flag : SchedulerFlags()) argv.push_back(flag);
    return argv;
  }
  // More scheduler flags (a fixture may write files into dir_ first).
  virtual std::vector<std::string> SchedulerFlags() const { return {}; }
  // A client of the scheduler that sends `token`.
  std::unique_ptr<DialClient> As(const std::string& token) const {
    client::DialClientOptions o;
    o.target = address_;
    o.timeout = absl::Seconds(20);
    o.token = token;
    auto c = DialClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // Polls `done` every 20 ms until it holds or `timeout` passes.
  static bool WaitUntil(const std::function<bool()>& done,
                        std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  void TearDown() override {
    for (auto& w : workers_) w->Kill(SIGKILL);
    scheduler_.Kill(SIGKILL);
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Whether workers keep checkpoints in caches of their own and upload
  // them (--checkpoint-cache) instead of sharing the scheduler's root.
  virtual bool Transfer() const { return false; }
  // The worker's checkpoint flag: the shared root, or its own cache.
  std::string CheckpointFlag(const std::string& host) const {
    return Transfer() ? "--checkpoint-cache=" + Cache(host).string()
                      : "--checkpoint-root=" + (dir_ / "ckpt").string();
  }
  fs::path Cache(const std::string& host) const {
    return dir_ / host / "cache";
  }
  // `extra` flags are added; `env` is added to the worker's environment.
  testing::Subprocess& StartWorker(
      const std::string& host, int slots = 1,
      const std::vector<std::string>& extra = {},
      const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv = {
        DIAL_WORKER_BIN, "--scheduler=" + address_,
        "--slots=" + std::to_string(slots), "--cpus=" + std::to_string(slots),
        "--host=" + host, "--trainer=" DIAL_TRAIN_BIN,
        "--work-dir=" + (dir_ / host).string(), CheckpointFlag(host),
        "--acquire-wait-ms=1000", "--grace-s=5",
        // The command trials these tests run (docs/workers.md, "Safe
        // workers"); the trainer needs no flag.
        "--allow-command=/usr/bin/python3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    workers_.push_back(std::make_unique<testing::Subprocess>());
    EXPECT_TRUE(
        workers_.back()->Start(argv, (dir_ / (host + ".log")).string(), env));
    return *workers_.back();
  }
  // Blocks until the study ends (or the timeout), calling `on_event` too.
  v1::StudyEvent WaitForEnd(
      const std::string& study,
      std::function<void(const v1::StudyEvent&)> on_event = nullptr) {
    auto done = std::async(std::launch::async, [&] {
      v1::StudyEvent last;
      auto status = client_->WatchStudy(study, [&](const v1::StudyEvent& e) {
        last = e;
        if (on_event) on_event(e);
        return true;
      });
      EXPECT_TRUE(status.ok()) << status;
      return last;
    });
    EXPECT_EQ(done.wait_for(std::chrono::seconds(240)),
              std::future_status::ready)
        << "study did not finish; see " << dir_;
    return done.get();
  }
  // Runs dialctl and returns its stdout.
  std::string Dialctl(const std::string& args) {
    std::string cmd =
        std::string(DIALCTL_BIN) + " --scheduler=" + address_ + " " + args;
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(pipe), 0) << cmd;
    return out;
  }

  fs::path dir_;
  std::string address_;
  testing::Subprocess scheduler_;
  std::vector<std::unique_ptr<testing::Subprocess>> workers_;
  std::unique_ptr<DialClient> client_;
};

}  // namespace dial
