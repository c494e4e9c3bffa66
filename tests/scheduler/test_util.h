// Helpers shared by the scheduler core's tests: waiting for durability,
// one-metric reports and a per-test scratch directory. Not thread-safe.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "scheduler/core.h"
#include "searchers/searcher.h"

namespace dial::scheduler {

// Waits until what a reply's `ticket` covers is durable (or lost).
inline absl::Status Durable(SchedulerCore& core, WriteTicket ticket) {
  absl::Notification done;
  absl::Status result;
  core.WhenDurable(ticket, [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

// Metrics holding one value.
inline searchers::Metrics Metric(const std::string& name, double v) {
  searchers::Metrics m;
  m[name] = v;
  return m;
}

// A fresh directory per test (dir_), removed afterwards, and a database
// path in it (path_).
class DbDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("dial-", info->test_suite_name(), "-", ::getpid(), "-",
                        info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "dial.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace dial::scheduler
