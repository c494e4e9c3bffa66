// SchedulerCore without gRPC: lifecycle, budgets, ask/tell rules, restart.
#include "scheduler/core.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <future>

#include "absl/synchronization/notification.h"
#include "common/params.h"
#include "common/spec.h"
#include "searchers/searcher.h"
#include "storage/memory_study_store.h"
#include "storage/sqlite_study_store.h"
#include "storage/testing/temp_dir.h"

namespace dial::scheduler {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

v1::StudySpec Spec(const std::string& extra = "",
                   const std::string& name = "s") {
  auto spec =
      ParseStudySpec("name: " + name +
                     "\nobjective: {metric: loss, goal: MINIMIZE}\n"
                     "search_space:\n"
                     "  - {name: x, float: {min: -5, max: 5}}\n"
                     "  - {name: opt, categorical: {values: [sgd, adam]}}\n" +
                     extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

searchers::Metrics M(double loss) {
  searchers::Metrics m;
  m["loss"] = loss;
  return m;
}

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = storage::MemoryStudyStore::Create();
    auto core = SchedulerCore::Create({store_.get(), &clock_});
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  FakeClock clock_;
  std::unique_ptr<storage::StudyStore> store_;
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(CoreTest, CreateStudyValidatesAndFillsDefaults) {
  auto bad = core_->CreateStudy(Spec("budget: {max_trials: 0}"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("budget.max_trials"));

  auto study = core_->CreateStudy(Spec("budget: {max_trials: 4}"));
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_EQ(study->state(), v1::STUDY_ACTIVE);
  EXPECT_TRUE(study->spec().searcher().has_random());
  EXPECT_NE(study->spec().searcher().random().seed(), 0u);
  EXPECT_EQ(study->spec().budget().max_parallel_trials(), 4);

  EXPECT_EQ(core_->CreateStudy(Spec("budget: {max_trials: 4}")).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto bad_rungs = core_->CreateStudy(
      Spec("budget: {max_trials: 4}\nscheduler: {hyperband: {min_steps: 5, "
           "max_steps: 3, reduction_factor: 3}}",
           "b"));
  EXPECT_EQ(bad_rungs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->GetStudy("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetStudy("nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoreTest, ClientIdReturnsOpenTrialsInsteadOfNewOnes) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 10}")).ok());
  auto a = core_->SuggestTrials("s", 2, "client-a");
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->trials.size(), 2u);
  EXPECT_EQ(a->trials[0].state(), v1::RUNNING);
  EXPECT_EQ(a->trials[0].client_id(), "client-a");
  auto again = core_->SuggestTrials("s", 3, "client-a");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->trials.size(), 2u);
  EXPECT_EQ(again->trials[0].number(), a->trials[0].number());
  EXPECT_EQ(again->trials[1].number(), a->trials[1].number());
  auto b = core_->SuggestTrials("s", 1, "client-b");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->trials.size(), 1u);
  EXPECT_EQ(b->trials[0].number(), 2);
  // Once client-a finishes its trials it gets new ones.
  for (const auto& t : a->trials) {
    ASSERT_TRUE(core_->CompleteTrial("s", t.number(), M(1.0), "").ok());
  }
  auto next = core_->SuggestTrials("s", 1, "client-a");
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->trials.size(), 1u);
  EXPECT_EQ(next->trials[0].number(), 3);
}

TEST_F(CoreTest, BudgetsAreRespectedAndTheStudyCompletes) {
  ASSERT_TRUE(
      core_
          ->CreateStudy(Spec("budget: {max_trials: 5, max_parallel_trials: 2}"))
          .ok());
  auto first = core_->SuggestTrials("s", 5, "");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->trials.size(), 2u);  // parallelism limit
  auto blocked = core_->SuggestTrials("s", 1, "");
  ASSERT_TRUE(blocked.ok());
  EXPECT_TRUE(blocked->trials.empty());
  EXPECT_FALSE(blocked->done);

  int completed = 0;
  std::vector<v1::Trial> open = first->trials;
  while (!open.empty()) {
    v1::Trial t = open.back();
    open.pop_back();
    ASSERT_TRUE(core_->CompleteTrial("s", t.number(), M(t.number()), "").ok());
    ++completed;
    auto more = core_->SuggestTrials("s", 1, "");
    ASSERT_TRUE(more.ok());
    for (auto& m : more->trials) open.push_back(m);
  }
  EXPECT_EQ(completed, 5);
  auto study = core_->GetStudy("s");
  ASSERT_TRUE(study.ok());
  EXPECT_EQ(study->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(study->trial_counts().at("COMPLETED"), 5);
  auto done = core_->SuggestTrials("s", 1, "");
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->done);
  EXPECT_TRUE(done->trials.empty());
}

TEST_F(CoreTest, ReportsAreCheckedAndRecorded) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 3}")).ok());
  auto s = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(s.ok());
  const int64_t n = s->trials[0].number();
  auto d = core_->ReportIntermediate("s", n, 10, M(3.0),
                                     absl::StrCat("s/", n, "/ckpt-10"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->action(), v1::Decision::CONTINUE);
  ASSERT_TRUE(core_->ReportIntermediate("s", n, 20, M(2.0), "").ok());

  // A step on record is not recorded again: it gets its decision again
  // (issue 33: one rule for ReportIntermediate and ReportProgress).
  auto repeated = core_->ReportIntermediate("s", n, 20, M(1.0), "");
  ASSERT_TRUE(repeated.ok()) << repeated.status();
  EXPECT_EQ(repeated->action(), v1::Decision::CONTINUE);
  auto older = core_->ReportIntermediate("s", n, 10, M(1.0), "");
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->reason(), "step already recorded");
  EXPECT_EQ(core_->ReportIntermediate("s", n, 30, {}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ReportIntermediate("s", n, -1, M(1), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ReportIntermediate("s", 99, 30, M(1), "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->ReportIntermediate("zz", n, 30, M(1), "").status().code(),
            absl::StatusCode::kNotFound);

  auto trial = core_->GetTrial("s", n);
  ASSERT_TRUE(trial.ok());
  ASSERT_EQ(trial->metric_history_size(), 2);
  EXPECT_EQ(trial->metric_history(0).step(), 10);
  EXPECT_DOUBLE_EQ(trial->metric_history(1).metrics().at("loss"), 2.0);
  EXPECT_EQ(trial->last_step(), 20);
  EXPECT_EQ(trial->checkpoint(), absl::StrCat("s/", n, "/ckpt-10"));

  auto missing = core_->CompleteTrial("s", n, {}, "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("'loss'"));
  auto nan = core_->CompleteTrial("s", n, M(NAN), "");
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  auto completed = core_->CompleteTrial("s", n, M(1.5), "");
  ASSERT_TRUE(completed.ok());
  // The same completion again (its answer was lost) gets the stored
  // result; other values are refused.
  auto again = core_->CompleteTrial("s", n, M(1.5), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->state(), v1::COMPLETED);
  EXPECT_EQ(again->end_time().seconds(), completed->end_time().seconds());
  EXPECT_EQ(again->end_time().nanos(), completed->end_time().nanos());
  auto twice = core_->CompleteTrial("s", n, M(1.0), "");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  auto late = core_->ReportIntermediate("s", n, 40, M(1.0), "");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("COMPLETED"));
}

TEST_F(CoreTest, FailedTrialsKeepTheirError) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 3}")).ok());
  auto s = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(s.ok());
  auto t = core_->CompleteTrial("s", 0, {}, "CUDA out of memory");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state(), v1::FAILED);
  EXPECT_EQ(core_->GetTrial("s", 0)->error(), "CUDA out of memory");
  EXPECT_TRUE(core_->GetBestTrials("s", 5)->empty());
}

TEST_F(CoreTest, BestTrialsFollowTheGoal) {
  for (const char* goal : {"MINIMIZE", "MAXIMIZE"}) {
    auto spec = Spec("budget: {max_trials: 6}", goal);
    spec.mutable_objective()->set_goal(
        std::string(goal) == "MINIMIZE" ? v1::MINIMIZE : v1::MAXIMIZE);
    ASSERT_TRUE(core_->CreateStudy(spec).ok());
    auto s = core_->SuggestTrials(goal, 6, "");
    ASSERT_TRUE(s.ok());
    const double values[] = {3, 1, 4, 1.5, 9, 2};
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(core_->CompleteTrial(goal, i, M(values[i]), "").ok());
    }
    auto best = core_->GetBestTrials(goal, 3);
    ASSERT_TRUE(best.ok());
    ASSERT_EQ(best->size(), 3u);
    if (std::string(goal) == "MINIMIZE") {
      EXPECT_EQ((*best)[0].number(), 1);
      EXPECT_EQ((*best)[1].number(), 3);
      EXPECT_EQ((*best)[2].number(), 5);
    } else {
      EXPECT_EQ((*best)[0].number(), 4);
      EXPECT_EQ((*best)[1].number(), 2);
      EXPECT_EQ((*best)[2].number(), 0);
    }
  }
}

TEST_F(CoreTest, ListTrialsPagesAndFilters) {
  // 25 open at once: above the default parallelism (16).
  ASSERT_TRUE(core_
                  ->CreateStudy(
                      Spec("budget: {max_trials: 25, max_parallel_trials: 25}"))
                  .ok());
  ASSERT_EQ(core_->SuggestTrials("s", 25, "")->trials.size(), 25u);
  for (int i = 0; i < 25; i += 3) {
    ASSERT_TRUE(core_->CompleteTrial("s", i, M(i), "").ok());
  }
  std::vector<int64_t> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = core_->ListTrials("s", {}, 10, token);
    ASSERT_TRUE(page.ok());
    ++pages;
    for (const auto& t : page->trials) seen.push_back(t.number());
    token = page->next_page_token;
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 25u);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(seen[i], i);

  auto done = core_->ListTrials("s", {v1::COMPLETED}, 100, "");
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->trials.size(), 9u);
  EXPECT_TRUE(done->next_page_token.empty());
  EXPECT_EQ(core_->ListTrials("s", {}, 10, "garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ListTrials("s", {}, 5000, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoreTest, StopStudyStopsRunningTrialsAtTheirNextReport) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 10}")).ok());
  ASSERT_EQ(core_->SuggestTrials("s", 2, "c")->trials.size(), 2u);
  auto stopped = core_->StopStudy("s");
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->state(), v1::STUDY_STOPPED);
  auto d = core_->ReportIntermediate("s", 0, 1, M(1), "");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->action(), v1::Decision::STOP);
  EXPECT_EQ(core_->GetTrial("s", 0)->state(), v1::STOPPED);
  // A retry of that report (its answer lost) gets the same STOP, not an
  // error that the trial no longer runs.
  auto retried = core_->ReportIntermediate("s", 0, 1, M(1), "");
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->action(), v1::Decision::STOP);
  // The client may still hand in its final numbers; the trial stays STOPPED.
  auto t = core_->CompleteTrial("s", 0, M(0.5), "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->state(), v1::STOPPED);
  EXPECT_DOUBLE_EQ(core_->GetTrial("s", 0)->final_metrics().at("loss"), 0.5);
  auto s = core_->SuggestTrials("s", 1, "other");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->done);
  EXPECT_EQ(s->study_state, v1::STUDY_STOPPED);
}

TEST_F(CoreTest, UpdateStudyExtendsAFinishedStudy) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 1}")).ok());
  ASSERT_TRUE(core_->SuggestTrials("s", 1, "").ok());
  ASSERT_TRUE(core_->CompleteTrial("s", 0, M(1), "").ok());
  EXPECT_EQ(core_->GetStudy("s")->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(core_->UpdateStudy("s", 0, 0).status().code(),
            absl::StatusCode::kOk);
  auto lower = core_->UpdateStudy("s", 0 + 1, 0);
  ASSERT_TRUE(lower.ok());
  auto more = core_->UpdateStudy("s", 3, 0);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(core_->SuggestTrials("s", 5, "")->trials.size(), 1u);  // parallel 1
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 5}", "t")).ok());
  ASSERT_TRUE(core_->SuggestTrials("t", 3, "").ok());
  auto below = core_->UpdateStudy("t", 2, 0);
  EXPECT_EQ(below.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(below.status().message(), HasSubstr("3 trials already created"));
}

TEST_F(CoreTest, GridExhaustionCompletesTheStudyEarly) {
  auto spec = ParseStudySpec(R"(
name: g
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: c, categorical: {values: [a, b, c]}}]
searcher: {grid: {}}
budget: {max_trials: 10})");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(core_->CreateStudy(*spec).ok());
  auto s = core_->SuggestTrials("g", 10, "");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->trials.size(), 3u);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(core_->CompleteTrial("g", i, M(i), "").ok());
  EXPECT_EQ(core_->GetStudy("g")->state(), v1::STUDY_COMPLETED);
}

TEST_F(CoreTest, UpdateStudyRebuildsTheGridAndRejectsBreakingChanges) {
  auto spec = ParseStudySpec(R"(
name: g
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1, grid_points: 4}}]
searcher: {grid: {}}
budget: {max_trials: 2})");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(core_->CreateStudy(*spec).ok());
  auto s = core_->SuggestTrials("g", 2, "");
  ASSERT_EQ(s->trials.size(), 2u);
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(core_->CompleteTrial("g", i, M(i), "").ok());
  EXPECT_EQ(core_->GetStudy("g")->state(), v1::STUDY_COMPLETED);
  // Raising max_trials reaches the rest of the grid at once.
  ASSERT_TRUE(core_->UpdateStudy("g", 4, 4).ok());
  auto more = core_->SuggestTrials("g", 4, "");
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->trials.size(), 2u);

  auto exact = ParseStudySpec(R"(
name: e
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: c, categorical: {values: [a, b, c]}}]
searcher: {grid: {exhaustive: true}}
budget: {max_trials: 3})");
  ASSERT_TRUE(exact.ok());
  ASSERT_TRUE(core_->CreateStudy(*exact).ok());
  auto broken = core_->UpdateStudy("e", 5, 0);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->GetStudy("e")->spec().budget().max_trials(), 3);
}

TEST_F(CoreTest, WatchersSeeEveryChangeAndTheEnd) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 1}")).ok());
  std::vector<v1::StudyEvent> events;
  auto id =
      core_->Watch("s", [&](const v1::StudyEvent& e) { events.push_back(e); });
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), v1::StudyEvent::SNAPSHOT);
  ASSERT_TRUE(core_->SuggestTrials("s", 1, "").ok());
  ASSERT_TRUE(core_->ReportIntermediate("s", 0, 1, M(2), "").ok());
  ASSERT_TRUE(core_->CompleteTrial("s", 0, M(1), "").ok());
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[1].kind(), v1::StudyEvent::TRIAL_CREATED);
  EXPECT_EQ(events[2].kind(), v1::StudyEvent::TRIAL_REPORTED);
  EXPECT_EQ(events[3].kind(), v1::StudyEvent::TRIAL_FINISHED);
  EXPECT_EQ(events[3].best_trial().number(), 0);
  EXPECT_EQ(events[4].kind(), v1::StudyEvent::STUDY_FINISHED);
  EXPECT_EQ(events[4].study().state(), v1::STUDY_COMPLETED);
  core_->Unwatch(*id);
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 1}", "t")).ok());
  EXPECT_EQ(events.size(), 5u);

  // A watcher of a study that is over gets the snapshot and the end.
  std::vector<v1::StudyEvent> late;
  auto late_id =
      core_->Watch("s", [&](const v1::StudyEvent& e) { late.push_back(e); });
  ASSERT_TRUE(late_id.ok());
  ASSERT_EQ(late.size(), 2u);
  EXPECT_EQ(late[0].kind(), v1::StudyEvent::SNAPSHOT);
  EXPECT_EQ(late[1].kind(), v1::StudyEvent::STUDY_FINISHED);
  core_->Unwatch(*late_id);
}

std::string Key(const searchers::Params& p) {
  std::map<std::string, std::string> sorted;
  for (const auto& [k, v] : p) sorted[k] = ParamValueToString(v);
  std::string key;
  for (const auto& [k, v] : sorted) key += k + "=" + v + ";";
  return key;
}

// A searcher whose suggestions wait until the test lets them go.
class BlockingSearcher : public searchers::Searcher {
 public:
  explicit BlockingSearcher(absl::Notification* release) : release_(release) {}
  using Searcher::Suggest;
  absl::StatusOr<searchers::Params> Suggest(
      int64_t number, const std::vector<searchers::Params>&) override {
    if (number > 0) release_->WaitForNotification();
    searchers::Params p;
    p["x"].set_double_value(0.1 * number);
    p["opt"].set_string_value("sgd");
    return p;
  }

 private:
  absl::Notification* release_;
};

TEST(CoreSuggestionThreadTest, ASlowSearcherNeverBlocksReports) {
  absl::Notification release;
  auto store = storage::MemoryStudyStore::Create();
  SchedulerCoreOptions options;
  options.store = store.get();
  options.searcher_factory = [&](const v1::StudySpec&) {
    return absl::StatusOr<std::unique_ptr<searchers::Searcher>>(
        std::make_unique<BlockingSearcher>(&release));
  };
  auto core = SchedulerCore::Create(options);
  ASSERT_TRUE(core.ok());
  // A kind that fits a model: its asks go to the suggestion pool.
  ASSERT_TRUE((*core)
                  ->CreateStudy(Spec("budget: {max_trials: 5}\n"
                                     "searcher: {bayesian: {}}"))
                  .ok());
  ASSERT_EQ((*core)->SuggestTrials("s", 1, "a")->trials.size(), 1u);
  // Trial 1's suggestion now hangs in the searcher...
  std::promise<absl::StatusOr<Suggestion>> slow;
  (*core)->SuggestTrialsAsync("s", 1, "b", [&](absl::StatusOr<Suggestion> r) {
    slow.set_value(std::move(r));
  });
  // ...while reports, completions and reads go on.
  auto others = std::async(std::launch::async, [&] {
    EXPECT_TRUE((*core)->ReportIntermediate("s", 0, 1, M(2), "").ok());
    EXPECT_TRUE((*core)->CompleteTrial("s", 0, M(1), "").ok());
    return (*core)->GetStudy("s");
  });
  ASSERT_EQ(others.wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  EXPECT_EQ(others.get()->trial_counts().at("COMPLETED"), 1);
  auto future = slow.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);
  release.Notify();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  auto result = future.get();
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(result->trials.size(), 1u);
  EXPECT_EQ(result->trials[0].number(), 1);
}

TEST(CoreRestartTest, ARestartedCoreResumesEveryStudy) {
  const storage::testing::ScopedTempDir dir("core-restart");  // outlives all
  const std::string db = dir.File("dial.db");
  FakeClock clock;
  std::vector<std::string> before;
  {
    auto store = storage::SqliteStudyStore::Create({db});
    ASSERT_TRUE(store.ok());
    auto core = SchedulerCore::Create({store->get(), &clock});
    ASSERT_TRUE(core.ok());
    ASSERT_TRUE((*core)
                    ->CreateStudy(Spec("budget: {max_trials: 8}\n"
                                       "searcher: {random: {seed: 99}}"))
                    .ok());
    auto s = (*core)->SuggestTrials("s", 4, "c");
    ASSERT_TRUE(s.ok());
    for (const auto& t : s->trials) before.push_back(Key(t.params()));
    for (int i = 0; i < 3; ++i) {
      clock.Advance(absl::Seconds(1));
      ASSERT_TRUE((*core)->ReportIntermediate("s", i, 1, M(10 + i), "").ok());
      ASSERT_TRUE((*core)->CompleteTrial("s", i, M(i), "").ok());
    }
    ASSERT_TRUE((*core)->ReportIntermediate("s", 3, 5, M(7), "").ok());
  }
  auto store = storage::SqliteStudyStore::Create({db});
  ASSERT_TRUE(store.ok());
  auto core = SchedulerCore::Create({store->get(), &clock});
  ASSERT_TRUE(core.ok()) << core.status();
  auto study = (*core)->GetStudy("s");
  ASSERT_TRUE(study.ok());
  EXPECT_EQ(study->trial_counts().at("COMPLETED"), 3);
  EXPECT_EQ(study->trial_counts().at("RUNNING"), 1);
  EXPECT_EQ((*core)->GetTrial("s", 3)->metric_history_size(), 1);
  EXPECT_EQ((*core)->GetBestTrials("s", 1)->at(0).number(), 0);
  // The open trial goes back to its client; the next new ones continue the
  // seeded sequence as if nothing happened.
  auto open = (*core)->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->trials.size(), 1u);
  EXPECT_EQ(open->trials[0].number(), 3);
  EXPECT_EQ(Key(open->trials[0].params()), before[3]);
  ASSERT_TRUE((*core)->CompleteTrial("s", 3, M(3), "").ok());
  auto next = (*core)->SuggestTrials("s", 4, "c");
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->trials.size(), 4u);
  auto reference = searchers::RandomSearcher::Create(study->spec());
  ASSERT_TRUE(reference.ok());
  for (const auto& t : next->trials) {
    EXPECT_EQ(Key(t.params()), Key(*(*reference)->Suggest(t.number())));
  }
  for (const auto& t : next->trials) {
    ASSERT_TRUE((*core)->CompleteTrial("s", t.number(), M(5), "").ok());
  }
  EXPECT_EQ((*core)->GetStudy("s")->state(), v1::STUDY_COMPLETED);
}

}  // namespace
}  // namespace dial::scheduler

namespace dial::scheduler {
namespace {

searchers::Metrics AB(double a, double b) {
  searchers::Metrics m;
  m["a"] = a;
  m["b"] = b;
  return m;
}

TEST_F(CoreTest, SeveralObjectivesGiveAParetoFrontWithItsHypervolume) {
  auto spec = ParseStudySpec(
      "name: mo\nobjectives: [{metric: a, goal: MINIMIZE}, {metric: b, "
      "goal: MAXIMIZE}]\nsearch_space: [{name: x, float: {min: 0, max: "
      "1}}]\nbudget: {max_trials: 5, max_parallel_trials: 5}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(core_->CreateStudy(*spec).ok());
  ASSERT_EQ(core_->SuggestTrials("mo", 5, "c")->trials.size(), 5u);
  // Every objective is required.
  auto missing = core_->CompleteTrial("mo", 4, M(1), "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("'a'"));
  const double values[][2] = {{1, 5}, {2, 8}, {3, 3}, {0.5, 1}};
  for (int i = 0; i < 4; ++i) {
    auto t = core_->CompleteTrial("mo", i, AB(values[i][0], values[i][1]), "");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(t->objective_values(),
                ::testing::ElementsAre(values[i][0], values[i][1]));
  }
  v1::GetBestTrialsResponse front;
  auto best = core_->GetBestTrials("mo", 10, auth::Anonymous(), &front);
  ASSERT_TRUE(best.ok()) << best.status();
  // Trial 2 is dominated by trial 1; the extremes (1: best b, 3: best a)
  // come first.
  std::vector<int64_t> numbers;
  for (const auto& t : *best) numbers.push_back(t.number());
  EXPECT_THAT(numbers, ::testing::ElementsAre(1, 3, 0));
  EXPECT_EQ(front.front_size(), 3);
  // Reference: the worst of each plus 10% of its range: a 3 + 0.25,
  // b 1 - 0.7. The front's area below it, by hand: 3.75 + 9 + 1.925.
  EXPECT_THAT(front.reference_point(),
              ::testing::ElementsAre(3.25, ::testing::DoubleNear(0.3, 1e-12)));
  EXPECT_NEAR(front.hypervolume(), 14.675, 1e-9);
  EXPECT_EQ(core_->GetBestTrials("mo", 1)->at(0).number(), 1);
}

TEST_F(CoreTest, AnInfeasibleTrialIsNeverTheBest) {
  ASSERT_TRUE(core_
                  ->CreateStudy(Spec("budget: {max_trials: 3}\n"
                                     "constraints: [{metric: mem, max: 1}]\n"))
                  .ok());
  ASSERT_EQ(core_->SuggestTrials("s", 3, "c")->trials.size(), 3u);
  searchers::Metrics m = M(0);
  m["mem"] = 5;  // the best loss, over the limit
  ASSERT_TRUE(core_->CompleteTrial("s", 0, m, "").ok());
  m = M(3);
  m["mem"] = 0.5;
  ASSERT_TRUE(core_->CompleteTrial("s", 1, m, "").ok());
  ASSERT_TRUE(core_->CompleteTrial("s", 2, M(1), "").ok());  // no mem
  auto best = core_->GetBestTrials("s", 3);
  ASSERT_TRUE(best.ok());
  ASSERT_EQ(best->size(), 1u);
  EXPECT_EQ(best->at(0).number(), 1);
}

}  // namespace
}  // namespace dial::scheduler

namespace dial::scheduler {
namespace {

v1::QueuedTrial Queued(double x, const std::string& opt) {
  v1::QueuedTrial q;
  (*q.mutable_params())["x"].set_double_value(x);
  (*q.mutable_params())["opt"].set_string_value(opt);
  return q;
}

TEST_F(CoreTest, EnqueuedConfigurationsRunFirstAndAreChecked) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 4}")).ok());
  v1::QueuedTrial bad = Queued(9, "sgd");  // x is in [-5, 5]
  auto refused = core_->EnqueueTrials("s", {bad});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("trials[0].params.x"));
  v1::QueuedTrial unknown = Queued(1, "sgd");
  (*unknown.mutable_params())["y"].set_double_value(1);
  EXPECT_THAT(core_->EnqueueTrials("s", {unknown}).status().message(),
              HasSubstr("trials[0].params.y: no such parameter"));
  int32_t waiting = 0;
  auto queued =
      core_->EnqueueTrials("s", {Queued(1.5, "adam"), Queued(-2, "sgd")},
                           auth::Anonymous(), &waiting);
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(waiting, 2);
  EXPECT_EQ(core_->GetStudy("s")->queue_size(), 2);
  auto s = core_->SuggestTrials("s", 3, "c");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->trials.size(), 3u);
  EXPECT_EQ(s->trials[0].params().at("x").double_value(), 1.5);
  EXPECT_EQ(s->trials[0].queue_id(), queued->at(0).id());
  EXPECT_EQ(s->trials[1].params().at("x").double_value(), -2);
  EXPECT_EQ(s->trials[2].queue_id(), 0);  // the searcher's own
  EXPECT_EQ(core_->GetStudy("s")->queue_size(), 0);
}

TEST(CoreRestartTest, QueueAndWarmStartSurviveARestart) {
  const storage::testing::ScopedTempDir dir("core-queue");
  const std::string db = dir.File("dial.db");
  FakeClock clock;
  std::vector<v1::Trial> source, own;
  v1::StudySpec stored;
  {
    auto store = storage::SqliteStudyStore::Create({db});
    ASSERT_TRUE(store.ok());
    auto core = SchedulerCore::Create({store->get(), &clock});
    ASSERT_TRUE(core.ok());
    // A source study with 12 completed trials, best near x = 2.
    ASSERT_TRUE((*core)
                    ->CreateStudy(Spec("budget: {max_trials: 12}\n"
                                       "searcher: {random: {seed: 4}}",
                                       "old"))
                    .ok());
    auto s = (*core)->SuggestTrials("old", 12, "c");
    ASSERT_TRUE(s.ok());
    for (const auto& t : s->trials) {
      const double x = t.params().at("x").double_value();
      auto done =
          (*core)->CompleteTrial("old", t.number(), M((x - 2) * (x - 2)), "");
      ASSERT_TRUE(done.ok());
      source.push_back(*done);
    }
    const double best_x =
        (*core)->GetBestTrials("old", 1)->at(0).params().at("x").double_value();
    auto warm = (*core)->CreateStudy(
        Spec("budget: {max_trials: 20}\nsearcher: {tpe: {seed: 5}}\n"
             "warm_start: {studies: [old], top_k: 2}",
             "new"));
    ASSERT_TRUE(warm.ok()) << warm.status();
    stored = warm->spec();
    EXPECT_EQ(warm->queue_size(), 2);
    EXPECT_EQ(warm->prior_trials_size(), 0);  // never in an answer
    auto first = (*core)->SuggestTrials("new", 3, "c");
    ASSERT_TRUE(first.ok());
    ASSERT_EQ(first->trials.size(), 3u);
    EXPECT_EQ(first->trials[0].params().at("x").double_value(), best_x);
    EXPECT_EQ(first->trials[1].queue_id(), 2);
    EXPECT_EQ(first->trials[2].queue_id(), 0);
    for (int i = 0; i < 3; ++i) {
      auto done = (*core)->CompleteTrial("new", i, M(i + 1), "");
      ASSERT_TRUE(done.ok());
      own.push_back(*done);
    }
    auto running = (*core)->SuggestTrials("new", 1, "c");
    ASSERT_TRUE(running.ok());
    own.push_back(running->trials[0]);
  }
  // What a searcher given the prior (best first) and the study's trials
  // suggests: the running core's trial 3, and the restarted core's 4. A
  // core that lost the prior would still be in TPE's random phase.
  auto expected = searchers::CreateSearcher(stored);
  ASSERT_TRUE(expected.ok());
  std::sort(source.begin(), source.end(), [](const auto& a, const auto& b) {
    return a.objective_value() < b.objective_value();
  });
  for (const auto& t : source) (*expected)->ObservePrior(t);
  for (int i = 0; i < 3; ++i) (*expected)->Observe(own[i]);
  EXPECT_EQ(searchers::ParamsKey(*(*expected)->Suggest(3)),
            searchers::ParamsKey(own[3].params()));
  auto store = storage::SqliteStudyStore::Create({db});
  ASSERT_TRUE(store.ok());
  auto core = SchedulerCore::Create({store->get(), &clock});
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_EQ((*core)->GetStudy("new")->queue_size(), 0);
  auto again = (*core)->SuggestTrials("new", 1, "c2");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->trials.size(), 1u);
  EXPECT_EQ(again->trials[0].number(), 4);
  EXPECT_EQ(searchers::ParamsKey(again->trials[0].params()),
            searchers::ParamsKey(*(*expected)->Suggest(4, {own[3].params()})));
}

TEST_F(CoreTest, WarmStartNeedsACompatibleSource) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 2}", "old")).ok());
  auto other = ParseStudySpec(
      "name: new\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, int: {min: 0, max: 3}}]\n"
      "budget: {max_trials: 2}\nwarm_start: {studies: [old]}\n");
  ASSERT_TRUE(other.ok());
  auto refused = core_->CreateStudy(*other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("warm_start.studies[0]: study 'old' gives parameter "
                        "'x' another kind"));
  other->mutable_warm_start()->set_studies(0, "missing");
  EXPECT_EQ(core_->CreateStudy(*other).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dial::scheduler
