// Helpers shared by the scheduler core's tests: waiting for durability,
// one-metric reports and a per-test scratch directory. Not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "scheduler/core.h"
#include "searchers/searcher.h"
#include "storage/testing/temp_dir.h"

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

// A fresh directory per test (dir_), removed afterwards with everything in
// it, and a database path in it (path_).
class DbDirTest : public ::testing::Test {
 protected:
  storage::testing::ScopedTempDir temp_{"scheduler"};
  const std::filesystem::path dir_ = temp_.path();
  const std::string path_ = temp_.File("dial.db");
};

}  // namespace dial::scheduler
