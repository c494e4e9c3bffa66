// The core on a group-commit store whose commits the test makes succeed or
// fail: answers wait for their own writes, nothing acts on a write before
// it is durable, and work queued for studies that a reload dropped does not
// write.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "searchers/searcher.h"
#include "storage/checkpoint_store.h"
#include "storage/testing/faulty_study_store.h"
#include "storage/testing/temp_dir.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

v1::StudySpec Spec(const std::string& name, const std::string& extra) {
  auto spec = ParseStudySpec(
      "name: " + name +
      "\nobjective: {metric: acc, goal: MAXIMIZE}\n"
      "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n" +
      extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

searchers::Metrics Acc(double v) { return Metric("acc", v); }

class DurabilityTest : public ::testing::Test {
 protected:
  void Start(SchedulerCoreOptions options = {}) {
    options.store = &store_;
    options.tick = absl::ZeroDuration();
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  // Group commit driven by the test (Commit, Lose); outlives the core.
  storage::testing::FaultyStudyStore store_{{/*group_commit=*/true}};
  std::unique_ptr<SchedulerCore> core_;
};

// A call whose write was lost is answered UNAVAILABLE even when, before it
// asks, the core reloaded and another call's write became durable.
TEST_F(DurabilityTest, AnAnswerWaitsForItsOwnWriteNotTheLatest) {
  Start();
  ASSERT_TRUE(core_->CreateStudy(Spec("s", "budget: {max_trials: 4}\n")).ok());
  auto s = core_->SuggestTrials("s", 1, "me");
  ASSERT_TRUE(s.ok() && s->trials.size() == 1) << s.status();
  store_.Commit();
  ASSERT_TRUE(Durable(*core_, s.ticket()).ok());

  auto first = core_->ReportIntermediate("s", 0, 1, Acc(0.1), "");
  ASSERT_TRUE(first.ok());
  store_.Lose();  // the report's commit fails; the core reloads
  std::thread other([&] {
    ASSERT_TRUE(core_->ReportIntermediate("s", 0, 2, Acc(0.2), "").ok());
  });
  other.join();
  store_.Commit();  // the other call's write is durable
  EXPECT_EQ(Durable(*core_, first.ticket()).code(),
            absl::StatusCode::kUnavailable);
}

// Retention deletes a checkpoint only once the report that made it
// obsolete is durable: after a lost commit the reloaded trial may still
// name it.
TEST_F(DurabilityTest, RetentionWaitsForTheReportsCommit) {
  storage::testing::ScopedTempDir root("durability");
  auto checkpoints =
      storage::FileCheckpointStore::Create({root.path().string()});
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  SchedulerCoreOptions options;
  options.checkpoints = checkpoints->get();
  Start(options);
  ASSERT_TRUE(core_
                  ->CreateStudy(Spec("w",
                                     "checkpoints: {keep_best: 1}\n"
                                     "budget: {max_trials: 1}\n"
                                     "trial: {trainer: {dataset: "
                                     "synthetic}}\n"))
                  .ok());
  core_->WaitIdle();
  v1::WorkerResources resources;
  resources.set_slots(1);
  auto worker = core_->RegisterWorker("h", resources);
  ASSERT_TRUE(worker.ok());
  std::optional<Assignment> a;
  core_->AcquireTrial(
      worker->worker_id(), 0, absl::ZeroDuration(), [] { return true; },
      [&](absl::StatusOr<std::optional<Assignment>> r) {
        ASSERT_TRUE(r.ok() && r->has_value());
        a = **r;
      });
  ASSERT_TRUE(a);
  auto report = [&](int64_t step, double acc) {
    ASSERT_TRUE(
        (*checkpoints)->Write("w", 0, step, {{"model.pt", "weights"}}).ok());
    v1::ReportProgressRequest r;
    r.set_worker_id(worker->worker_id());
    r.set_study("w");
    r.set_trial(0);
    r.set_attempt(a->attempt);
    r.set_lease_token(a->trial.lease_token());
    r.set_step(step);
    (*r.mutable_metrics())["acc"] = acc;
    r.set_checkpoint(absl::StrCat("w/0/", step));
    auto d = core_->ReportProgress(r);
    ASSERT_TRUE(d.ok()) << d.status();
  };
  auto steps = [&] {
    core_->WaitIdle();
    return *(*checkpoints)->ListSteps("w", 0);
  };
  report(10, 0.9);
  report(20, 0.5);
  store_.Commit();
  // Step 30 leaves step 20 neither the best nor the latest, but its commit
  // is lost: step 20 stays.
  report(30, 0.6);
  store_.Lose();
  EXPECT_EQ(steps(), (std::vector<int64_t>{10, 20, 30}));
  // The reload restores retention from the checkpoint index, which lost
  // 30's row with its commit: 10 (best) and 20 (latest) stay. Then 40
  // leaves 20 behind, 50 leaves 40 and 60 leaves 50; committed, they go.
  // 30 was never recorded (its report was lost): no row names it.
  report(40, 0.7);
  report(50, 0.65);
  report(60, 0.3);
  store_.Commit();
  EXPECT_EQ(steps(), (std::vector<int64_t>{10, 30, 60}));
}

// A searcher whose Suggest waits until the test lets it finish, then says
// the space is exhausted.
class GatedSearcher : public searchers::Searcher {
 public:
  GatedSearcher(absl::Notification* entered, absl::Notification* release)
      : entered_(entered), release_(release) {}
  absl::StatusOr<searchers::Params> Suggest(
      int64_t, const std::vector<searchers::Params>&) override {
    if (!entered_->HasBeenNotified()) entered_->Notify();
    release_->WaitForNotification();
    return absl::OutOfRangeError("exhausted");
  }

 private:
  absl::Notification* entered_;
  absl::Notification* release_;
};

// A suggestion that outlives a reload neither writes to the study the
// reload dropped (here: marking it COMPLETED) nor answers OK.
TEST_F(DurabilityTest, ASuggestionOverlappingAReloadDoesNotWrite) {
  absl::Notification entered, release;
  SchedulerCoreOptions options;
  options.searcher_factory = [&](const v1::StudySpec&)
      -> absl::StatusOr<std::unique_ptr<searchers::Searcher>> {
    return std::make_unique<GatedSearcher>(&entered, &release);
  };
  Start(options);
  ASSERT_TRUE(core_->CreateStudy(Spec("s", "budget: {max_trials: 4}\n")).ok());
  store_.Commit();
  absl::StatusOr<Suggestion> answer;
  std::thread client([&] { answer = core_->SuggestTrials("s", 1, "me"); });
  entered.WaitForNotification();
  store_.Lose();  // reloads while the searcher runs
  release.Notify();
  client.join();
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable)
      << answer.status();
  core_->WaitIdle();
  EXPECT_EQ(store_.GetStudy("s")->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(core_->GetStudy("s")->state(), v1::STUDY_ACTIVE);
}

// A reload that fails part way leaves no loaded study behind to be topped
// up: nothing is written until a reload succeeds.
TEST_F(DurabilityTest, AFailedReloadLeavesNoStudyBehindThatWrites) {
  Start();
  const std::string workers =
      "budget: {max_trials: 4, max_parallel_trials: 1}\n"
      "trial: {trainer: {dataset: synthetic}}\n";
  // Study "a" is in the file but not yet in the core: a reload loads it
  // and queues its top-up.
  v1::Study a;
  a.set_name("a");
  *a.mutable_spec() = Spec("a", workers);
  FillSpecDefaults(1, *a.mutable_spec());
  a.set_state(v1::STUDY_ACTIVE);
  ASSERT_TRUE(store_.CreateStudy(a).ok());
  ASSERT_TRUE(core_->CreateStudy(Spec("b", "budget: {max_trials: 4}\n")).ok());
  store_.Commit();
  // A lost commit; the reload loads "a", then fails on "b".
  store_.MakeUnreadable("b");
  store_.Lose();
  core_->WaitIdle();
  EXPECT_TRUE(store_.ListTrials("a", {})->empty());
  // Once the reload succeeds, "a" gets its trial.
  store_.MakeUnreadable("");
  core_->Tick();
  core_->WaitIdle();
  EXPECT_EQ(store_.ListTrials("a", {})->size(), 1u);
}

}  // namespace
}  // namespace dial::scheduler
