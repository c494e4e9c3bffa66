// TrialLifecycle over the memory store and a fake clock: reports and their
// decisions, repeats of a step, finishing, the study's end, requeueing and
// fencing stale attempts. Every change is in the store before memory.
#include "scheduler/trial_lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/spec.h"
#include "scheduler/study_loader.h"
#include "searchers/searcher.h"
#include "searchers/trial_scheduler.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

class TrialLifecycleTest : public ::testing::Test {
 protected:
  // A study of `max_trials` with `extra` spec lines, loaded as the core
  // would.
  void Create(int max_trials, const std::string& extra = "") {
    auto spec = ParseStudySpec(
        "name: s\nobjective: {metric: loss, goal: MINIMIZE}\n"
        "search_space:\n  - {name: x, float: {min: 0, max: 1}}\n"
        "budget: {max_trials: " +
        std::to_string(max_trials) + "}\n" + extra);
    ASSERT_TRUE(spec.ok()) << spec.status();
    FillSpecDefaults(7, *spec);
    v1::Study study;
    study.set_name("s");
    *study.mutable_spec() = *spec;
    study.set_state(v1::STUDY_ACTIVE);
    ASSERT_TRUE(store_->CreateStudy(study).ok());
    auto entry = loader_.Load(study);
    ASSERT_TRUE(entry.ok()) << entry.status();
    entry_ = *entry;
  }
  // Trial `number`, RUNNING for an ask/tell client, saved.
  v1::Trial Start(int64_t number) {
    v1::Trial t;
    t.set_study("s");
    t.set_number(number);
    t.set_state(v1::RUNNING);
    t.set_last_step(-1);
    t.set_attempt(1);
    (*t.mutable_params())["x"].set_double_value(0.5);
    EXPECT_TRUE(lifecycle_.SaveTrial(*entry_, t).ok());
    return t;
  }
  v1::Trial Stored(int64_t number) {
    auto t = store_->GetTrial("s", number);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.value_or(v1::Trial());
  }

  FakeClock clock_;
  std::unique_ptr<storage::MemoryStudyStore> store_ =
      storage::MemoryStudyStore::Create();
  EventHub events_;
  WorkerRegistry workers_{&clock_, absl::Seconds(10)};
  Outbox outbox_;
  TrialLifecycle lifecycle_{{store_.get(), &clock_, &events_, &workers_,
                             nullptr, nullptr, nullptr, &outbox_, nullptr,
                             nullptr}};
  StudyLoader loader_{
      store_.get(),
      [](const v1::StudySpec& s) { return searchers::CreateSearcher(s); },
      [](const v1::StudySpec& s) {
        return searchers::CreateTrialScheduler(s);
      }};
  std::shared_ptr<StudyEntry> entry_;
};

TEST_F(TrialLifecycleTest, AReportIsStoredAndARepeatGetsItsDecisionAgain) {
  ASSERT_NO_FATAL_FAILURE(Create(3));
  std::vector<v1::StudyEvent> seen;
  events_.Add(
      "s", [&](const v1::StudyEvent& e) { seen.push_back(e); },
      v1::StudyEvent());
  v1::Trial t = Start(0);
  auto d = lifecycle_.RecordReport(*entry_, t, 5, Metric("loss", 0.5), "");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->action(), v1::Decision::CONTINUE);
  EXPECT_EQ(Stored(0).last_step(), 5);
  EXPECT_EQ(entry_->trials().at(0).last_step(), 5);
  events_.Deliver();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().kind(), v1::StudyEvent::TRIAL_REPORTED);

  const v1::Trial& now = entry_->trials().at(0);
  auto same = lifecycle_.RepeatedStep(*entry_, now, 5);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->action(), v1::Decision::CONTINUE);
  auto older = lifecycle_.RepeatedStep(*entry_, now, 3);
  ASSERT_TRUE(older.has_value());
  EXPECT_EQ(older->reason(), "step already recorded");
  EXPECT_FALSE(lifecycle_.RepeatedStep(*entry_, now, 6).has_value());
}

TEST_F(TrialLifecycleTest, FinishingTheLastTrialEndsTheStudy) {
  ASSERT_NO_FATAL_FAILURE(Create(1));
  v1::Trial t = Start(0);
  t.set_state(v1::COMPLETED);
  *t.mutable_final_metrics() = Metric("loss", 0.25);
  t.set_objective_value(0.25);
  ASSERT_TRUE(lifecycle_.Finalize(*entry_, t).ok());
  EXPECT_EQ(Stored(0).state(), v1::COMPLETED);
  ASSERT_EQ(entry_->observations().trials.size(),
            1u);  // for the searcher, later
  EXPECT_EQ(entry_->observations().trials[0].number(), 0);
  EXPECT_TRUE(outbox_.fills.count("s"));
  auto study = store_->GetStudy("s");
  ASSERT_TRUE(study.ok());
  EXPECT_EQ(study->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(entry_->study().state(), v1::STUDY_COMPLETED);
  // A finished trial's repeats of older steps are not "recorded" ones.
  EXPECT_FALSE(
      lifecycle_.RepeatedStep(*entry_, entry_->trials().at(0), 0).has_value());
}

TEST_F(TrialLifecycleTest, ARequeuedTrialWaitsAgainUnlessTheStudyStopped) {
  ASSERT_NO_FATAL_FAILURE(Create(3));
  v1::Trial t = Start(0);
  t.set_worker_id("w1");
  ASSERT_TRUE(lifecycle_.SaveTrial(*entry_, t).ok());
  ASSERT_TRUE(lifecycle_.Requeue(*entry_, t).ok());
  EXPECT_EQ(Stored(0).state(), v1::PENDING);
  EXPECT_TRUE(entry_->pending().count(0));
  ASSERT_TRUE(lifecycle_.SaveStudyState(*entry_, v1::STUDY_STOPPED).ok());
  v1::Trial u = Start(1);
  ASSERT_TRUE(lifecycle_.Requeue(*entry_, u).ok());
  EXPECT_EQ(Stored(1).state(), v1::STOPPED);
}

TEST_F(TrialLifecycleTest, AStaleAttemptOrAWrongTokenIsFencedOff) {
  ASSERT_NO_FATAL_FAILURE(Create(3));
  v1::Trial t = Start(0);
  t.set_worker_id("w1");
  t.set_attempt(2);
  t.set_lease_token("token-2");
  ASSERT_TRUE(lifecycle_.SaveTrial(*entry_, t).ok());
  EXPECT_TRUE(lifecycle_.Fence(*entry_, "w1", 0, 2, "token-2").ok());
  EXPECT_EQ(lifecycle_.Fence(*entry_, "w1", 0, 1, "token-2").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lifecycle_.Fence(*entry_, "w1", 0, 2, "guess").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lifecycle_.Fence(*entry_, "w2", 0, 2, "token-2").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dial::scheduler
