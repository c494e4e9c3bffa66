// The trainer through its torch-free interface: learning, exact resume,
// clear errors for bad knobs and data.
#include "trainer/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_split.h"
#include "storage/checkpoint_store.h"
#include "tests/trainer/test_util.h"
#include "trainer/idx.h"
#include "trainer/lr_schedule.h"

namespace dial::trainer {
namespace {

using ::testing::HasSubstr;

TEST_F(TrainerTest, TrainingLowersTheLossOnSyntheticData) {
  TrainerConfig c = Config(Knobs(
      {{"steps", 300}, {"eval_every", 50}, {"batch_size", 64}, {"units", 64}}));
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
// run (on `resume_threads` threads), and compare with a run that was never
// interrupted.
void ExpectExactResume(const fs::path& root, google::protobuf::Struct knobs,
                       int threads = 1, int resume_threads = 1) {
  TrainerConfig c = Config(knobs);
  RunContext whole;
  whole.threads = threads;
  whole.checkpoint_root = (root / "whole").string();
  Recorder uninterrupted;
  ASSERT_TRUE(Train(c, whole, uninterrupted).ok());

  RunContext first;
  first.threads = threads;
  first.checkpoint_root = (root / "split").string();
  Recorder stopped(100);
  auto part = Train(c, first, stopped);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_TRUE(part->stopped);
  ASSERT_EQ(stopped.reports.back().step, 100);
  ASSERT_FALSE(stopped.reports.back().checkpoint.empty());

  RunContext second = first;
  second.threads = resume_threads;
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
  ExpectExactResume(root_, Knobs({{"steps", 200},
                                  {"eval_every", 50},
                                  {"batch_size", 32},
                                  {"dropout", 0.3},
                                  {"seed", 5}},
                                 {{"optimizer", "adam"}}));
}

TEST_F(TrainerTest, ResumeReproducesAnUninterruptedRunWithSgdMomentum) {
  ExpectExactResume(root_, Knobs({{"steps", 200},
                                  {"eval_every", 50},
                                  {"batch_size", 48},
                                  {"momentum", 0.9},
                                  {"lr", 0.05},
                                  {"seed", 9}},
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
    ExpectExactResume(
        root_ / (std::string(c.optimizer) + c.schedule),
        Knobs({{"steps", 200},
               {"eval_every", 50},
               {"batch_size", 32},
               {"lr", 0.01},
               {"warmup_steps", 30},
               {"lr_step_size", 40},
               {"lr_gamma", 0.5},
               {"nesterov", 1},
               {"grad_clip", 1.0},
               {"label_smoothing", 0.1},
               {"weight_decay", 1e-3},
               {"seed", 2}},
              {{"optimizer", c.optimizer}, {"lr_schedule", c.schedule}}));
  }
}

TEST_F(TrainerTest, CnnTrainsAndResumesExactlyWithBatchNorm) {
  google::protobuf::Struct knobs = Knobs({{"steps", 200},
                                          {"eval_every", 50},
                                          {"batch_size", 32},
                                          {"synthetic_features", 64},
                                          {"channels", 4},
                                          {"units", 32},
                                          {"seed", 4}},
                                         {{"model", "cnn"}, {"norm", "batch"}});
  Recorder sink;
  auto result = Train(Config(knobs), RunContext{}, sink);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(sink.reports.back().metrics.at("train_loss"),
            sink.reports.front().metrics.at("train_loss"));
  ExpectExactResume(root_, knobs);
  // Non-square inputs are refused with the reason.
  google::protobuf::Struct odd =
      Knobs({{"synthetic_features", 30}}, {{"model", "cnn"}});
  Recorder none;
  EXPECT_THAT(Train(Config(odd), RunContext{}, none).status().message(),
              HasSubstr("square images"));
}

TEST_F(TrainerTest, ResNetTrainsAndResumesExactly) {
  google::protobuf::Struct knobs = Knobs({{"steps", 200},
                                          {"eval_every", 50},
                                          {"batch_size", 32},
                                          {"synthetic_features", 64},
                                          {"channels", 4},
                                          {"blocks", 1},
                                          {"dropout", 0.2},
                                          {"seed", 6}},
                                         {{"model", "resnet"}});
  Recorder sink;
  auto result = Train(Config(knobs), RunContext{}, sink);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(sink.reports.back().metrics.at("train_loss"),
            sink.reports.front().metrics.at("train_loss"));
  ExpectExactResume(root_, knobs);
}

TEST_F(TrainerTest, ResumeIsExactWithTwoReplicasAndDropout) {
  ExpectExactResume(root_, Knobs({{"steps", 200},
                                  {"eval_every", 50},
                                  {"batch_size", 32},
                                  {"dropout", 0.3},
                                  {"replicas", 2},
                                  {"seed", 3}}));
}

// `replicas: 0` gives one CPU replica per thread; a resume on a worker
// with fewer threads keeps the checkpoint's two, so both dropout streams
// go on and the run stays exact.
TEST_F(TrainerTest, AutoReplicasResumeExactlyOnFewerThreads) {
  ExpectExactResume(root_,
                    Knobs({{"steps", 200},
                           {"eval_every", 50},
                           {"batch_size", 64},
                           {"dropout", 0.3},
                           {"replicas", 0},
                           {"seed", 8}}),
                    /*threads=*/2, /*resume_threads=*/1);
}

// A checkpoint of another model (or of a CNN saved before the fused block
// tail) is refused with the reason, not a LibTorch internal error.
TEST_F(TrainerTest, ACheckpointOfAnotherModelIsRefusedClearly) {
  RunContext ctx;
  ctx.checkpoint_root = root_.string();
  Recorder mlp;
  ASSERT_TRUE(Train(Config(Knobs({{"steps", 20},
                                  {"eval_every", 20},
                                  {"synthetic_features", 64}})),
                    ctx, mlp)
                  .ok());
  ctx.restore_checkpoint = mlp.reports.back().checkpoint;
  Recorder cnn;
  auto result = Train(Config(Knobs({{"steps", 40},
                                    {"eval_every", 20},
                                    {"synthetic_features", 64},
                                    {"channels", 4}},
                                   {{"model", "cnn"}})),
                      ctx, cnn);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition)
      << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("does not fit"));
  EXPECT_TRUE(cnn.reports.empty());

  // Same names, other shapes (LibTorch would load them silently).
  Recorder wider;
  result = Train(Config(Knobs({{"steps", 40},
                               {"eval_every", 20},
                               {"synthetic_features", 64},
                               {"units", 128}})),
                 ctx, wider);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition)
      << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("has shape"));
  EXPECT_TRUE(wider.reports.empty());
}

TEST_F(TrainerTest, Bf16AutocastTrainsOnTheCpu) {
  auto run = [&](const char* precision) {
    Recorder sink;
    auto result = Train(Config(Knobs({{"steps", 200},
                                      {"eval_every", 100},
                                      {"batch_size", 64},
                                      {"units", 64}},
                                     {{"precision", precision}})),
                        RunContext{}, sink);
    EXPECT_TRUE(result.ok()) << result.status();
    return sink.reports;
  };
  auto bf16 = run("bf16"), fp32 = run("fp32");
  ASSERT_EQ(bf16.size(), 2u);
  EXPECT_LT(bf16[1].metrics.at("train_loss"), bf16[0].metrics.at("train_loss"));
  EXPECT_GT(bf16[1].metrics.at("val_accuracy"), 0.5);
  // Autocast really ran: bf16 matmuls round differently from fp32 ones.
  EXPECT_GT(std::abs(bf16[1].metrics.at("train_loss") -
                     fp32[1].metrics.at("train_loss")),
            1e-6);
}

TEST_F(TrainerTest, APartialLastEvalBatchGivesTheExactMean) {
  // 1000 examples: 100 validate. Batches of 7 leave a last batch of 2.
  auto val = [&](double eval_batch) {
    Recorder sink;
    auto result = Train(Config(Knobs({{"steps", 30},
                                      {"eval_every", 30},
                                      {"batch_size", 7},
                                      {"synthetic_samples", 1000},
                                      {"eval_batch_size", eval_batch}})),
                        RunContext{}, sink);
    EXPECT_TRUE(result.ok()) << result.status();
    return sink.reports.back().metrics;
  };
  auto small = val(7), whole = val(1000);
  // Float rounding differs with the batch shape; a wrongly weighted last
  // batch would be off by about 1e-2.
  EXPECT_NEAR(small.at("val_loss"), whole.at("val_loss"), 1e-6);
  EXPECT_DOUBLE_EQ(small.at("val_accuracy"), whole.at("val_accuracy"));
}

TEST_F(TrainerTest, PrefetchDepthDoesNotChangeTraining) {
  auto run = [&](double depth) {
    Recorder sink;
    auto result = Train(Config(Knobs({{"steps", 120},
                                      {"eval_every", 40},
                                      {"batch_size", 16},
                                      {"prefetch", depth}})),
                        RunContext{}, sink);
    EXPECT_TRUE(result.ok()) << result.status();
    return sink.reports;
  };
  auto shallow = run(1), deep = run(16);
  ASSERT_EQ(shallow.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(shallow[i].metrics.at("train_loss"),
              deep[i].metrics.at("train_loss"));
    EXPECT_EQ(shallow[i].metrics.at("val_loss"),
              deep[i].metrics.at("val_loss"));
    EXPECT_GE(deep[i].metrics.at("input_wait"), 0.0);
    EXPECT_LE(deep[i].metrics.at("input_wait"), 1.0);
  }
}

TEST_F(TrainerTest, ValidationComesFromTrainingDataAndTestOnlyFromEvaluate) {
  TrainerConfig c = Config(Knobs({{"steps", 60},
                                  {"eval_every", 60},
                                  {"batch_size", 32},
                                  {"synthetic_samples", 2000},
                                  {"val_fraction", 0.2},
                                  {"save_predictions", 1}}));
  RunContext ctx;
  ctx.checkpoint_root = root_.string();
  Recorder sink;
  ASSERT_TRUE(Train(c, ctx, sink).ok());
  const Report& last = sink.reports.back();
  ASSERT_FALSE(last.checkpoint.empty());
  // 1 epoch = 1600 / 32 = 50 steps: the other 400 examples validate.
  EXPECT_DOUBLE_EQ(last.metrics.at("epoch"), 60.0 / 50.0);

  ctx.restore_checkpoint = last.checkpoint;
  auto val = EvaluateCheckpoint(c, ctx, "val", "");
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(val->at("val_examples"), 400);
  EXPECT_NEAR(val->at("val_loss"), last.metrics.at("val_loss"), 1e-9);
  const std::string csv = (root_ / "test.csv").string();
  auto test = EvaluateCheckpoint(c, ctx, "test", csv);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->at("test_examples"), 500);  // a quarter of the samples
  EXPECT_GT(test->at("test_accuracy"), 0.4);

  // Predictions: one row per example, agreeing with the accuracy.
  auto check_csv = [](const std::string& content, double accuracy, int rows) {
    std::istringstream in(content);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "index,label,prediction,confidence");
    int n = 0, right = 0;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ',');
      ASSERT_EQ(f.size(), 4u) << line;
      right += f[1] == f[2];
      ++n;
    }
    EXPECT_EQ(n, rows);
    EXPECT_DOUBLE_EQ(double(right) / n, accuracy);
  };
  std::ifstream file(csv);
  check_csv(std::string(std::istreambuf_iterator<char>(file), {}),
            test->at("test_accuracy"), 500);
  auto store = storage::FileCheckpointStore::Create({root_.string()});
  ASSERT_TRUE(store.ok());
  auto files = (*store)->Read(last.checkpoint);
  ASSERT_TRUE(files.ok()) << files.status();
  check_csv((*files)["predictions.csv"], last.metrics.at("val_accuracy"), 400);

  EXPECT_EQ(EvaluateCheckpoint(c, ctx, "train", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TrainerTest, ADamagedCheckpointFallsBackToTheLastGoodOne) {
  TrainerConfig c = Config(Knobs(
      {{"steps", 150}, {"eval_every", 50}, {"batch_size", 32}, {"seed", 8}}));
  RunContext whole;
  whole.checkpoint_root = (root_ / "whole").string();
  Recorder uninterrupted;
  ASSERT_TRUE(Train(c, whole, uninterrupted).ok());

  RunContext ctx;
  ctx.checkpoint_root = (root_ / "split").string();
  Recorder first(100);
  ASSERT_TRUE(Train(c, ctx, first).ok());
  ASSERT_EQ(first.reports.back().checkpoint, "local/0/100");
  // Flip one byte of the step-100 weights: the manifest's CRC no longer
  // matches.
  auto store = storage::FileCheckpointStore::Create({ctx.checkpoint_root});
  ASSERT_TRUE(store.ok());
  auto dir = (*store)->PathOf("local/0/100");
  ASSERT_TRUE(dir.ok());
  {
    std::fstream f(*dir + "/model.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char byte = 0;
    f.read(&byte, 1);
    byte ^= 0x5a;
    f.seekp(100);
    f.write(&byte, 1);
  }
  ASSERT_EQ((*store)->Verify("local/0/100").status().code(),
            absl::StatusCode::kDataLoss);

  ctx.restore_checkpoint = "local/0/100";
  Recorder resumed;
  auto rest = Train(c, ctx, resumed);
  ASSERT_TRUE(rest.ok()) << rest.status();
  // Resumed from step 50: steps 100 and 150 again, as the uninterrupted run.
  ASSERT_EQ(resumed.reports.size(), 2u);
  EXPECT_EQ(resumed.reports[0].step, 100);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(resumed.reports[i].metrics.at("val_loss"),
                uninterrupted.reports[i + 1].metrics.at("val_loss"), 1e-6);
  }
  // The damaged checkpoint was replaced by a good one.
  EXPECT_TRUE((*store)->Verify("local/0/100").ok());
  EXPECT_EQ(resumed.reports[0].checkpoint, "local/0/100");

  // With nothing good to fall back to, the error says so.
  ASSERT_TRUE((*store)->Delete("local/0/50").ok());
  dir = (*store)->PathOf("local/0/100");
  std::ofstream(*dir + "/model.pt", std::ios::app) << "garbage";
  Recorder none;
  auto failed = Train(c, ctx, none);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(failed.status().message(), HasSubstr("no earlier checkpoint"));
}

TEST(TrainerConfigTest, UnusableCombinationsFailWithTheReason) {
  auto fails = [](google::protobuf::Struct knobs, const char* why) {
    Recorder sink;
    auto result = Train(Config(knobs), RunContext{}, sink);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(), HasSubstr(why));
    EXPECT_TRUE(sink.reports.empty());
  };
  fails(Knobs({}, {{"precision", "fp16"}}), "fp16 needs a CUDA device");
  fails(Knobs({{"replicas", 4}, {"batch_size", 2}}), "smaller than replicas 4");
  fails(Knobs({{"synthetic_features", 16}}, {{"model", "resnet"}}),
        "at least 8x8");
  fails(Knobs({{"synthetic_features", 30}}, {{"model", "resnet"}}),
        "square images");
  fails(Knobs({}, {{"schedule", "2:{\"lr\":0.1};oops"}}),
        "schedule entry 2 'oops'");
}

// The `schedule` knob (what `dialctl study replay` writes): the knobs of
// entry STEP train every step after STEP.
TEST(TrainerScheduleTest, ScheduledKnobsTakeEffectAfterTheirStep) {
  TrainerConfig c = Config(
      Knobs({{"steps", 4}, {"eval_every", 1}, {"batch_size", 32}, {"lr", 0.1}},
            {{"lr_schedule", "constant"},
             {"schedule", "2:{\"lr\":0.05};3:{\"lr\":0.02}"}}));
  Recorder sink;
  auto result = Train(c, RunContext{}, sink);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(sink.reports.size(), 4u);
  std::vector<double> lrs;
  for (const auto& r : sink.reports) lrs.push_back(r.metrics.at("lr"));
  EXPECT_THAT(lrs, ::testing::ElementsAre(0.1, 0.1, 0.05, 0.02));
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
  EXPECT_THAT(c.status().message(),
              HasSubstr("activation 'swish' is not one of"));

  params.Clear();
  (*params.mutable_fields())["units"].set_number_value(12.5);
  c = ResolveTrainerConfig({}, params);
  EXPECT_THAT(c.status().message(), HasSubstr("units must be an integer"));

  params.Clear();
  (*params.mutable_fields())["learning_rate"].set_number_value(0.1);
  c = ResolveTrainerConfig({}, params);
  EXPECT_THAT(c.status().message(),
              HasSubstr("'learning_rate' is not a trainer knob"));

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
