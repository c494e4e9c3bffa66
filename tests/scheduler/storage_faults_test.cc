// SchedulerCore over a store whose writes fail, as on a full disk: every call
// fails with UNAVAILABLE and changes nothing, and the same call succeeds once
// the store heals. Also the core's database backup.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "google/protobuf/util/message_differencer.h"
#include "scheduler/core.h"
#include "storage/testing/faulty_study_store.h"

namespace dial::scheduler {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

using storage::testing::FaultyStudyStore;

v1::StudySpec AskTellSpec(int max_trials) {
  auto spec = ParseStudySpec(
      absl::StrCat("name: s\nobjective: {metric: loss, goal: MINIMIZE}\n"
                   "search_space: [{name: x, float: {min: -5, max: 5}}]\n"
                   "budget: {max_trials: ",
                   max_trials, "}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

v1::StudySpec WorkerSpec() {
  auto spec = ParseStudySpec(
      "name: w\nobjective: {metric: acc, goal: MAXIMIZE}\n"
      "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
      "budget: {max_trials: 2, max_parallel_trials: 1}\n"
      "trial: {trainer: {dataset: synthetic}}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

searchers::Metrics M(double loss) {
  searchers::Metrics m;
  m["loss"] = loss;
  return m;
}

class StorageFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void Start() {
    core_.reset();
    SchedulerCoreOptions options;
    options.store = &store_;
    options.clock = &clock_;
    options.tick = absl::ZeroDuration();
    options.backup_dir = "/backups";
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  // What the core answers for a trial is what the store holds.
  void ExpectMemoryMatchesStore(const std::string& study) {
    auto stored = store_.inner().ListTrials(study, {});
    ASSERT_TRUE(stored.ok());
    auto page = core_->ListTrials(study, {}, 0, "");
    ASSERT_TRUE(page.ok());
    ASSERT_EQ(page->trials.size(), stored->size());
    for (size_t i = 0; i < stored->size(); ++i) {
      EXPECT_TRUE(MessageDifferencer::Equals(page->trials[i], (*stored)[i]))
          << page->trials[i].DebugString() << "\nvs\n"
          << (*stored)[i].DebugString();
    }
  }

  FakeClock clock_;
  FaultyStudyStore store_;
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(StorageFaultsTest, AskTellCallsChangeNothingUntilTheStoreHeals) {
  store_.FailWrites();
  auto created = core_->CreateStudy(AskTellSpec(3));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(created.status().message(), HasSubstr("disk is full"));
  EXPECT_EQ(core_->GetStudy("s").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(core_->ListStudies()->studies.empty());
  store_.Heal();
  ASSERT_TRUE(core_->CreateStudy(AskTellSpec(3)).ok());

  // Ask.
  store_.FailWrites();
  auto asked = core_->SuggestTrials("s", 1, "c");
  EXPECT_EQ(asked.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(core_->GetStudy("s")->trials_created(), 0);
  store_.Heal();
  asked = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_EQ(asked->trials.size(), 1u);
  const int64_t n = asked->trials[0].number();

  // Tell, during the run.
  store_.FailWrites();
  auto reported = core_->ReportIntermediate("s", n, 10, M(3.0),
                                            absl::StrCat("s/", n, "/ckpt-10"));
  EXPECT_EQ(reported.status().code(), absl::StatusCode::kUnavailable);
  auto trial = core_->GetTrial("s", n);
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->last_step(), -1);
  EXPECT_EQ(trial->metric_history_size(), 0);
  EXPECT_EQ(trial->checkpoint(), "");
  store_.Heal();
  reported = core_->ReportIntermediate("s", n, 10, M(3.0),
                                       absl::StrCat("s/", n, "/ckpt-10"));
  ASSERT_TRUE(reported.ok()) << reported.status();
  EXPECT_EQ(reported->action(), v1::Decision::CONTINUE);
  trial = core_->GetTrial("s", n);
  EXPECT_EQ(trial->last_step(), 10);
  EXPECT_EQ(trial->metric_history_size(), 1);

  // Tell, at the end.
  store_.FailWrites();
  auto completed = core_->CompleteTrial("s", n, M(1.5), "");
  EXPECT_EQ(completed.status().code(), absl::StatusCode::kUnavailable);
  trial = core_->GetTrial("s", n);
  EXPECT_EQ(trial->state(), v1::RUNNING);
  EXPECT_FALSE(trial->has_objective_value());
  EXPECT_TRUE(trial->final_metrics().empty());
  EXPECT_TRUE(core_->GetBestTrials("s", 1)->empty());
  EXPECT_EQ(core_->GetStudy("s")->trial_counts().at("RUNNING"), 1);
  // A repeated ask still finds the open trial.
  auto again = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->trials.size(), 1u);
  EXPECT_EQ(again->trials[0].number(), n);
  store_.Heal();
  completed = core_->CompleteTrial("s", n, M(1.5), "");
  ASSERT_TRUE(completed.ok()) << completed.status();
  EXPECT_EQ(completed->state(), v1::COMPLETED);
  ASSERT_EQ(core_->GetBestTrials("s", 1)->size(), 1u);

  EXPECT_GE(store_.failed_writes(), 4);
  ExpectMemoryMatchesStore("s");
  // A restarted core, built from the store alone, sees the same.
  Start();
  ExpectMemoryMatchesStore("s");
  EXPECT_EQ(core_->GetTrial("s", n)->state(), v1::COMPLETED);
}

TEST_F(StorageFaultsTest, AStopThatCouldNotBeSavedIsSavedByTheRetriedReport) {
  ASSERT_TRUE(core_->CreateStudy(AskTellSpec(3)).ok());
  auto asked = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(asked.ok());
  const int64_t n = asked->trials[0].number();
  ASSERT_TRUE(core_->StopStudy("s").ok());  // RUNNING trials get STOP next

  // The report commits; saving the trial as STOPPED does not.
  store_.FailWritesAfter(1);
  auto first = core_->ReportIntermediate("s", n, 10, M(3.0), "");
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  auto trial = core_->GetTrial("s", n);
  EXPECT_EQ(trial->state(), v1::RUNNING);
  EXPECT_EQ(trial->last_step(), 10);
  ExpectMemoryMatchesStore("s");

  store_.Heal();
  auto retried = core_->ReportIntermediate("s", n, 10, M(3.0), "");
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->action(), v1::Decision::STOP);
  trial = core_->GetTrial("s", n);
  EXPECT_EQ(trial->state(), v1::STOPPED);
  EXPECT_EQ(trial->metric_history_size(), 1);  // recorded once
  ExpectMemoryMatchesStore("s");
  // Once more: the same STOP (one rule for repeats), nothing recorded.
  auto again = core_->ReportIntermediate("s", n, 10, M(3.0), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->action(), v1::Decision::STOP);
  EXPECT_EQ(core_->GetTrial("s", n)->metric_history_size(), 1);
}

// Issue 33: ReevaluateTrials raised max_trials, reopened the COMPLETED
// study and forgot that its space was exhausted in memory before the
// study's write; when that write failed, memory stayed ahead of the disk.
TEST_F(StorageFaultsTest, AFailedReevaluationChangesNothing) {
  ASSERT_TRUE(core_->CreateStudy(AskTellSpec(1)).ok());
  auto asked = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(asked.ok());
  ASSERT_TRUE(core_->CompleteTrial("s", 0, M(1.0), "").ok());
  auto before = core_->GetStudy("s");
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->state(), v1::STUDY_COMPLETED);

  store_.FailWrites();
  auto refused = core_->ReevaluateTrials("s", 1, 2);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  auto after = core_->GetStudy("s");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(after->spec().budget().max_trials(), 1);
  EXPECT_EQ(after->queue_size(), 0);
  auto stored = store_.inner().GetStudy("s");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), after->state());
  EXPECT_EQ(stored->spec().budget().max_trials(),
            after->spec().budget().max_trials());
  // Nothing to ask for: the study is still over.
  store_.Heal();
  auto none = core_->SuggestTrials("s", 1, "d");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->trials.empty());
  EXPECT_TRUE(none->done);

  // Healed, the same call works.
  auto queued = core_->ReevaluateTrials("s", 1, 2);
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(queued->size(), 2u);
  EXPECT_EQ(core_->GetStudy("s")->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(core_->GetStudy("s")->spec().budget().max_trials(), 3);
}

TEST_F(StorageFaultsTest, ACompletionIsAcknowledgedBeforeTheStudysEndIsSaved) {
  ASSERT_TRUE(core_->CreateStudy(AskTellSpec(1)).ok());
  auto asked = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(asked.ok());
  const int64_t n = asked->trials[0].number();

  // The trial's end commits; the study's (COMPLETED) does not.
  store_.FailWritesAfter(1);
  auto completed = core_->CompleteTrial("s", n, M(1.0), "");
  ASSERT_TRUE(completed.ok()) << completed.status();
  EXPECT_EQ(core_->GetStudy("s")->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(store_.inner().GetTrial("s", n)->state(), v1::COMPLETED);

  store_.Heal();
  auto asked_again = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(asked_again.ok()) << asked_again.status();
  EXPECT_TRUE(asked_again->done);
  EXPECT_EQ(core_->GetStudy("s")->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(store_.inner().GetStudy("s")->state(), v1::STUDY_COMPLETED);
}

TEST_F(StorageFaultsTest, AWorkerRunStudyIsToppedUpOnceTheStoreHeals) {
  // The study is saved; queueing its first trial is not.
  store_.FailWritesAfter(1);
  ASSERT_TRUE(core_->CreateStudy(WorkerSpec()).ok());
  core_->WaitIdle();
  EXPECT_EQ(core_->GetStudy("w")->trials_created(), 0);
  store_.Heal();

  v1::WorkerResources resources;
  resources.set_slots(1);
  auto worker = core_->RegisterWorker("host", resources);
  ASSERT_TRUE(worker.ok());
  auto acquire = [&] {
    std::optional<Assignment> got;
    core_->AcquireTrial(
        worker->worker_id(), 0, absl::ZeroDuration(), [] { return true; },
        [&](absl::StatusOr<std::optional<Assignment>> r) {
          ASSERT_TRUE(r.ok()) << r.status();
          got = *r;
        });
    return got;
  };
  // Asking for work queues the failed top-up again.
  EXPECT_FALSE(acquire().has_value());
  core_->WaitIdle();
  auto assignment = acquire();
  ASSERT_TRUE(assignment.has_value());
  EXPECT_EQ(assignment->trial.study(), "w");
  ExpectMemoryMatchesStore("w");
}

TEST_F(StorageFaultsTest, BackupsRunOneAtATimeOffTheCallersThread) {
  absl::Notification started, release;
  store_.GateBackups(&started, &release);
  using Copy = absl::StatusOr<std::pair<std::string, int64_t>>;
  std::promise<Copy> first;
  core_->BackupDatabaseAsync("a.db",
                             [&](Copy r) { first.set_value(std::move(r)); });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The core serves meanwhile, and refuses a second backup.
  EXPECT_TRUE(core_->CreateStudy(AskTellSpec(1)).ok());
  EXPECT_EQ(core_->BackupDatabase("b.db").status().code(),
            absl::StatusCode::kAborted);
  release.Notify();
  auto future = first.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  auto copy = future.get();
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->first, "/backups/a.db");
  EXPECT_EQ(copy->second, 13);
  // Once it has finished, the next one runs.
  EXPECT_TRUE(core_->BackupDatabase("b.db").ok());

  // A store with nothing on disk says so.
  auto memory = storage::MemoryStudyStore::Create();
  SchedulerCoreOptions options;
  options.store = memory.get();
  options.tick = absl::ZeroDuration();
  options.backup_dir = "/backups";
  auto core = SchedulerCore::Create(options);
  ASSERT_TRUE(core.ok());
  EXPECT_EQ((*core)->BackupDatabase("c.db").status().code(),
            absl::StatusCode::kUnimplemented);
  // And a core that shuts down takes no more.
  (*core)->StopWaiting();
  EXPECT_EQ((*core)->BackupDatabase("c.db").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dial::scheduler
