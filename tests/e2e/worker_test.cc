// End to end with the real binaries: dial-scheduler, dial-worker (which runs
// dial-train or a Python script as trial processes) and dialctl.
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "client/client.h"
#include "common/spec.h"
#include "searchers/searcher.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using client::DialClient;
using ::testing::HasSubstr;

// The tests that move checkpoints between workers, run twice: with the
// shared checkpoint root, and with each worker's own cache and uploads
// (CheckpointService; nothing shared but the network).
class CheckpointModesTest : public WorkerE2eTest,
                            public ::testing::WithParamInterface<bool> {
 protected:
  bool Transfer() const override { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(Roots, CheckpointModesTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OwnCaches" : "SharedRoot";
                         });

TEST_F(WorkerE2eTest, TwoWorkersRunAFourTrialStudyToCompletion) {
  StartWorker("wa");
  StartWorker("wb");
  auto spec =
      LoadStudySpecFile(DIAL_SOURCE_DIR "/examples/synthetic-random.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  auto last = WaitForEnd("synthetic");
  EXPECT_EQ(last.kind(), v1::StudyEvent::STUDY_FINISHED);

  v1::ListTrialsResponse listed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Dialctl("--json trials list synthetic"), &listed)
                  .ok());
  ASSERT_EQ(listed.trials_size(), 4);
  std::set<std::string> hosts;
  for (const auto& t : listed.trials()) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
    EXPECT_GT(t.objective_value(), 0.25);
    hosts.insert(t.worker_id().substr(0, 2));
    v1::Trial full;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    Dialctl("--json trials get synthetic " +
                            std::to_string(t.number())),
                    &full)
                    .ok());
    ASSERT_EQ(full.metric_history_size(), 6);  // 300 steps, every 50
    EXPECT_EQ(full.metric_history(5).step(), 300);
    EXPECT_TRUE(full.metric_history(0).metrics().count("val_accuracy"));
    EXPECT_EQ(full.checkpoint(),
              "synthetic/" + std::to_string(t.number()) + "/300");
  }
  EXPECT_EQ(hosts, (std::set<std::string>{"wa", "wb"}));
  EXPECT_TRUE(fs::exists(dir_ / "ckpt/synthetic/0/300/MANIFEST"));

  // The final evaluation on the held-out test split, and only there.
  google::protobuf::Struct test;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Dialctl("--json trials evaluate synthetic 0 "
                          "--trainer=" DIAL_TRAIN_BIN " --checkpoint-root=" +
                          (dir_ / "ckpt").string()),
                  &test)
                  .ok());
  EXPECT_EQ(test.fields().at("checkpoint").string_value(), "synthetic/0/300");
  EXPECT_EQ(test.fields().at("test_examples").number_value(), 1024);
  EXPECT_GT(test.fields().at("test_accuracy").number_value(), 0.25);
  EXPECT_FALSE(listed.trials(0).final_metrics().count("test_accuracy"));

  // An ensemble of the best three: each member is evaluated as that
  // trial alone would be, and their average on the same split.
  auto best = client_->GetBestTrials("synthetic", 3);
  ASSERT_TRUE(best.ok());
  google::protobuf::Struct alone;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Dialctl("--json trials evaluate synthetic " +
                          std::to_string(best->at(0).number()) +
                          " --trainer=" DIAL_TRAIN_BIN),
                  &alone)
                  .ok());
  google::protobuf::Struct ensemble;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Dialctl("--json study ensemble synthetic --top=3 "
                          "--trainer=" DIAL_TRAIN_BIN " --checkpoint-root=" +
                          (dir_ / "ckpt").string()),
                  &ensemble)
                  .ok());
  EXPECT_EQ(ensemble.fields().at("members").number_value(), 3);
  EXPECT_EQ(ensemble.fields().at("test_examples").number_value(), 1024);
  EXPECT_DOUBLE_EQ(ensemble.fields().at("member_0_accuracy").number_value(),
                   alone.fields().at("test_accuracy").number_value());
  EXPECT_GT(ensemble.fields().at("test_accuracy").number_value(), 0.25);

  // Re-evaluation: the best configuration runs twice more with new seeds
  // (DIAL_SEED reaches the trainer), and ranks by the mean of its runs.
  EXPECT_THAT(Dialctl("study reevaluate synthetic --top=1 --seeds=2"),
              HasSubstr("2 re-evaluations queued; max_trials is 6"));
  WaitForEnd("synthetic");
  auto reruns = client_->ListAllTrials("synthetic", {});
  ASSERT_TRUE(reruns.ok());
  ASSERT_EQ(reruns->size(), 6u);
  std::set<uint64_t> seeds;
  for (int i = 4; i < 6; ++i) {
    const auto& t = (*reruns)[i];
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
    EXPECT_EQ(t.origin(), best->at(0).number());
    EXPECT_TRUE(t.has_seed());
    seeds.insert(t.seed());
    EXPECT_EQ(searchers::ParamsKey(t.params()),
              searchers::ParamsKey(best->at(0).params()));
  }
  EXPECT_EQ(seeds.size(), 2u);
  // Another seed trains another model.
  EXPECT_NE((*reruns)[4].objective_value(), (*reruns)[5].objective_value());
  auto ranked = client_->GetFront("synthetic", 6);
  ASSERT_TRUE(ranked.ok());
  ASSERT_EQ(ranked->seed_runs_size(), 1);
  EXPECT_EQ(ranked->seed_runs(0).trial(), best->at(0).number());
  EXPECT_EQ(ranked->seed_runs(0).runs(), 3);
  EXPECT_NEAR(ranked->seed_runs(0).mean(),
              (best->at(0).objective_value() + (*reruns)[4].objective_value() +
               (*reruns)[5].objective_value()) /
                  3,
              1e-12);
  for (const auto& t : ranked->trials()) EXPECT_FALSE(t.has_origin());
}

TEST_F(WorkerE2eTest, APythonCommandTrialRunsToCompletion) {
  StartWorker("wa");
  auto spec = ParseStudySpec(R"(
name: script
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
searcher: {random: {seed: 3}}
budget: {max_trials: 3, max_parallel_trials: 1}
trial: {command: {argv: [/usr/bin/python3, )" DIAL_SOURCE_DIR
                             R"(/examples/trial_script.py]}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("script");
  auto trials = client_->ListAllTrials("script", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 3u);
  for (const auto& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
    const double lr = t.params().at("lr").double_value();
    // The script's loss after 50 steps of gradient descent on w^2.
    EXPECT_NEAR(t.objective_value(), 25.0 * std::pow(1 - 2 * lr, 100),
                1e-9 * (1 + t.objective_value()));
    auto full = client_->GetTrial("script", t.number());
    ASSERT_TRUE(full.ok());
    EXPECT_EQ(full->metric_history_size(), 50);
  }
}

TEST_F(WorkerE2eTest, AFailingCommandIsRetriedAndKeepsItsErrorTail) {
  StartWorker("wa");
  auto spec = ParseStudySpec(R"yaml(
name: broken
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: 1, max_failures_per_trial: 1}
trial: {command: {argv: [/usr/bin/python3, -c, "import sys; sys.exit('bad things happened')"]}})yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("broken");
  auto t = client_->GetTrial("broken", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state(), v1::FAILED);
  EXPECT_EQ(t->attempt(), 2);  // one retry
  EXPECT_THAT(t->error(), HasSubstr("exit code 1"));
  EXPECT_THAT(t->error(), HasSubstr("bad things happened"));
  EXPECT_THAT(Dialctl("trials get broken 0"), HasSubstr("bad things happened"));
}

TEST_P(CheckpointModesTest,
       AKilledWorkersTrialResumesElsewhereFromItsCheckpoint) {
  std::map<std::string, testing::Subprocess*> workers = {
      {"wa", &StartWorker("wa")}, {"wb", &StartWorker("wb")}};
  auto spec = ParseStudySpec(R"(
name: resume
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.01}}]
budget: {max_trials: 1}
trial: {trainer: {dataset: synthetic, steps: 6000, eval_every: 200, batch_size: 64, units: 128}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());

  std::string killed_host;
  int64_t killed_at = 0;
  auto last = WaitForEnd("resume", [&](const v1::StudyEvent& e) {
    // Killed once its restore point (with own caches: its last uploaded
    // checkpoint) is at step 400 or later.
    if (killed_host.empty() && e.trial().state() == v1::RUNNING &&
        e.trial().checkpoint_step() >= 400 && !e.trial().checkpoint().empty()) {
      killed_host = e.trial().worker_id().substr(0, 2);
      killed_at = e.trial().checkpoint_step();
      workers.at(killed_host)->Kill(SIGKILL);
    }
  });
  EXPECT_EQ(last.kind(), v1::StudyEvent::STUDY_FINISHED);
  ASSERT_FALSE(killed_host.empty());
  const std::string survivor = killed_host == "wa" ? "wb" : "wa";

  auto trial = client_->GetTrial("resume", 0);
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->state(), v1::COMPLETED) << trial->error();
  EXPECT_EQ(trial->attempt(), 2);
  EXPECT_EQ(trial->worker_id().substr(0, 2), survivor);
  // Every evaluation step once, in order: nothing lost, nothing doubled.
  ASSERT_EQ(trial->metric_history_size(), 30);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(trial->metric_history(i).step(), 200 * (i + 1));
  }
  // The second attempt started from the checkpoint, not from step 0.
  std::ifstream log(dir_ / survivor / "resume-0-a2.err");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("resuming from checkpoint resume/0/" +
                                    std::to_string(killed_at) + " at step " +
                                    std::to_string(killed_at)));
  EXPECT_GE(killed_at, 400);
  if (Transfer()) {
    // The checkpoint came over the network, from the scheduler's store,
    // which the killed host had uploaded it to.
    EXPECT_THAT(ReadText(dir_ / (survivor + ".log")),
                HasSubstr("downloaded checkpoint resume/0/" +
                          std::to_string(killed_at)));
    // The scheduler's store holds what the trial ended with.
    EXPECT_TRUE(fs::exists(dir_ / "ckpt" / trial->checkpoint() / "MANIFEST"))
        << trial->checkpoint();
    // dialctl fetches it without the store on its disk, and evaluates it
    // (downloading it into a temporary root).
    const std::string step = fs::path(trial->checkpoint()).filename();
    EXPECT_THAT(Dialctl("trials download resume 0 " + (dir_ / "got").string()),
                HasSubstr("downloaded checkpoint " + trial->checkpoint()));
    EXPECT_EQ(ReadText(dir_ / "got" / step / "MANIFEST"),
              ReadText(dir_ / "ckpt" / trial->checkpoint() / "MANIFEST"));
    EXPECT_THAT(Dialctl("trials evaluate resume 0 --split=val --trainer=" +
                        std::string(DIAL_TRAIN_BIN)),
                HasSubstr("checkpoint " + trial->checkpoint()));
  }
}

TEST_F(WorkerE2eTest, StoppingAStudyEndsItsRunningTrialAndFreesTheSlot) {
  StartWorker("wa");
  auto endless = ParseStudySpec(R"(
name: endless
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.01}}]
budget: {max_trials: 1}
trial: {trainer: {dataset: synthetic, steps: 100000000, eval_every: 100}})");
  ASSERT_TRUE(endless.ok()) << endless.status();
  ASSERT_TRUE(client_->CreateStudy(*endless).ok());
  // Stop the study as soon as the trial reports; the watch then ends.
  WaitForEnd("endless", [&](const v1::StudyEvent& e) {
    if (e.trial().last_step() >= 100) {
      EXPECT_TRUE(client_->StopStudy("endless").ok());
    }
  });
  // The single slot must come free for a second study to finish.
  auto quick =
      LoadStudySpecFile(DIAL_SOURCE_DIR "/examples/synthetic-random.yaml");
  ASSERT_TRUE(quick.ok());
  quick->mutable_budget()->set_max_trials(1);
  quick->mutable_budget()->set_max_parallel_trials(1);
  ASSERT_TRUE(client_->CreateStudy(*quick).ok());
  WaitForEnd("synthetic");
  EXPECT_EQ(client_->GetTrial("synthetic", 0)->state(), v1::COMPLETED);
  auto stopped = client_->GetTrial("endless", 0);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), v1::STOPPED);
  EXPECT_LT(stopped->last_step(), 100000000);
}

TEST_F(WorkerE2eTest, AshaStopsWeakTrialsEarlyAndLetsGoodOnesFinish) {
  StartWorker("wa");
  StartWorker("wb");
  // Learning rates from hopeless to good: the cut-offs must bite.
  auto spec = ParseStudySpec(R"(
name: asha
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 1.0e-7, max: 0.05, scale: LOG}}]
searcher: {random: {seed: 8}}
scheduler: {asha: {min_steps: 50, max_steps: 450, reduction_factor: 3}}
budget: {max_trials: 9, max_parallel_trials: 2}
trial: {trainer: {dataset: synthetic, steps: 450, eval_every: 50, batch_size: 32}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("asha");
  auto trials = client_->ListAllTrials("asha", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 9u);
  int stopped = 0, finished = 0;
  for (const auto& t : *trials) {
    if (t.state() == v1::STOPPED) {
      ++stopped;
      EXPECT_LT(t.last_step(), 450);
      // Stopped at a rung: 50 or 150.
      EXPECT_TRUE(t.last_step() == 50 || t.last_step() == 150) << t.last_step();
    } else {
      EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
      EXPECT_EQ(t.last_step(), 450);
      ++finished;
    }
  }
  EXPECT_GE(stopped, 1);
  EXPECT_GE(finished, 1);
  // The best trial is one that ran the whole way.
  auto best = client_->GetBestTrials("asha", 1);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->at(0).last_step(), 450);
}

TEST_P(CheckpointModesTest, PbtExploitsCopyBetterWeightsAndRecordLineage) {
  StartWorker("wa", 2);
  StartWorker("wb", 2);
  // Some members start with hopeless learning rates.
  auto spec = ParseStudySpec(R"(
name: pbt
objective: {metric: val_loss, goal: MINIMIZE}
search_space: [{name: lr, discrete: {values: [1.0e-7, 1.0e-6, 0.003, 0.01]}}]
searcher: {grid: {}}
scheduler: {pbt: {perturbation_interval: 100, quantile: 0.25, seed: 2}}
budget: {max_trials: 4, max_parallel_trials: 4}
trial: {trainer: {dataset: synthetic, steps: 800, eval_every: 50, batch_size: 32}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("pbt");
  auto trials = client_->ListAllTrials("pbt", {});
  ASSERT_TRUE(trials.ok());
  int exploits = 0, checked = 0;
  for (const auto& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
    auto full = client_->GetTrial("pbt", t.number());
    ASSERT_TRUE(full.ok());
    for (const auto& e : full->lineage()) {
      ++exploits;
      EXPECT_DOUBLE_EQ(full->params().count("lr") ? 1 : 0, 1);
      // Its next report continues from the source's weights: its loss
      // lands near the source's level at the copied step, not near its own.
      auto source = client_->GetTrial("pbt", e.source_trial());
      ASSERT_TRUE(source.ok());
      double own = NAN, next = NAN, donor = NAN;
      for (const auto& p : full->metric_history()) {
        if (p.step() == e.step()) own = p.metrics().at("val_loss");
        if (p.step() > e.step() && std::isnan(next))
          next = p.metrics().at("val_loss");
      }
      for (const auto& p : source->metric_history()) {
        if (p.step() == e.source_step()) donor = p.metrics().at("val_loss");
      }
      if (std::isnan(next)) continue;  // exploited at its last report
      ASSERT_FALSE(std::isnan(own) || std::isnan(donor));
      // A hopeless member (its loss still near ln 4 = 1.39) that copies a
      // learning one must land near the donor, far from where it was.
      if (std::abs(own - donor) < 0.3) continue;
      ++checked;
      EXPECT_LT(std::abs(next - donor), 0.5 * std::abs(own - donor))
          << "trial " << t.number() << " step " << e.step();
      const fs::path copy = fs::path("pbt") / std::to_string(t.number()) /
                            ("from-" + std::to_string(e.source_trial()) + "-" +
                             std::to_string(e.source_step())) /
                            "MANIFEST";
      EXPECT_TRUE(Transfer() ? fs::exists(Cache("wa") / copy) ||
                                   fs::exists(Cache("wb") / copy)
                             : fs::exists(dir_ / "ckpt" / copy));
    }
  }
  EXPECT_GE(exploits, 1);
  EXPECT_GE(checked, 1);
  EXPECT_THAT(Dialctl("trials lineage pbt 0"), HasSubstr("STEPS"));
}

TEST_P(CheckpointModesTest,
       AshaPromotionPausesTrialsAndResumesTheBestFromCheckpoints) {
  StartWorker("wa");
  StartWorker("wb");
  auto spec = ParseStudySpec(R"(
name: promo
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 1.0e-6, max: 0.01, scale: LOG}}]
searcher: {random: {seed: 4}}
scheduler: {asha: {min_steps: 50, max_steps: 450, reduction_factor: 3, promotion: true}}
budget: {max_trials: 9, max_parallel_trials: 2}
trial: {trainer: {dataset: synthetic, steps: 450, eval_every: 50, batch_size: 32}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("promo");
  auto trials = client_->ListAllTrials("promo", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 9u);
  int resumed = 0, completed = 0;
  for (const auto& t : *trials) {
    // Everything ends: promoted to the end, or stopped at a rung.
    EXPECT_TRUE(t.state() == v1::COMPLETED || t.state() == v1::STOPPED)
        << v1::TrialState_Name(t.state()) << ": " << t.error();
    if (t.state() == v1::COMPLETED) {
      ++completed;
      EXPECT_EQ(t.last_step(), 450);
    } else {
      EXPECT_TRUE(t.last_step() == 50 || t.last_step() == 150) << t.last_step();
    }
    if (t.attempt() < 2) continue;
    ++resumed;
    // The second attempt started from the checkpoint at the first rung.
    auto full = client_->GetTrial("promo", t.number());
    ASSERT_TRUE(full.ok());
    for (int i = 0; i < full->metric_history_size(); ++i) {
      EXPECT_EQ(full->metric_history(i).step(), 50 * (i + 1));
    }
    bool found = false;
    for (const char* host : {"wa", "wb"}) {
      std::ifstream log(dir_ / host /
                        ("promo-" + std::to_string(t.number()) + "-a2.err"));
      std::stringstream text;
      text << log.rdbuf();
      found |= text.str().find("resuming from checkpoint promo/" +
                               std::to_string(t.number()) + "/50 at step 50") !=
               std::string::npos;
    }
    EXPECT_TRUE(found) << "trial " << t.number();
  }
  EXPECT_GE(resumed, 1);
  EXPECT_GE(completed, 1);
}

TEST_F(WorkerE2eTest, WorkerShutdownCheckpointsAndRequeuesItsTrial) {
  testing::Subprocess& first = StartWorker("wa");
  auto spec = ParseStudySpec(R"(
name: drain
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.01}}]
budget: {max_trials: 1}
trial: {trainer: {dataset: synthetic, steps: 100000000, eval_every: 100}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  // Once it has reported, SIGTERM the worker: the trial must checkpoint,
  // the worker exit within its grace period and the trial go back to the
  // queue (the trial process gets the signal despite the worker's mask).
  std::promise<void> reported;
  auto watch = std::async(std::launch::async, [&] {
    bool once = false;
    (void)client_->WatchStudy("drain", [&](const v1::StudyEvent& e) {
      if (!once && e.trial().last_step() >= 100) {
        once = true;
        reported.set_value();
        return false;
      }
      return true;
    });
  });
  ASSERT_EQ(reported.get_future().wait_for(std::chrono::seconds(60)),
            std::future_status::ready);
  watch.wait();
  const int status = first.Kill(SIGTERM);  // waits for the worker to exit
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto trial = client_->GetTrial("drain", 0);
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->state(), v1::PENDING);
  EXPECT_FALSE(trial->checkpoint().empty());
  EXPECT_EQ(trial->failures(), 0);
}

}  // namespace
}  // namespace dial
