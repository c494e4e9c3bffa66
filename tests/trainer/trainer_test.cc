// The trainer through its torch-free interface: learning, exact resume,
// clear errors for bad knobs and data.
#include "trainer/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "trainer/idx.h"
#include "trainer/lr_schedule.h"

namespace dial::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

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

google::protobuf::Struct Knobs(
    std::initializer_list<std::pair<const char*, double>> numbers,
    std::initializer_list<std::pair<const char*, const char*>> strings = {}) {
  google::protobuf::Struct s;
  (*s.mutable_fields())["dataset"].set_string_value("synthetic");
  for (const auto& [k, v] : numbers) (*s.mutable_fields())[k].set_number_value(v);
  for (const auto& [k, v] : strings) (*s.mutable_fields())[k].set_string_value(v);
  return s;
}

TrainerConfig Config(const google::protobuf::Struct& knobs) {
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

TEST_F(TrainerTest, TrainingLowersTheLossOnSyntheticData) {
  TrainerConfig c = Config(Knobs({{"steps", 300}, {"eval_every", 50},
                                  {"batch_size", 64}, {"units", 64}}));
  Recorder sink;
  auto result = Train(c, RunContext{}, sink);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(sink.reports.size(), 6u);
  const auto& first = sink.reports.front().metrics;
  const auto& last = sink.reports.back().metrics;
  EXPECT_LT(last.at("train_loss"), 0.7 * first.at("train_loss"));
  EXPECT_LT(last.at("val_loss"), first.at("val_loss"));
  EXPECT_GT(last.at("val_accuracy"), 0.5);  // 4 classes: chance is 0.25
  EXPECT_GT(last.at("samples_per_s"), 0);
  EXPECT_EQ(result->last_step, 300);
  EXPECT_EQ(result->final_metrics, last);
}

// Stop at step 100 (checkpointed), resume from that checkpoint in a fresh
// run, and compare with a run that was never interrupted.
void ExpectExactResume(const fs::path& root, google::protobuf::Struct knobs) {
  TrainerConfig c = Config(knobs);
  RunContext whole;
  whole.checkpoint_root = (root / "whole").string();
  Recorder uninterrupted;
  ASSERT_TRUE(Train(c, whole, uninterrupted).ok());

  RunContext first;
  first.checkpoint_root = (root / "split").string();
  Recorder stopped(100);
  auto part = Train(c, first, stopped);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_TRUE(part->stopped);
  ASSERT_EQ(stopped.reports.back().step, 100);
  ASSERT_FALSE(stopped.reports.back().checkpoint.empty());

  RunContext second = first;
  second.restore_checkpoint = stopped.reports.back().checkpoint;
  Recorder resumed;
  auto rest = Train(c, second, resumed);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(resumed.reports.size(), 2u);
  EXPECT_EQ(resumed.reports[0].step, 150);
  for (size_t i = 0; i < 2; ++i) {
    const auto& a = uninterrupted.reports[i + 2].metrics;
    const auto& b = resumed.reports[i].metrics;
    for (const char* m : {"train_loss", "val_loss", "val_accuracy"}) {
      EXPECT_NEAR(a.at(m), b.at(m), 1e-6) << m << " at report " << i;
    }
  }
}

TEST_F(TrainerTest, ResumeReproducesAnUninterruptedRunWithAdamAndDropout) {
  ExpectExactResume(root_, Knobs({{"steps", 200}, {"eval_every", 50},
                                  {"batch_size", 32}, {"dropout", 0.3},
                                  {"seed", 5}},
                                 {{"optimizer", "adam"}}));
}

TEST_F(TrainerTest, ResumeReproducesAnUninterruptedRunWithSgdMomentum) {
  ExpectExactResume(root_, Knobs({{"steps", 200}, {"eval_every", 50},
                                  {"batch_size", 48}, {"momentum", 0.9},
                                  {"lr", 0.05}, {"seed", 9}},
                                 {{"optimizer", "sgd"}}));
}

TEST_F(TrainerTest, ResumeIsExactForEveryOptimiserAndSchedule) {
  struct Case {
    const char* optimizer;
    const char* schedule;
  };
  for (const Case& c : {Case{"adamw", "cosine"}, Case{"rmsprop", "step"},
                        Case{"sgd", "cosine"}}) {
    SCOPED_TRACE(std::string(c.optimizer) + " " + c.schedule);
    ExpectExactResume(root_ / (std::string(c.optimizer) + c.schedule),
                      Knobs({{"steps", 200}, {"eval_every", 50},
                             {"batch_size", 32}, {"lr", 0.01},
                             {"warmup_steps", 30}, {"lr_step_size", 40},
                             {"lr_gamma", 0.5}, {"nesterov", 1},
                             {"grad_clip", 1.0}, {"label_smoothing", 0.1},
                             {"weight_decay", 1e-3}, {"seed", 2}},
                            {{"optimizer", c.optimizer},
                             {"lr_schedule", c.schedule}}));
  }
}

TEST_F(TrainerTest, CnnTrainsAndResumesExactlyWithBatchNorm) {
  google::protobuf::Struct knobs =
      Knobs({{"steps", 200}, {"eval_every", 50}, {"batch_size", 32},
             {"synthetic_features", 64}, {"channels", 4}, {"units", 32},
             {"seed", 4}},
            {{"model", "cnn"}, {"norm", "batch"}});
  Recorder sink;
  auto result = Train(Config(knobs), RunContext{}, sink);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(sink.reports.back().metrics.at("train_loss"),
            sink.reports.front().metrics.at("train_loss"));
  ExpectExactResume(root_, knobs);
  // Non-square inputs are refused with the reason.
  google::protobuf::Struct odd = Knobs({{"synthetic_features", 30}}, {{"model", "cnn"}});
  Recorder none;
  EXPECT_THAT(Train(Config(odd), RunContext{}, none).status().message(),
              HasSubstr("square images"));
}

TEST(LearningRateTest, SchedulesGiveTheDocumentedRates) {
  google::protobuf::Struct k;
  auto set = [&](const char* name, double v) {
    (*k.mutable_fields())[name].set_number_value(v);
  };
  set("lr", 0.1);
  set("steps", 1000);
  set("warmup_steps", 100);
  set("lr_step_size", 300);
  set("lr_gamma", 0.5);
  auto with = [&](const char* schedule) {
    google::protobuf::Struct copy = k;
    (*copy.mutable_fields())["lr_schedule"].set_string_value(schedule);
    return *ResolveTrainerConfig(copy, {});
  };
  const TrainerConfig constant = with("constant"), step = with("step"),
                      cosine = with("cosine");
  // Warm-up: linear from 0 over 100 steps, for every schedule.
  EXPECT_DOUBLE_EQ(LearningRate(constant, 1), 0.001);
  EXPECT_DOUBLE_EQ(LearningRate(step, 50), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(cosine, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(constant, 777), 0.1);
  // Step: halves every 300 steps after warm-up.
  EXPECT_DOUBLE_EQ(LearningRate(step, 101), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(step, 400), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(step, 401), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(step, 701), 0.025);
  // Cosine: from lr to 0 over the steps after warm-up.
  EXPECT_NEAR(LearningRate(cosine, 550), 0.05, 1e-12);
  EXPECT_NEAR(LearningRate(cosine, 1000), 0.0, 1e-12);
}

TEST(TrainerKnobsTest, BadParamsFailWithClearMessages) {
  google::protobuf::Struct params;
  (*params.mutable_fields())["lr"].set_number_value(-0.1);
  auto c = ResolveTrainerConfig({}, params);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("params.lr: lr must be between"));

  params.Clear();
  (*params.mutable_fields())["activation"].set_string_value("swish");
  c = ResolveTrainerConfig({}, params);
  EXPECT_THAT(c.status().message(), HasSubstr("activation 'swish' is not one of"));

  params.Clear();
  (*params.mutable_fields())["units"].set_number_value(12.5);
  c = ResolveTrainerConfig({}, params);
  EXPECT_THAT(c.status().message(), HasSubstr("units must be an integer"));

  params.Clear();
  (*params.mutable_fields())["learning_rate"].set_number_value(0.1);
  c = ResolveTrainerConfig({}, params);
  EXPECT_THAT(c.status().message(), HasSubstr("'learning_rate' is not a trainer knob"));

  // Params override knobs.
  google::protobuf::Struct knobs;
  (*knobs.mutable_fields())["units"].set_number_value(64);
  params.Clear();
  (*params.mutable_fields())["units"].set_number_value(32);
  c = ResolveTrainerConfig(knobs, params);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->units, 32);
}

TEST(TrainerDataTest, MissingDatasetNamesThePath) {
  google::protobuf::Struct knobs;
  (*knobs.mutable_fields())["data_dir"].set_string_value("/nonexistent/fm");
  auto c = ResolveTrainerConfig(knobs, {});
  ASSERT_TRUE(c.ok());
  Recorder sink;
  auto result = Train(*c, RunContext{}, sink);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("/nonexistent/fm"));
  EXPECT_TRUE(sink.reports.empty());
}

TEST(IdxTest, ReadsGzipIdxAndRejectsTruncation) {
  const std::string path =
      (fs::temp_directory_path() / ("idx-" + std::to_string(getpid()) + ".gz"))
          .string();
  const unsigned char header[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  const unsigned char body[] = {1, 2, 3, 4, 5, 6};
  {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, header, sizeof(header));
    gzwrite(f, body, sizeof(body));
    gzclose(f);
  }
  auto idx = ReadIdxGz(path);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(idx->data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, header, sizeof(header));
    gzwrite(f, body, 4);
    gzclose(f);
  }
  EXPECT_THAT(ReadIdxGz(path).status().message(), HasSubstr("truncated"));
  EXPECT_EQ(ReadIdxGz(path + ".missing").status().code(),
            absl::StatusCode::kNotFound);
  fs::remove(path);
}

}  // namespace
}  // namespace dial::trainer
