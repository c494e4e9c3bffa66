// Chaos: an ASHA study and a PBT study (12 trials each, dial-train on
// synthetic data) on 3 workers while a driver SIGKILLs random workers and
// the scheduler and restarts them. Afterwards every trial has ended, every
// report a worker saw acknowledged is in the database exactly once, step
// histories only move forward, and no attempt ran on two workers.
//
// DIAL_CHAOS_SECONDS (default 30) bounds the killing; DIAL_CHAOS_TRIALS
// (default 12) is the trials per study; DIAL_CHAOS_SEED (default 1) fixes
// the victims and pauses. The long run, whose figures are in
// bench/README.md:
//   DIAL_CHAOS_SECONDS=600 DIAL_CHAOS_TRIALS=60 build/tests/chaos_test
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "common/spec.h"
#include "tests/e2e/subprocess.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DIAL_SKIP_WITHOUT_TRAINER();
    dir_ = fs::temp_directory_path() /
           ("dial-chaos-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    StartScheduler("127.0.0.1:0");
  }
  void TearDown() override {
    for (auto& w : workers_) w.Kill(SIGKILL);
    scheduler_.Kill(SIGKILL);
    if (!HasFailure()) fs::remove_all(dir_);
  }

  void StartScheduler(const std::string& listen) {
    ASSERT_TRUE(scheduler_.Start(
        {DIAL_SCHEDULER_BIN, "--db=" + (dir_ / "dial.db").string(),
         "--checkpoint-root=" + (dir_ / "ckpt").string(), "--listen=" + listen,
         "--worker-lease-ms=2000"},
        (dir_ / "scheduler.log").string()));
    auto address = scheduler_.WaitFor("dial-scheduler listening on ",
                                      std::chrono::seconds(60));
    ASSERT_TRUE(address.has_value());
    address_ = *address;
    auto client = client::DialClient::Create({address_, absl::Seconds(20)});
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
  }
  void StartWorker(int i) {
    const std::string host = "w" + std::to_string(i);
    ASSERT_TRUE(workers_[i].Start(
        {DIAL_WORKER_BIN, "--scheduler=" + address_, "--slots=1", "--cpus=1",
         "--host=" + host, "--trainer=" DIAL_TRAIN_BIN,
         "--work-dir=" + (dir_ / host).string(),
         "--checkpoint-root=" + (dir_ / "ckpt").string(),
         "--ack-log=" + (dir_ / "acks.log").string(), "--acquire-wait-ms=1000",
         "--grace-s=5"},
        (dir_ / (host + ".log")).string()));
  }
  bool Finished(const std::string& study) {
    auto s = client_->GetStudy(study);
    return s.ok() && s->state() != v1::STUDY_ACTIVE;
  }

  fs::path dir_;
  std::string address_;
  testing::Subprocess scheduler_;
  testing::Subprocess workers_[3];
  std::unique_ptr<client::DialClient> client_;
};

TEST_F(ChaosTest, KillsLoseAndDoubleNothing) {
  for (int i = 0; i < 3; ++i) StartWorker(i);
  const int per_study = EnvInt("DIAL_CHAOS_TRIALS", 12);
  const std::string budget =
      "budget: {max_trials: " + std::to_string(per_study) +
      ", max_parallel_trials: 2, max_failures_per_trial: 20}\n";
  const std::string trainer =
      "trial: {trainer: {dataset: synthetic, steps: 300, eval_every: 50, "
      "batch_size: 32, units: 32, synthetic_samples: 2048}}\n";
  auto asha = ParseStudySpec(R"(
name: chaos-asha
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 1.0e-4, max: 0.05, scale: LOG}}]
searcher: {random: {seed: 3}}
scheduler: {asha: {min_steps: 50, max_steps: 300, reduction_factor: 3}}
)" + budget + trainer);
  auto pbt = ParseStudySpec(R"(
name: chaos-pbt
objective: {metric: val_loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 1.0e-4, max: 0.05, scale: LOG}}]
searcher: {random: {seed: 4}}
scheduler: {pbt: {perturbation_interval: 100, quantile: 0.25, seed: 2}}
)" + budget + trainer);
  ASSERT_TRUE(asha.ok()) << asha.status();
  ASSERT_TRUE(pbt.ok()) << pbt.status();
  ASSERT_TRUE(client_->CreateStudy(*asha).ok());
  ASSERT_TRUE(client_->CreateStudy(*pbt).ok());

  const int seconds = EnvInt("DIAL_CHAOS_SECONDS", 30);
  std::mt19937 rng(EnvInt("DIAL_CHAOS_SEED", 1));
  int worker_kills = 0, scheduler_kills = 0;
  double recover_max_ms = 0, recover_sum_ms = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end &&
         !(Finished("chaos-asha") && Finished("chaos-pbt"))) {
    // Chaos pacing, not synchronisation: a random pause between kills.
    std::this_thread::sleep_for(std::chrono::milliseconds(
        std::uniform_int_distribution<>(700, 2500)(rng)));
    const int victim = std::uniform_int_distribution<>(0, 3)(rng);
    if (victim == 3) {
      scheduler_.Kill(SIGKILL);
      const auto t0 = Clock::now();
      StartScheduler(address_);
      // Recovered: the restarted scheduler answers a read.
      while (!client_->GetStudy("chaos-asha").ok()) {
        ASSERT_LT(Clock::now() - t0, std::chrono::seconds(60));
      }
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      recover_max_ms = std::max(recover_max_ms, ms);
      recover_sum_ms += ms;
      ++scheduler_kills;
    } else {
      workers_[victim].Kill(SIGKILL);
      StartWorker(victim);
      ++worker_kills;
    }
  }
  // Let the studies finish undisturbed.
  const auto deadline = Clock::now() + std::chrono::minutes(10);
  while (!(Finished("chaos-asha") && Finished("chaos-pbt"))) {
    ASSERT_LT(Clock::now(), deadline) << "studies did not finish; see " << dir_;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

  // What the workers saw acknowledged: (study, trial) -> steps, and
  // (study, trial, attempt) -> workers.
  std::map<std::pair<std::string, int64_t>, std::set<int64_t>> acked;
  std::map<std::tuple<std::string, int64_t, int>, std::set<std::string>> ran_on;
  std::ifstream acks(dir_ / "acks.log");
  std::string worker, study;
  int64_t trial, step;
  int attempt, ack_lines = 0;
  while (acks >> worker >> study >> trial >> attempt >> step) {
    acked[{study, trial}].insert(step);
    ran_on[{study, trial, attempt}].insert(worker);
    ++ack_lines;
  }
  ASSERT_GT(ack_lines, 0);
  int lost = 0, duplicated = 0, backwards = 0, shared = 0, completed = 0;
  for (const char* name : {"chaos-asha", "chaos-pbt"}) {
    auto trials = client_->ListAllTrials(name, {});
    ASSERT_TRUE(trials.ok());
    EXPECT_EQ(trials->size(), static_cast<size_t>(per_study));
    for (const auto& t : *trials) {
      EXPECT_TRUE(t.state() == v1::COMPLETED || t.state() == v1::STOPPED)
          << name << " trial " << t.number() << ": "
          << v1::TrialState_Name(t.state()) << " " << t.error();
      completed += t.state() == v1::COMPLETED;
      auto full = client_->GetTrial(name, t.number());
      ASSERT_TRUE(full.ok());
      std::set<int64_t> stored;
      int64_t previous = 0;
      for (const auto& point : full->metric_history()) {
        if (!stored.insert(point.step()).second) ++duplicated;
        if (point.step() <= previous) ++backwards;
        previous = point.step();
      }
      for (int64_t s : acked[{name, t.number()}]) lost += !stored.count(s);
    }
  }
  for (const auto& [key, workers] : ran_on) shared += workers.size() > 1;
  std::printf(
      "chaos: %d s, %d worker kills, %d scheduler kills survived; %d of %d "
      "trials completed (the rest stopped by ASHA); %d acknowledged reports "
      "checked, %d lost, %d duplicated, %d out of order; %d attempts on two "
      "workers; scheduler recovery mean %.0f ms, max %.0f ms\n",
      seconds, worker_kills, scheduler_kills, completed, 2 * per_study,
      ack_lines, lost, duplicated, backwards, shared,
      scheduler_kills ? recover_sum_ms / scheduler_kills : 0.0, recover_max_ms);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(backwards, 0);
  EXPECT_EQ(shared, 0);
  EXPECT_GT(worker_kills + scheduler_kills, 0);
}

}  // namespace
}  // namespace dial
