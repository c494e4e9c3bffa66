// StudyEntry over the memory store: memory changes only with a Stored value
// (a write that succeeded), the indexes follow every trial, and the named
// operations on memory's own state (observations, decisions, uploads,
// top-ups, the exhausted flag) do what they say.
#include "scheduler/study_entry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <type_traits>

#include "storage/memory_study_store.h"
#include "storage/testing/faulty_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Issue 33: memory could be changed before (or without) the store write.
// Now nothing but Save and a load makes a Stored value.
static_assert(!std::is_constructible_v<Stored<v1::Study>, v1::Study>);
static_assert(!std::is_constructible_v<Stored<v1::Trial>, v1::Trial>);
static_assert(!std::is_convertible_v<v1::Trial, Stored<v1::Trial>>);

class StudyEntryTest : public ::testing::Test {
 protected:
  v1::Trial Trial(int64_t number, v1::TrialState state,
                  const std::string& client = "") {
    v1::Trial t;
    t.set_study("s");
    t.set_number(number);
    t.set_state(state);
    t.set_client_id(client);
    (*t.mutable_params())["x"].set_double_value(0.1 * double(number));
    return t;
  }
  void Put(v1::Trial t) {
    auto stored = Save::Trial(*store_, std::move(t));
    ASSERT_TRUE(stored.ok()) << stored.status();
    entry_->Mirror(*std::move(stored));
  }
  v1::Trial Completed(int64_t number, double loss) {
    v1::Trial t = Trial(number, v1::COMPLETED);
    (*t.mutable_final_metrics())["loss"] = loss;
    t.set_objective_value(loss);
    return t;
  }

  std::unique_ptr<storage::MemoryStudyStore> store_ =
      storage::MemoryStudyStore::Create();
  CoreParts parts_{store_.get()};
  std::shared_ptr<StudyEntry> entry_ = parts_.Add(SmallSpec("s", 10));
};

TEST_F(StudyEntryTest, TheIndexesFollowEveryTrial) {
  Put(Trial(0, v1::PENDING));
  Put(Trial(1, v1::RUNNING, "c"));
  Put(Trial(2, v1::PAUSED));
  EXPECT_THAT(entry_->open(), ElementsAre(0, 1, 2));
  EXPECT_THAT(entry_->pending(), ElementsAre(0));
  EXPECT_EQ(entry_->open_trials(), 3);
  EXPECT_EQ(entry_->active_trials(), 2);
  EXPECT_THAT(entry_->open_by_client().at("c"), ElementsAre(1));
  EXPECT_EQ(entry_->state_counts().at(v1::PENDING), 1);

  Put(Completed(1, 0.5));
  Put(Completed(0, 0.25));
  EXPECT_THAT(entry_->open(), ElementsAre(2));
  EXPECT_THAT(entry_->pending(), IsEmpty());
  EXPECT_THAT(entry_->open_by_client().at("c"), IsEmpty());
  EXPECT_EQ(entry_->active_trials(), 0);
  EXPECT_EQ(entry_->state_counts().at(v1::COMPLETED), 2);
  EXPECT_EQ(entry_->state_counts().at(v1::PENDING), 0);
  // Best first, lower loss better.
  ASSERT_EQ(entry_->ranked().size(), 2u);
  EXPECT_EQ(entry_->ranked().begin()->second, 0);
  ASSERT_NE(entry_->Best(), nullptr);
  EXPECT_EQ(entry_->Best()->number(), 0);
  const v1::Study counted = entry_->WithCounts();
  EXPECT_EQ(counted.trials_created(), 3);
  EXPECT_EQ(counted.trial_counts().at("COMPLETED"), 2);
}

TEST_F(StudyEntryTest, AReevaluationMovesItsOriginsRank) {
  Put(Completed(0, 0.2));
  Put(Completed(1, 0.3));
  EXPECT_EQ(entry_->Best()->number(), 0);
  v1::Trial rerun = Completed(2, 0.6);  // trial 0 again: mean 0.4
  rerun.set_origin(0);
  Put(rerun);
  EXPECT_EQ(entry_->Best()->number(), 1);
  EXPECT_EQ(entry_->ranked().size(), 2u);  // the re-evaluation is not ranked
  auto runs = entry_->Runs(0);
  ASSERT_TRUE(runs.has_value());
  EXPECT_EQ(runs->runs(), 2);
  EXPECT_DOUBLE_EQ(runs->mean(), 0.4);
}

TEST_F(StudyEntryTest, AFailedWriteLeavesNothingToApply) {
  auto faulty = storage::testing::FaultyStudyStore::Create();
  v1::Study study = entry_->study();
  ASSERT_TRUE(faulty->CreateStudy(study).ok());
  faulty->FailWrites();
  study.mutable_spec()->mutable_budget()->set_max_trials(99);
  auto saved = Save::Study(*faulty, study);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kUnavailable);
  auto trial = Save::Trial(*faulty, Trial(0, v1::RUNNING));
  EXPECT_FALSE(trial.ok());
  // Without a Stored value there is nothing the entry takes.
  EXPECT_EQ(entry_->study().spec().budget().max_trials(), 10);
  EXPECT_TRUE(entry_->trials().empty());
}

TEST_F(StudyEntryTest, AChangedBudgetClearsExhausted) {
  entry_->MarkExhausted();
  EXPECT_FALSE(entry_->CanCreate());
  v1::Study same = entry_->study();
  same.set_state(v1::STUDY_ACTIVE);
  auto saved = Save::Study(*store_, same);
  ASSERT_TRUE(saved.ok());
  entry_->Apply(*std::move(saved));
  EXPECT_TRUE(entry_->exhausted()) << "the same budget: still exhausted";

  v1::Study more = entry_->study();
  more.mutable_spec()->mutable_budget()->set_max_trials(20);
  saved = Save::Study(*store_, more);
  ASSERT_TRUE(saved.ok());
  entry_->Apply(*std::move(saved));
  EXPECT_FALSE(entry_->exhausted());
  EXPECT_TRUE(entry_->CanCreate());
  EXPECT_EQ(store_->GetStudy("s")->spec().budget().max_trials(), 20);
}

TEST_F(StudyEntryTest, PriorsStayOutOfTheStudy) {
  v1::Study study = entry_->study();
  study.set_name("w");
  study.add_prior_trials()->set_number(4);
  auto saved = Save::NewStudy(*store_, study);
  ASSERT_TRUE(saved.ok());
  StudyEntry warm(*std::move(saved),
                  searchers::CreateSearcher(study.spec()).value(),
                  searchers::CreateTrialScheduler(study.spec()).value());
  ASSERT_EQ(warm.priors().size(), 1);
  EXPECT_EQ(warm.priors()[0].number(), 4);
  EXPECT_EQ(warm.study().prior_trials_size(), 0);
  EXPECT_EQ(warm.WithCounts().prior_trials_size(), 0);
}

TEST_F(StudyEntryTest, DequeueTakesOnlyTheHeadWithThatId) {
  v1::Study study = entry_->study();
  for (int id = 1; id <= 2; ++id) study.add_queue()->set_id(id);
  auto saved = Save::Study(*store_, study);
  ASSERT_TRUE(saved.ok());
  entry_->Apply(*std::move(saved));
  entry_->Dequeue(2);  // not the head
  EXPECT_EQ(entry_->study().queue_size(), 2);
  entry_->Dequeue(1);
  ASSERT_EQ(entry_->study().queue_size(), 1);
  EXPECT_EQ(entry_->study().queue(0).id(), 2);
  // Memory only: the store keeps it until the study is next written.
  EXPECT_EQ(store_->GetStudy("s")->queue_size(), 2);
}

TEST_F(StudyEntryTest, ObservationsWaitUntilTaken) {
  entry_->Observe(Trial(0, v1::COMPLETED));
  entry_->Observe(Trial(1, v1::FAILED));
  // A random searcher does not want reports: none are kept.
  entry_->ObserveReport(Trial(2, v1::RUNNING), 3, Metric("loss", 1));
  StudyEntry::Observations seen = entry_->TakeObservations();
  ASSERT_EQ(seen.trials.size(), 2u);
  EXPECT_EQ(seen.trials[1].number(), 1);
  EXPECT_TRUE(seen.reports.empty());
  EXPECT_TRUE(entry_->observations().trials.empty());
}

TEST_F(StudyEntryTest, DecisionsAreKeptPerTrial) {
  v1::Decision stop;
  stop.set_action(v1::Decision::STOP);
  entry_->RememberDecision(3, 7, stop);
  ASSERT_NE(entry_->LastDecision(3), nullptr);
  EXPECT_EQ(entry_->LastDecision(3)->first, 7);
  EXPECT_EQ(entry_->LastDecision(3)->second.action(), v1::Decision::STOP);
  EXPECT_EQ(entry_->LastDecision(4), nullptr);

  entry_->LeaveUnsaved(3, 7, stop);
  ASSERT_NE(entry_->Unsaved(3), nullptr);
  entry_->ForgetUnsaved(3);
  EXPECT_EQ(entry_->Unsaved(3), nullptr);
}

TEST_F(StudyEntryTest, UploadsAreBoundedAndForgotten) {
  for (int step = 0; step < 10; ++step) {
    entry_->AddUpload(1, step, {"s/1/" + std::to_string(step), 0.0, "w1"});
  }
  entry_->AddUpload(2, 0, {"s/2/0", std::nullopt, "w2"});
  // At most 8 per trial: the oldest go.
  EXPECT_EQ(entry_->FindUpload(1, 0), nullptr);
  EXPECT_EQ(entry_->FindUpload(1, 1), nullptr);
  ASSERT_NE(entry_->FindUpload(1, 9), nullptr);
  EXPECT_EQ(entry_->FindUpload(1, 9)->id, "s/1/9");
  entry_->ForgetUploads(1, 8);
  EXPECT_TRUE(entry_->Uploading(1));
  entry_->ForgetUploads(1);
  EXPECT_FALSE(entry_->Uploading(1));
  entry_->ForgetUploadsOf("w2");
  EXPECT_FALSE(entry_->Uploading(2));
}

TEST_F(StudyEntryTest, ATopUpIsQueuedOnceAndOnlyForWorkerRuns) {
  EXPECT_FALSE(entry_->QueueFill()) << "ask/tell studies have no top-ups";
  auto worker_run =
      parts_.Add(SmallSpec("w", 10, "trial: {command: {argv: [\"true\"]}}\n"));
  ASSERT_NE(worker_run, nullptr);
  EXPECT_TRUE(worker_run->QueueFill());
  EXPECT_FALSE(worker_run->QueueFill());
  worker_run->FillStarted();
  EXPECT_TRUE(worker_run->QueueFill());

  worker_run->FillFailed();
  EXPECT_TRUE(worker_run->TakeFillFailed());
  EXPECT_FALSE(worker_run->TakeFillFailed());
}

TEST_F(StudyEntryTest, ADroppedEntryCreatesNothing) {
  EXPECT_TRUE(entry_->CanCreate());
  parts_.studies.Remove("s");
  EXPECT_TRUE(entry_->deleted());
  EXPECT_FALSE(entry_->stale());
  EXPECT_FALSE(entry_->CanCreate());
  EXPECT_EQ(StudyRegistry::Gone(*entry_).code(), absl::StatusCode::kNotFound);
}

TEST_F(StudyEntryTest, TheSearchSpaceIsBuiltOnce) {
  auto space = entry_->space();
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(*space, *entry_->space());  // the same object every time
  searchers::Params bad;
  bad["x"].set_double_value(2);
  EXPECT_FALSE((*space)->Check(bad, "params").ok());
}

}  // namespace
}  // namespace dial::scheduler
