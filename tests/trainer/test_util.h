// Helpers shared by the trainer tests: a recording ReportSink, knob
// builders and a per-test scratch directory. Not thread-safe.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/trainer_knobs.h"
#include "trainer/trainer.h"

namespace dial::trainer {

namespace fs = std::filesystem;

class Recorder : public ReportSink {
 public:
  explicit Recorder(int64_t stop_at = -1) : stop_at_(stop_at) {}
  absl::StatusOr<Decision> OnReport(const Report& report) override {
    reports.push_back(report);
    return report.step == stop_at_ ? Action::kStop : Action::kContinue;
  }
  std::vector<Report> reports;

 private:
  int64_t stop_at_;
};

inline google::protobuf::Struct Knobs(
    std::initializer_list<std::pair<const char*, double>> numbers,
    std::initializer_list<std::pair<const char*, const char*>> strings = {}) {
  google::protobuf::Struct s;
  (*s.mutable_fields())["dataset"].set_string_value("synthetic");
  for (const auto& [k, v] : numbers)
    (*s.mutable_fields())[k].set_number_value(v);
  for (const auto& [k, v] : strings)
    (*s.mutable_fields())[k].set_string_value(v);
  return s;
}

inline TrainerConfig Config(const google::protobuf::Struct& knobs) {
  auto config = ResolveTrainerConfig(knobs, {});
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("dial-trainer-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

}  // namespace dial::trainer
