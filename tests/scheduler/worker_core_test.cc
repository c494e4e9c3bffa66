// SchedulerCore's worker side without gRPC: dispatch, long polls, fencing,
// leases, retries. Time is a fake clock and Tick is called by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "storage/checkpoint_store.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

v1::StudySpec WorkerSpec(int max_trials, int parallel, int failures = 0) {
  auto spec = ParseStudySpec(
      absl::StrCat("name: w\nobjective: {metric: acc, goal: MAXIMIZE}\n"
                   "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
                   "budget: {max_trials: ",
                   max_trials, ", max_parallel_trials: ", parallel,
                   ", max_failures_per_trial: ", failures,
                   "}\n"
                   "trial: {trainer: {dataset: synthetic}}"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

class WorkerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = storage::MemoryStudyStore::Create();
    SchedulerCoreOptions options;
    options.store = store_.get();
    options.clock = &clock_;
    options.worker_lease = absl::Seconds(10);
    options.tick = absl::ZeroDuration();
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok());
    core_ = std::move(*core);
  }
  // Worker-run studies get their PENDING trials from the suggestion thread.
  void Create(const v1::StudySpec& spec) {
    ASSERT_TRUE(core_->CreateStudy(spec).ok());
    core_->WaitIdle();
  }
  std::string Register(const std::string& host) {
    v1::WorkerResources r;
    r.set_slots(1);
    auto w = core_->RegisterWorker(host, r);
    EXPECT_TRUE(w.ok()) << w.status();
    return w->worker_id();
  }
  // Acquires without waiting.
  std::optional<Assignment> Acquire(const std::string& worker) {
    std::optional<Assignment> got;
    bool called = false;
    core_->AcquireTrial(
        worker, 0, absl::ZeroDuration(), [] { return true; },
        [&](absl::StatusOr<std::optional<Assignment>> r) {
          called = true;
          EXPECT_TRUE(r.ok()) << r.status();
          if (r.ok()) got = *r;
        });
    EXPECT_TRUE(called);
    return got;
  }
  v1::ReportProgressRequest Report(const std::string& worker,
                                   const Assignment& a, int64_t step,
                                   const std::string& checkpoint = "") {
    return ReportRequest(worker, a, step, checkpoint);
  }
  v1::FinishTrialRequest Finish(const std::string& worker, const Assignment& a,
                                double acc, const std::string& error = "") {
    v1::FinishTrialRequest r = FinishRequest(worker, a);
    if (error.empty()) (*r.mutable_final_metrics())["acc"] = acc;
    r.set_error(error);
    return r;
  }
  FakeClock clock_;
  std::unique_ptr<storage::StudyStore> store_;
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(WorkerCoreTest, WorkerStudiesQueueTrialsUpToTheParallelLimit) {
  Create(WorkerSpec(5, 2));
  auto study = core_->GetStudy("w");
  EXPECT_EQ(study->trial_counts().at("PENDING"), 2);
  const std::string w = Register("a");
  auto a0 = Acquire(w);
  auto a1 = Acquire(w);
  ASSERT_TRUE(a0 && a1);
  EXPECT_EQ(a0->trial.number(), 0);
  EXPECT_EQ(a1->trial.number(), 1);
  EXPECT_EQ(a0->attempt, 1);
  EXPECT_TRUE(a0->run.has_trainer());
  EXPECT_FALSE(Acquire(w).has_value());  // parallel limit
  ASSERT_TRUE(core_->ReportProgress(Report(w, *a0, 10)).ok());
  ASSERT_TRUE(core_->FinishTrial(Finish(w, *a0, 0.9)).ok());
  core_->WaitIdle();
  auto t0 = core_->GetTrial("w", 0);
  EXPECT_EQ(t0->state(), v1::COMPLETED);
  EXPECT_DOUBLE_EQ(t0->objective_value(), 0.9);
  auto a2 = Acquire(w);  // a new trial was queued
  ASSERT_TRUE(a2);
  EXPECT_EQ(a2->trial.number(), 2);
}

TEST_F(WorkerCoreTest, ParkedLongPollGetsTheNextTrialOrTimesOut) {
  const std::string w = Register("a");
  std::vector<absl::StatusOr<std::optional<Assignment>>> results;
  auto park = [&] {
    core_->AcquireTrial(
        w, 0, absl::Seconds(5), [] { return true; },
        [&](absl::StatusOr<std::optional<Assignment>> r) {
          results.push_back(std::move(r));
        });
  };
  park();
  EXPECT_TRUE(results.empty());  // parked: no trial yet
  Create(WorkerSpec(1, 1));
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].ok());
  ASSERT_TRUE(results[0]->has_value());
  EXPECT_EQ((*results[0])->trial.number(), 0);

  park();
  EXPECT_EQ(results.size(), 1u);
  clock_.Advance(absl::Seconds(4));
  core_->Tick();
  EXPECT_EQ(results.size(), 1u);
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[1].ok());
  EXPECT_FALSE(results[1]->has_value());
}

TEST_F(WorkerCoreTest, StaleAttemptsAreFencedAfterALostLease) {
  Create(WorkerSpec(1, 1));
  const std::string a = Register("a");
  auto first = Acquire(a);
  ASSERT_TRUE(first);
  ASSERT_TRUE(core_->ReportProgress(Report(a, *first, 100, "w/0/100")).ok());
  ASSERT_TRUE(core_->ReportProgress(Report(a, *first, 150)).ok());
  // Worker a goes silent; b keeps its lease.
  const std::string b = Register("b");
  clock_.Advance(absl::Seconds(6));
  v1::HeartbeatRequest hb;
  hb.set_worker_id(b);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  EXPECT_EQ(core_->GetTrial("w", 0)->state(), v1::PENDING);

  auto second = Acquire(b);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->attempt, 2);
  EXPECT_EQ(second->restore_checkpoint, "w/0/100");
  EXPECT_EQ(second->start_step, 100);

  // The old attempt is gone: its worker must register again.
  auto stale = core_->ReportProgress(Report(a, *first, 200));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kNotFound);
  // Even re-registered, attempt 1 no longer owns the trial.
  const std::string a2 = Register("a");
  auto fenced = core_->ReportProgress(Report(a2, *first, 200));
  EXPECT_EQ(fenced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fenced.status().message(), HasSubstr("stale"));

  // The resumed attempt replays step 150: acknowledged, not written twice.
  auto replay = core_->ReportProgress(Report(b, *second, 150));
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->action(), v1::Decision::CONTINUE);
  ASSERT_TRUE(core_->ReportProgress(Report(b, *second, 200)).ok());
  auto trial = core_->GetTrial("w", 0);
  ASSERT_EQ(trial->metric_history_size(), 3);
  EXPECT_EQ(trial->metric_history(2).step(), 200);
  ASSERT_TRUE(core_->FinishTrial(Finish(b, *second, 0.5)).ok());
  EXPECT_EQ(core_->GetStudy("w")->state(), v1::STUDY_COMPLETED);
}

TEST_F(WorkerCoreTest, FailuresAreRetriedThenFinal) {
  Create(WorkerSpec(1, 1, /*failures=*/1));
  const std::string w = Register("a");
  auto first = Acquire(w);
  ASSERT_TRUE(first);
  auto f = Finish(w, *first, 0, "exit code 1");
  f.set_stderr_tail("RuntimeError: boom");
  ASSERT_TRUE(core_->FinishTrial(f).ok());
  auto t = core_->GetTrial("w", 0);
  EXPECT_EQ(t->state(), v1::PENDING);
  EXPECT_EQ(t->failures(), 1);
  auto second = Acquire(w);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->attempt, 2);
  f = Finish(w, *second, 0, "exit code 1");
  f.set_stderr_tail("RuntimeError: boom again");
  ASSERT_TRUE(core_->FinishTrial(f).ok());
  t = core_->GetTrial("w", 0);
  EXPECT_EQ(t->state(), v1::FAILED);
  EXPECT_THAT(t->error(), HasSubstr("exit code 1"));
  EXPECT_THAT(t->error(), HasSubstr("boom again"));
  EXPECT_EQ(core_->GetStudy("w")->state(), v1::STUDY_COMPLETED);
}

TEST_F(WorkerCoreTest, MissingObjectiveFailsTheTrial) {
  Create(WorkerSpec(1, 1));
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  auto f = Finish(w, *a, 0);
  f.mutable_final_metrics()->clear();
  (*f.mutable_final_metrics())["loss"] = 1;
  ASSERT_TRUE(core_->FinishTrial(f).ok());
  auto t = core_->GetTrial("w", 0);
  EXPECT_EQ(t->state(), v1::FAILED);
  EXPECT_THAT(t->error(), HasSubstr("objective metric 'acc'"));
}

TEST_F(WorkerCoreTest, ShutdownRequeueIsNotAFailure) {
  Create(WorkerSpec(1, 1));
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  ASSERT_TRUE(core_->ReportProgress(Report(w, *a, 50, "w/0/50")).ok());
  auto f = Finish(w, *a, 0);
  f.set_requeue(true);
  ASSERT_TRUE(core_->FinishTrial(f).ok());
  auto t = core_->GetTrial("w", 0);
  EXPECT_EQ(t->state(), v1::PENDING);
  EXPECT_EQ(t->failures(), 0);
  auto again = Acquire(w);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->restore_checkpoint, "w/0/50");
}

TEST_F(WorkerCoreTest, HeartbeatRequeuesTrialsTheWorkerDoesNotRun) {
  Create(WorkerSpec(1, 1));
  const std::string w = Register("a");
  auto a = Acquire(w);  // imagine the reply was lost
  ASSERT_TRUE(a);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(core_->GetTrial("w", 0)->state(), v1::RUNNING);  // grace
  clock_.Advance(absl::Seconds(11));
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(core_->GetTrial("w", 0)->state(), v1::PENDING);
  // A trial the worker does list stays.
  auto b = Acquire(w);
  ASSERT_TRUE(b);
  auto* r = hb.add_running();
  r->set_study("w");
  r->set_trial(0);
  r->set_attempt(b->attempt);
  clock_.Advance(absl::Seconds(11));
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(core_->GetTrial("w", 0)->state(), v1::RUNNING);
}

TEST_F(WorkerCoreTest, UnknownWorkersMustRegister) {
  v1::HeartbeatRequest hb;
  hb.set_worker_id("ghost");
  EXPECT_EQ(core_->Heartbeat(hb).status().code(), absl::StatusCode::kNotFound);
  v1::WorkerResources r;
  EXPECT_EQ(core_->RegisterWorker("", r).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->RegisterWorker("h", r).status().code(),
            absl::StatusCode::kInvalidArgument);  // zero slots
}

TEST_F(WorkerCoreTest, ARetriedReportGetsTheSameDecision) {
  Create(WorkerSpec(2, 1));
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  ASSERT_TRUE(core_->StopStudy("w").ok());
  auto first = core_->ReportProgress(Report(w, *a, 10));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->action(), v1::Decision::STOP);
  // The reply was lost; the worker sends the same report again.
  auto again = core_->ReportProgress(Report(w, *a, 10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->action(), v1::Decision::STOP);
  EXPECT_EQ(core_->GetTrial("w", 0)->metric_history_size(), 1);
}

TEST_F(WorkerCoreTest, ALostWorkersParkedPollIsNotHandedItsOwnTrials) {
  Create(WorkerSpec(1, 1));
  const std::string a = Register("a");
  auto first = Acquire(a);
  ASSERT_TRUE(first);
  std::vector<absl::StatusOr<std::optional<Assignment>>> results;
  core_->AcquireTrial(
      a, 0, absl::Seconds(30), [] { return true; },
      [&](absl::StatusOr<std::optional<Assignment>> r) {
        results.push_back(std::move(r));
      });
  ASSERT_TRUE(results.empty());
  clock_.Advance(absl::Seconds(11));
  core_->Tick();  // a is lost: its trial is requeued, its poll ended
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetTrial("w", 0)->state(), v1::PENDING);
}

TEST_F(WorkerCoreTest, TrialsRequeuedAfterAStopEndStopped) {
  Create(WorkerSpec(2, 1, /*failures=*/3));
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  ASSERT_TRUE(core_->StopStudy("w").ok());
  // It fails with retries left, but the study is stopped: nobody would
  // ever run it again.
  ASSERT_TRUE(core_->FinishTrial(Finish(w, *a, 0, "exit code 1")).ok());
  EXPECT_EQ(core_->GetTrial("w", 0)->state(), v1::STOPPED);
}

// Retention with a real checkpoint store in a temporary directory.
class RetentionTest : public WorkerCoreTest {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("dial-retention-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    auto ckpt = storage::FileCheckpointStore::Create({root_.string()});
    ASSERT_TRUE(ckpt.ok());
    checkpoints_ = std::move(*ckpt);
    store_ = storage::MemoryStudyStore::Create();
    Restart();
  }
  // A new core on the same store and checkpoints, as after a restart.
  void Restart(int64_t checkpoint_quota = 0) {
    core_.reset();
    SchedulerCoreOptions options;
    options.limits.max_checkpoint_bytes_per_owner = checkpoint_quota;
    options.store = store_.get();
    options.clock = &clock_;
    options.tick = absl::ZeroDuration();
    options.checkpoints = checkpoints_.get();
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok());
    core_ = std::move(*core);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  // Writes checkpoint (trial, step) and reports it with `acc`.
  void Report(const std::string& worker, const Assignment& a, int64_t step,
              double acc) {
    ASSERT_TRUE(
        checkpoints_
            ->Write("w", a.trial.number(), step, {{"model.pt", "weights"}})
            .ok());
    auto r = WorkerCoreTest::Report(
        worker, a, step, absl::StrCat("w/", a.trial.number(), "/", step));
    (*r.mutable_metrics())["acc"] = acc;
    last_ = core_->ReportProgress(r);
    ASSERT_TRUE(last_.ok()) << last_.status();
  }
  // A PBT study of four trials on `worker`: at step 10 trial 0 (the worst)
  // exploits trial 3's checkpoint w/3/10, then trial 3 moves on to steps 13
  // and 16, which leave w/3/10 neither its best nor its latest.
  void ExploitTrial3sCheckpoint(const std::string& worker,
                                std::vector<Assignment>* members) {
    auto spec = ParseStudySpec(R"(
name: w
objective: {metric: acc, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]
scheduler: {pbt: {perturbation_interval: 10, quantile: 0.25, seed: 1}}
checkpoints: {keep_best: 1}
budget: {max_trials: 4, max_parallel_trials: 4}
trial: {trainer: {dataset: synthetic}})");
    ASSERT_TRUE(spec.ok()) << spec.status();
    Create(*spec);
    for (int i = 0; i < 4; ++i) members->push_back(*Acquire(worker));
    Report(worker, (*members)[1], 10, 0.5);
    Report(worker, (*members)[2], 10, 0.6);
    Report(worker, (*members)[3], 10, 0.8);
    Report(worker, (*members)[0], 10, 0.1);
    ASSERT_EQ(last_->action(), v1::Decision::EXPLOIT);
    ASSERT_EQ(last_->source_checkpoint(), "w/3/10");
    Report(worker, (*members)[3], 13, 0.95);
    Report(worker, (*members)[3], 16, 0.85);
  }
  std::vector<int64_t> Steps(int64_t trial) {
    core_->WaitIdle();  // deletions run on the suggestion thread
    return *checkpoints_->ListSteps("w", trial);
  }
  std::filesystem::path root_;
  std::unique_ptr<storage::FileCheckpointStore> checkpoints_;
  absl::StatusOr<v1::Decision> last_;
};

TEST_F(RetentionTest, KeepsTheLatestAndTheBestN) {
  auto spec = WorkerSpec(1, 1);
  spec.mutable_checkpoints()->set_keep_best(1);
  Create(spec);
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  const double acc[] = {0.5, 0.9, 0.6, 0.7, 0.65};
  for (int i = 0; i < 5; ++i) Report(w, *a, 10 * (i + 1), acc[i]);
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{20, 50}));  // best, latest
}

TEST_F(RetentionTest, ACheckpointAnExploitCopiesIsPinnedUntilCopied) {
  const std::string w = Register("a");
  std::vector<Assignment> members;
  ASSERT_NO_FATAL_FAILURE(ExploitTrial3sCheckpoint(w, &members));
  // By policy w/3/10 can go, but trial 0 has not reported since the
  // exploit: it stays.
  EXPECT_EQ(Steps(3), (std::vector<int64_t>{10, 13, 16}));
  // Trial 0 reports again (its worker copied the checkpoint): released.
  Report(w, members[0], 20, 0.9);
  EXPECT_EQ(Steps(3), (std::vector<int64_t>{13, 16}));
  // The trial's lineage and params follow the exploit.
  auto t0 = core_->GetTrial("w", 0);
  ASSERT_EQ(t0->lineage_size(), 1);
  EXPECT_EQ(t0->lineage(0).source_trial(), 3);
  EXPECT_EQ(t0->lineage(0).source_step(), 10);
}

// Retention state comes back from the store's checkpoint index after a
// restart: a pin of an exploit not yet copied holds, and once released the
// checkpoint written before the restart is reclaimed.
TEST_F(RetentionTest, CheckpointsFromBeforeARestartAreReclaimedAfterIt) {
  const std::string w = Register("a");
  std::vector<Assignment> members;
  ASSERT_NO_FATAL_FAILURE(ExploitTrial3sCheckpoint(w, &members));
  ASSERT_EQ(Steps(3), (std::vector<int64_t>{10, 13, 16}));

  Restart();
  core_->WaitIdle();
  // Still pinned: trial 0 has not copied it yet.
  EXPECT_EQ(Steps(3), (std::vector<int64_t>{10, 13, 16}));
  // Its worker (the same id, back after the restart) reports again.
  Report(w, members[0], 20, 0.9);
  EXPECT_EQ(Steps(3), (std::vector<int64_t>{13, 16}));
  // And the index forgets what was deleted.
  auto records = store_->ListCheckpoints("w");
  ASSERT_TRUE(records.ok());
  for (const auto& r : *records) EXPECT_NE(r.id, "w/3/10");
}

// An index entry newer than a trial's restore point (the checkpoint was
// indexed, its report was not saved) must not cost, after a restart, the
// checkpoint the trial resumes from. (Before, the restored policy took the
// stray entry for the latest and deleted the restore point: "checkpoint
// .../250 not found" when the trial resumed.)
TEST_F(RetentionTest, ATrialsRestorePointSurvivesAStrayNewerIndexEntry) {
  auto spec = WorkerSpec(1, 1);
  spec.mutable_checkpoints()->set_keep_best(1);
  Create(spec);
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  Report(w, *a, 10, 0.9);  // the best
  Report(w, *a, 20, 0.5);
  Report(w, *a, 30, 0.6);  // the restore point
  ASSERT_EQ(Steps(0), (std::vector<int64_t>{10, 30}));
  ASSERT_TRUE(checkpoints_->Write("w", 0, 40, {{"model.pt", "w"}}).ok());
  storage::CheckpointRecord stray;
  stray.study = "w";
  stray.trial = 0;
  stray.step = 40;
  stray.id = "w/0/40";
  stray.score = 0.1;
  ASSERT_TRUE(store_->PutCheckpoint(stray).ok());

  Restart();
  core_->WaitIdle();
  EXPECT_EQ(core_->GetTrial("w", 0)->checkpoint(), "w/0/30");
  const std::vector<int64_t> kept = Steps(0);
  EXPECT_NE(std::find(kept.begin(), kept.end(), 30), kept.end())
      << "the restore point was deleted";
}

// One command trial, keep_best 1.
v1::StudySpec CommandSpec() {
  auto spec = ParseStudySpec(R"(
name: w
objective: {metric: acc, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]
checkpoints: {keep_best: 1}
budget: {max_trials: 1, max_parallel_trials: 1}
trial: {command: {argv: [/usr/bin/python3, train.py]}})");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Security round two, M3: retention applied only to the trainer's
// <study>/<trial>/<step> ids; every path a command trial reported stayed
// on disk, without bound. keep_best and the latest now apply to them too,
// and a path that a kept step also names is never deleted.
TEST_F(RetentionTest, CommandTrialsPathsAreKeptAsTheTrainersAre) {
  Create(CommandSpec());
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  const auto dir = root_ / "w" / "0";
  std::filesystem::create_directories(dir / "run-30");
  std::ofstream(dir / "run-30" / "model.bin") << "weights";
  const double acc[] = {0.5, 0.9, 0.6, 0.7, 0.65};
  for (int i = 0; i < 5; ++i) {
    const int step = 10 * (i + 1);
    // Files, a directory, and one path every report names again.
    const std::string name =
        step == 30 ? "run-30" : absl::StrCat("ck-", step, ".pt");
    if (step != 30) std::ofstream(dir / name) << "weights";
    auto r = WorkerCoreTest::Report(w, *a, step, absl::StrCat("w/0/", name));
    (*r.mutable_metrics())["acc"] = acc[i];
    ASSERT_TRUE(core_->ReportProgress(r).ok());
  }
  core_->WaitIdle();
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    left.insert(e.path().filename().string());
  }
  // The best (step 20) and the latest (step 50).
  EXPECT_EQ(left, (std::set<std::string>{"ck-20.pt", "ck-50.pt"}));
  auto records = store_->ListCheckpoints("w");
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 2u);

  // One path reported at every step is the latest, always kept.
  for (int step = 60; step <= 90; step += 10) {
    std::ofstream(dir / "latest.pt") << "weights " << step;
    auto r = WorkerCoreTest::Report(w, *a, step, "w/0/latest.pt");
    (*r.mutable_metrics())["acc"] = 0.1;
    ASSERT_TRUE(core_->ReportProgress(r).ok());
  }
  core_->WaitIdle();
  EXPECT_TRUE(std::filesystem::exists(dir / "latest.pt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ck-20.pt"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ck-50.pt"));
}

// Security round two, M3: a user's checkpoints could fill the disk. Each
// owner's studies keep at most --max-checkpoint-bytes-per-owner; a report
// whose checkpoint does not fit is refused (nothing recorded), naming the
// quota, and what retention deletes is given back. It holds across a
// restart.
TEST_F(RetentionTest, AnOwnersCheckpointsStayWithinItsQuota) {
  Restart(/*checkpoint_quota=*/150);
  Create(CommandSpec());
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  const auto dir = root_ / "w" / "0";
  std::filesystem::create_directories(dir);
  auto report = [&](int step, double acc) {
    std::ofstream(dir / absl::StrCat("ck-", step, ".pt"))
        << std::string(60, 'x');
    auto r = WorkerCoreTest::Report(w, *a, step,
                                    absl::StrCat("w/0/ck-", step, ".pt"));
    (*r.mutable_metrics())["acc"] = acc;
    auto decided = core_->ReportProgress(r);
    core_->WaitIdle();  // retention's deletions
    return decided.status();
  };
  ASSERT_TRUE(report(10, 0.9).ok());  // 60 of 150
  ASSERT_TRUE(report(20, 0.5).ok());  // 120: the best and the latest
  // 180 would not fit: refused before anything is recorded.
  absl::Status refused = report(30, 0.4);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(IsCheckpointQuotaRefusal(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("--max-checkpoint-bytes-per-owner"));
  EXPECT_THAT(refused.message(), HasSubstr("w/0/ck-30.pt"));
  EXPECT_EQ(core_->GetTrial("w", 0)->last_step(), 20);
  // After a restart the quota counts what the index holds.
  Restart(/*checkpoint_quota=*/150);
  core_->WaitIdle();
  EXPECT_TRUE(IsCheckpointQuotaRefusal(report(30, 0.4)));
  // A bigger quota: the report goes through, and retention gives step 20's
  // 60 bytes back (keep the best, 10, and the latest, 30).
  Restart(/*checkpoint_quota=*/180);
  core_->WaitIdle();
  ASSERT_TRUE(report(30, 0.4).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "ck-20.pt"));
  ASSERT_TRUE(report(40, 0.3).ok()) << "step 20's bytes were given back";
}

// Security round two, finding 12: a trial stored with an empty lease token
// (a database from before lease tokens) skipped the token check: any
// caller naming its worker and attempt could report for it.
TEST_F(RetentionTest, AnAttemptWithoutALeaseTokenTakesNoReports) {
  Create(WorkerSpec(1, 1));
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  auto stored = store_->GetTrial("w", a->trial.number());
  ASSERT_TRUE(stored.ok());
  stored->clear_lease_token();
  ASSERT_TRUE(store_->PutTrial(*stored).ok());
  Restart();
  core_->WaitIdle();
  for (const std::string& token : {std::string(), std::string("forged")}) {
    auto report = WorkerCoreTest::Report(w, *a, 5);
    report.set_lease_token(token);
    auto r = core_->ReportProgress(report);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
        << "token '" << token << "': " << r.status();
  }
  EXPECT_LT(core_->GetTrial("w", a->trial.number())->last_step(), 5)
      << "a report without the token was taken";
}

// Security round two, M2: DeleteStudy left the study's checkpoints on disk,
// and the next study of that name (another user's) downloaded them.
TEST_F(RetentionTest, ADeletedStudysCheckpointsGoWithIt) {
  auto spec = WorkerSpec(1, 1);
  Create(spec);
  const std::string w = Register("a");
  auto a = Acquire(w);
  ASSERT_TRUE(a);
  Report(w, *a, 10, 0.9);
  ASSERT_EQ(Steps(0), (std::vector<int64_t>{10}));
  ASSERT_TRUE(core_->DeleteStudy("w").ok());
  // Gone from the study's name at once, and from the disk once purged.
  EXPECT_FALSE(checkpoints_->Verify("w/0/10").ok());
  EXPECT_FALSE(std::filesystem::exists(root_ / "w"));
  core_->WaitIdle();
  for (const auto& e : std::filesystem::directory_iterator(root_)) {
    EXPECT_EQ(e.path().filename().string().rfind(".retired-", 0),
              std::string::npos)
        << e.path() << " was not purged";
  }
  // A new study of the same name starts with no checkpoints.
  Create(spec);
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{}));
}

}  // namespace
}  // namespace dial::scheduler
