// A restarted core rebuilds its trial scheduler from the stored reports
// exactly: after a restart, ASHA decides every further report as an ASHA
// that saw the whole run without interruption.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "storage/memory_study_store.h"
#include "storage/sqlite_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

namespace fs = std::filesystem;

class ReplayTest : public DbDirTest {};

// One trial's reports: strictly rising steps that often jump over a rung
// (so one report reaches two rungs at once), some without the objective.
struct Script {
  int64_t step = 0;
  bool done = false;
};

// Runs a study on `store`, restarts the core and goes on, checking every
// decision against an ASHA that saw every report without a restart.
void RunAndRestart(storage::StudyStore* store) {
  auto spec = ParseStudySpec(
      "name: s\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "scheduler: {asha: {min_steps: 1, max_steps: 27, reduction_factor: 3}}\n"
      "budget: {max_trials: 80, max_parallel_trials: 80}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  // The uninterrupted run: an ASHA that sees every report the core decided.
  auto reference = searchers::CreateTrialScheduler(*spec);
  ASSERT_TRUE(reference.ok());
  std::mt19937 rng(7);
  std::map<int64_t, Script> running;
  int stops = 0, jumps = 0, without_objective = 0;
  // Reports for random running trials; each core decision must be the
  // reference's.
  auto run = [&](SchedulerCore& core, int reports) {
    for (int i = 0; i < reports && !running.empty(); ++i) {
      auto it = running.begin();
      std::advance(it, rng() % running.size());
      const int64_t number = it->first;
      Script& s = it->second;
      const int64_t before = s.step;
      s.step += 1 + rng() % 4;
      searchers::Metrics metrics;
      if (rng() % 4 == 0) {
        metrics["acc"] = 0.5;
        ++without_objective;
      } else {
        metrics["loss"] = (rng() % 1000) / 1000.0 + 1.0 / s.step;
      }
      jumps += (before < 1 && s.step >= 3) || (before < 3 && s.step >= 9);
      auto d = core.ReportIntermediate("s", number, s.step, metrics, "");
      ASSERT_TRUE(d.ok()) << d.status();
      v1::Trial trial;
      trial.set_number(number);
      const v1::Decision expected =
          (*reference)->OnReport(trial, s.step, metrics);
      ASSERT_EQ(d->action(), expected.action())
          << "trial " << number << " step " << s.step << ": " << d->reason()
          << " / " << expected.reason();
      if (d->action() == v1::Decision::STOP) {
        ++stops;
        running.erase(it);
      } else if (s.step >= 27) {
        searchers::Metrics final_metrics;
        final_metrics["loss"] = 0.5;
        ASSERT_TRUE(core.CompleteTrial("s", number, final_metrics, "").ok());
        running.erase(it);
      }
    }
  };
  auto open = [&](SchedulerCore& core, int trials) {
    auto s = core.SuggestTrials("s", trials, "");
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->trials.size(), size_t(trials));
    for (const auto& t : s->trials) running[t.number()] = Script();
  };

  SchedulerCoreOptions options;
  options.store = store;
  options.tick = absl::ZeroDuration();
  {
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    ASSERT_TRUE((*core)->CreateStudy(*spec).ok());
    open(**core, 40);
    run(**core, 250);
  }
  ASSERT_GT(stops, 10);
  ASSERT_GT(jumps, 10);
  ASSERT_GT(without_objective, 10);
  // Restarted: the trial scheduler is rebuilt from the file.
  auto core = SchedulerCore::Create(options);
  ASSERT_TRUE(core.ok()) << core.status();
  open(**core, 40);
  run(**core, 400);
  EXPECT_GT(stops, 40);
}

TEST_F(ReplayTest, AshaAfterARestartDecidesAsWithoutIt) {
  auto store = storage::SqliteStudyStore::Create({path_});
  ASSERT_TRUE(store.ok()) << store.status();
  RunAndRestart(store->get());
}

// The same with the StudyStore's default ForEachReport.
TEST_F(ReplayTest, AshaAfterARestartDecidesAsWithoutItOnAMemoryStore) {
  auto store = storage::MemoryStudyStore::Create();
  RunAndRestart(store.get());
}

}  // namespace
}  // namespace dial::scheduler
