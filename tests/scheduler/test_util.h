// Helpers shared by the scheduler core's tests: waiting for durability,
// one-metric reports and a per-test scratch directory. Not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
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

// A spec of about `filler_bytes` (long categorical values no event needs).
inline v1::StudySpec BigSpec(size_t filler_bytes) {
  auto spec = ParseStudySpec(R"(
name: big
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: x, float: {min: 0, max: 1}}
budget: {max_trials: 1000, max_parallel_trials: 2}
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  // Bulk that no event needs: many long categorical values (a trial
  // carries only the one it got).
  auto* c = spec->add_search_space();
  c->set_name("c");
  for (size_t i = 0; i * 100 < filler_bytes || i < 1; ++i) {
    std::string value = std::to_string(i);
    value.resize(100, 'v');
    c->mutable_categorical()->add_values(value);
  }
  return *spec;
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
