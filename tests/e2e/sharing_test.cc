// Sharing one scheduler, end to end with real workers (issue 34): labelled
// workers and study selectors (no trial runs on a worker that does not
// match; a study no worker matches waits and says why, in GetStudy and in
// dialctl), and an owner's max_slots quota from --quotas.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "auth/token_table.h"
#include "common/spec.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A study of `trials` command trials (slow_trial.py: `steps` reports
// 0.05 s apart) with `extra` spec lines.
v1::StudySpec SlowStudy(const std::string& name, int trials, int parallel,
                        int steps, const std::string& resources = "") {
  auto spec = ParseStudySpec(absl::StrCat(
      "name: ", name,
      "\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "budget: {max_trials: ",
      trials, ", max_parallel_trials: ", parallel,
      "}\n"
      "trial: {command: {argv: [/usr/bin/python3, " DIAL_SOURCE_DIR
      "/tests/e2e/slow_trial.py], env: {STEPS: \"",
      steps, "\"}}", resources.empty() ? "" : ", resources: " + resources,
      "}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST_F(WorkerE2eTest, TrialsRunOnlyOnWorkersTheirSelectorMatches) {
  StartWorker("eu1", 2, {"--label=zone=eu", "--label=tier=gold"});
  StartWorker("us1", 2, {"--label", "zone=us"});
  ASSERT_TRUE(
      client_
          ->CreateStudy(SlowStudy("in-eu", 6, 3, 5, "{selector: {zone: [eu]}}"))
          .ok());
  ASSERT_TRUE(client_
                  ->CreateStudy(SlowStudy("a100", 2, 1, 5,
                                          "{selector: {gpu.model: [A100]}}"))
                  .ok());
  // Both workers register with their labels and their host.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto w = client_->ListWorkers();
        return w.ok() && w->workers_size() == 2;
      },
      std::chrono::seconds(30)));
  auto workers = client_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const v1::Worker& w : workers->workers()) {
    EXPECT_EQ(w.resources().labels().at("host"), w.host());
    EXPECT_EQ(w.resources().labels().at("zone"),
              w.host() == "eu1" ? "eu" : "us");
  }
  WaitForEnd("in-eu");
  auto trials = client_->ListAllTrials("in-eu", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 6u);
  for (const v1::Trial& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
    EXPECT_THAT(t.worker_id(), StartsWith("eu1-")) << t.number();
  }
  // No worker has an A100: the study waits, and says so.
  auto a100 = client_->GetStudy("a100");
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(a100->trial_counts().count("RUNNING"), 0u);
  EXPECT_EQ(a100->waiting(), "waiting: no worker matches gpu.model in [A100]");
  const std::string shown = Dialctl("study get a100");
  EXPECT_THAT(shown,
              HasSubstr("waiting: no worker matches gpu.model in [A100]"));
  EXPECT_THAT(shown, HasSubstr("selector:    gpu.model in [A100]"));
  EXPECT_THAT(shown, HasSubstr("priority:    0"));
}

class QuotaE2eTest : public WorkerE2eTest {
 protected:
  std::vector<std::string> SchedulerFlags() const override {
    const fs::path quotas = dir_ / "quotas";
    std::ofstream(quotas) << "# every owner\ndefault max_slots=2\n";
    return {"--quotas=" + quotas.string()};
  }
};

TEST_F(QuotaE2eTest, MaxSlotsHoldsAndUsageAndPrioritiesOutliveARestart) {
  StartWorker("big", 4);
  ASSERT_TRUE(client_->CreateStudy(SlowStudy("q", 8, 4, 10)).ok());
  std::set<int64_t> running;
  size_t most = 0;
  bool said_why = false;
  WaitForEnd("q", [&](const v1::StudyEvent& e) {
    if (!e.has_trial()) return;
    if (e.trial().state() == v1::RUNNING) {
      running.insert(e.trial().number());
    } else {
      running.erase(e.trial().number());
    }
    most = std::max(most, running.size());
    if (running.size() == 2 && !said_why) {
      auto q = client_->GetStudy("q");
      said_why = q.ok() && q->waiting() ==
                               "waiting: its owner runs 2 trials, its quota's "
                               "max_slots";
    }
  });
  EXPECT_EQ(most, 2u);
  auto trials = client_->ListAllTrials("q", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 8u);
  for (const v1::Trial& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
  }
  // While two ran, with PENDING trials and free slots, GetStudy said why.
  EXPECT_TRUE(said_why);

  // Each attempt left a usage record; they, the quota and the studies'
  // priorities outlive a restart of the scheduler.
  auto usage = client_->GetUsage("owner", absl::InfinitePast());
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_EQ(usage->totals_size(), 1);
  EXPECT_EQ(usage->totals(0).attempts(), 8);
  EXPECT_GT(usage->totals(0).slot_seconds(), 0);
  ASSERT_TRUE(client_->CreateStudy(SlowStudy("later", 1, 1, 1)).ok());
  ASSERT_TRUE(client_->UpdateStudy("later", 0, 0, -7).ok());
  ASSERT_NO_FATAL_FAILURE(RestartScheduler());
  auto again = client_->GetUsage("owner", absl::InfinitePast());
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->totals_size(), 1);
  EXPECT_EQ(again->totals(0).attempts(), 8);
  EXPECT_DOUBLE_EQ(again->totals(0).slot_seconds(),
                   usage->totals(0).slot_seconds());
  EXPECT_EQ(client_->GetStudy("later")->spec().priority(), -7);
  const std::string table = Dialctl("usage --by=study");
  EXPECT_THAT(table, HasSubstr("SLOT-HOURS"));
  EXPECT_THAT(table, HasSubstr("q "));
  EXPECT_THAT(Dialctl("usage --csv"), StartsWith("owner,slot_seconds,"));
  // The quota still holds after the restart: "later" runs once "q" is
  // done, and a new study of the same owner runs at most two at once.
  ASSERT_TRUE(client_->CreateStudy(SlowStudy("q2", 6, 4, 10)).ok());
  std::set<int64_t> running2;
  size_t most2 = 0;
  WaitForEnd("q2", [&](const v1::StudyEvent& e) {
    if (!e.has_trial()) return;
    if (e.trial().state() == v1::RUNNING) {
      running2.insert(e.trial().number());
    } else {
      running2.erase(e.trial().number());
    }
    most2 = std::max(most2, running2.size());
  });
  EXPECT_LE(most2, 2u);
}

class PreemptE2eTest : public WorkerE2eTest {
 protected:
  std::vector<std::string> SchedulerFlags() const override {
    return {"--preempt-grace-s=10", "--preempt-min-run-s=1"};
  }
  // A study of `trials` built-in trainer trials of `steps` steps that
  // checkpoint at every evaluation (200 steps).
  v1::StudySpec TrainerStudy(const std::string& name, int priority, int trials,
                             int steps) {
    auto spec = ParseStudySpec(absl::StrCat(
        "name: ", name, "\npriority: ", priority,
        "\nobjective: {metric: val_loss, goal: MINIMIZE}\n"
        "search_space: [{name: lr, float: {min: 0.001, max: 0.01}}]\n"
        "budget: {max_trials: ",
        trials, ", max_parallel_trials: ", trials,
        "}\n"
        "trial: {trainer: {dataset: synthetic, steps: ",
        steps, ", eval_every: 200, batch_size: 32}}\n"));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }
  int Running(const std::string& study) {
    auto s = client_->GetStudy(study);
    if (!s.ok()) return -1;
    auto it = s->trial_counts().find("RUNNING");
    return it == s->trial_counts().end() ? 0 : it->second;
  }
};

// Priority-0 trials fill both slots; a priority-10 study arrives. Its
// trials start within the grace plus a long poll, the preempted trials
// resume from their last checkpoint and complete, every step is stored
// once, and no preempted attempt counts as a failure.
TEST_F(PreemptE2eTest, AHigherPriorityStudyTakesTheSlotsAndTheOthersResume) {
  StartWorker("w", 2);
  ASSERT_TRUE(client_->CreateStudy(TrainerStudy("low", 0, 2, 8000)).ok());
  // Both low trials run and have checkpointed.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto trials = client_->ListAllTrials("low", {v1::RUNNING});
        if (!trials.ok() || trials->size() != 2) return false;
        for (const v1::Trial& t : *trials) {
          if (t.checkpoint_step() < 400) return false;
        }
        return true;
      },
      std::chrono::seconds(60)));
  const auto arrived = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->CreateStudy(TrainerStudy("high", 10, 2, 2000)).ok());
  ASSERT_TRUE(WaitUntil([&] { return Running("high") == 2; },
                        std::chrono::seconds(30)));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived)
          .count();
  // --preempt-grace-s plus one long poll (--acquire-wait-ms=1000), plus
  // the second a need waits before it preempts.
  EXPECT_LT(waited, 10 + 1 + 1) << "high's trials waited " << waited << " s";
  std::printf("high's two trials running %.2f s after it was created\n",
              waited);
  EXPECT_EQ(Running("low"), 0);
  WaitForEnd("high");
  WaitForEnd("low");
  auto trials = client_->ListAllTrials("low", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 2u);
  for (const v1::Trial& listed : *trials) {
    auto t = client_->GetTrial("low", listed.number());
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->state(), v1::COMPLETED) << t->error();
    EXPECT_EQ(t->failures(), 0);
    ASSERT_GE(t->preemptions_size(), 1) << t->number();
    EXPECT_EQ(t->preemptions(0).by_study(), "high");
    EXPECT_GE(t->preemptions(0).resume_step(), 400);
    EXPECT_FALSE(t->preemptions(0).forced());
    EXPECT_EQ(t->attempt(), t->preemptions_size() + 1);
    // Each evaluation step once, in order, across the attempts.
    ASSERT_EQ(t->metric_history_size(), 40);
    for (int i = 0; i < 40; ++i) {
      EXPECT_EQ(t->metric_history(i).step(), 200 * (i + 1));
    }
  }
  // The resumed attempts restored the preempted ones' checkpoints.
  EXPECT_THAT(ReadText(dir_ / "w.log"), HasSubstr(" from checkpoint low/"));
}

// Two owners with equal weights (authenticated principals).
class FairShareE2eTest : public WorkerE2eTest {
 protected:
  std::vector<std::string> SchedulerFlags() const override {
    const fs::path tokens = dir_ / "tokens";
    std::ofstream(tokens) << "admin root " << auth::Sha256Hex("root-token")
                          << "\nuser ann " << auth::Sha256Hex("ann-token")
                          << "\nuser bo " << auth::Sha256Hex("bo-token")
                          << "\nworker fleet " << auth::Sha256Hex("fleet-token")
                          << "\n";
    return {"--auth-tokens=" + tokens.string()};
  }
};

// Owner ann fills all ten slots first; owner bo's study arrives later.
// Freed slots go to bo until both hold half (50 % +- 10 %: 4 to 6 of 10),
// within a minute, and it stays so.
TEST_F(FairShareE2eTest, TwoEqualOwnersEndUpWithHalfTheSlotsEach) {
  client_ = As("root-token");  // the fixture's watch and reads
  const fs::path worker_token = dir_ / "fleet.token";
  std::ofstream(worker_token) << "fleet-token\n";
  ::chmod(worker_token.c_str(), 0600);
  StartWorker("w", 10, {"--token-file=" + worker_token.string()});
  auto ann = As("ann-token");
  auto bo = As("bo-token");
  ASSERT_TRUE(ann->CreateStudy(SlowStudy("a", 400, 10, 40)).ok());
  auto running = [&](const std::string& study) {
    auto t = client_->ListAllTrials(study, {v1::RUNNING});
    return t.ok() ? static_cast<int>(t->size()) : -1;
  };
  ASSERT_TRUE(
      WaitUntil([&] { return running("a") == 10; }, std::chrono::seconds(60)));
  const auto arrived = std::chrono::steady_clock::now();
  ASSERT_TRUE(bo->CreateStudy(SlowStudy("b", 400, 10, 40)).ok());
  auto balanced = [&] {
    const int a = running("a"), b = running("b");
    return a >= 4 && a <= 6 && b >= 4 && b <= 6;
  };
  ASSERT_TRUE(WaitUntil(balanced, std::chrono::seconds(60)))
      << "a runs " << running("a") << ", b " << running("b");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived)
          .count();
  std::printf("two owners at 50 %% +- 10 %% %.2f s after the second arrived\n",
              took);
  // It holds: over the next 10 s each owner's trials fill 50 % +- 10 % of
  // the slot-seconds both fill, counted from the trials' start and end
  // times. (Counting RUNNING trials at instants instead failed under load:
  // between a trial's end and its slot's next start the slot belongs to
  // neither, and with 2 s trials two such gaps on one side at once put a
  // sample outside the band one time in five.)
  const auto from = std::chrono::system_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(10));
  const auto to = std::chrono::system_clock::now();
  auto seconds_within = [&](const std::string& study) {
    auto trials = client_->ListAllTrials(study, {});
    EXPECT_TRUE(trials.ok()) << trials.status();
    if (!trials.ok()) return 0.0;
    auto at = [](const google::protobuf::Timestamp& t) {
      return std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(t.seconds()) +
              std::chrono::nanoseconds(t.nanos())));
    };
    double total = 0;
    int counted = 0;
    for (const v1::Trial& t : *trials) {
      if (!t.has_start_time()) continue;
      const auto start = std::max(at(t.start_time()), from);
      const auto end = t.has_end_time() ? std::min(at(t.end_time()), to) : to;
      if (end > start) {
        total += std::chrono::duration<double>(end - start).count();
        ++counted;
      }
    }
    std::printf("%s: %d trials in the window\n", study.c_str(), counted);
    return total;
  };
  const double a = seconds_within("a"), b = seconds_within("b");
  std::printf("slot-seconds over 10 s: a %.1f, b %.1f\n", a, b);
  ASSERT_GT(a + b, 0);
  EXPECT_GE(a / (a + b), 0.4) << a << " against " << b;
  EXPECT_LE(a / (a + b), 0.6) << a << " against " << b;
  ASSERT_TRUE(client_->StopStudy("a").ok());
  ASSERT_TRUE(client_->StopStudy("b").ok());
}

}  // namespace
}  // namespace dial
