// Sharing one scheduler, through SchedulerCore's worker side (memory
// store, fake clock): worker labels and study selectors, why a study
// waits, priorities (who may set them, and that they go first), quotas and
// fair share between owners at dispatch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "scheduler/rpc_metrics.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/sharing_fixture.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

TEST_F(SharingCoreTest, ATrialRunsOnlyOnAWorkerItsSelectorMatches) {
  Start();
  Create(Spec("eu", Trial("{selector: {zone: [eu]}}")), kAdmin);
  const std::string us = Register("us1", {{"zone", "us"}});
  const std::string eu = Register("eu1", {{"zone", "eu"}});
  EXPECT_EQ(Acquire(us), "");
  EXPECT_EQ(Acquire(eu), "eu");
  // Every worker has its host as a label.
  Create(Spec("pinned", Trial("{selector: {host: [us1]}}")), kAdmin);
  EXPECT_EQ(Acquire(eu), "eu");
  EXPECT_EQ(Acquire(us), "pinned");
}

// Parked calls of workers alike but for their host are offered a trial
// once per shape; a study pinned to a host must still reach its worker
// when an older call of the same shape got nothing.
TEST_F(SharingCoreTest, AParkedWorkerPinnedByHostGetsItsTrial) {
  Start();
  const std::string a = Register("a1");
  const std::string b = Register("b1");
  std::map<std::string, std::optional<Assignment>> got;
  for (const std::string& w : {a, b}) {
    core_->AcquireTrial(
        w, 0, absl::Seconds(30), [] { return true; },
        [&got, w](absl::StatusOr<std::optional<Assignment>> r) {
          ASSERT_TRUE(r.ok()) << r.status();
          got[w] = *r;
        },
        kWorker);
  }
  core_->WaitIdle();
  EXPECT_TRUE(got.empty()) << "no study yet: both wait";
  Create(Spec("pinned", Trial("{selector: {host: [b1]}}"), 1), kAdmin);
  ASSERT_EQ(got.count(b), 1u) << "b1's call was skipped behind a1's";
  ASSERT_TRUE(got.at(b).has_value());
  EXPECT_EQ(got.at(b)->trial.study(), "pinned");
  EXPECT_EQ(got.count(a), 0u);
  // a1's call ends empty when its wait is over (before `got` goes).
  clock_.Advance(absl::Seconds(31));
  core_->Tick();
  core_->WaitIdle();
  ASSERT_EQ(got.count(a), 1u);
  EXPECT_FALSE(got.at(a).has_value());
}

TEST_F(SharingCoreTest, AStudyNoWorkerMatchesSaysWhyItWaits) {
  Start();
  Create(Spec("a100", Trial("{selector: {gpu.model: [A100, H100]}}")), kAdmin);
  EXPECT_EQ(Waiting("a100"), "waiting: no worker is registered");
  Register("t4", {{"gpu.model", "T4"}});
  EXPECT_EQ(Waiting("a100"),
            "waiting: no worker matches gpu.model in [A100, H100]");
  auto listed = core_->ListStudies(auth::Anonymous());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->studies.size(), 1u);
  EXPECT_EQ(listed->studies[0].waiting(), Waiting("a100"));
  Register("h100", {{"gpu.model", "H100"}});
  EXPECT_EQ(Waiting("a100"), "");
  Create(Spec("big", Trial("{gpus: 4}")), kAdmin);
  EXPECT_EQ(Waiting("big"), "waiting: no matching worker has 4 GPUs");
}

TEST_F(SharingCoreTest, BadLabelsAndSelectorsAreRefusedNamingTheField) {
  Start();
  v1::WorkerResources r;
  r.set_slots(1);
  (*r.mutable_labels())["bad key"] = "x";
  auto refused = core_->RegisterWorker("h", r, kWorker);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("resources.labels.bad key"));
  for (const auto& [selector, field] :
       std::vector<std::pair<std::string, std::string>>{
           {"{selector: {zone: []}}", "trial.resources.selector.zone"},
           {"{selector: {zone: [1]}}", "trial.resources.selector.zone[0]"},
           {"{selector: {\"-x\": [a]}}", "trial.resources.selector.-x"},
       }) {
    auto created = core_->CreateStudy(Spec("s", Trial(selector)), kAdmin);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument)
        << selector;
    EXPECT_THAT(std::string(created.status().message()), HasSubstr(field));
  }
  auto out_of_range = core_->CreateStudy(Spec("s", "priority: 101\n"), kAdmin);
  EXPECT_THAT(std::string(out_of_range.status().message()),
              HasSubstr("priority: must be between -100 and 100"));
}

TEST_F(SharingCoreTest, AnOwnerSetsAtMostTheirQuotasPriority) {
  Start("ann max_priority=10\n");
  auto high = core_->CreateStudy(Spec("b", "priority: 5\n"), User("bo"));
  EXPECT_EQ(high.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(high.status().message()),
              HasSubstr("'bo' may set at most 0"));
  EXPECT_TRUE(core_->CreateStudy(Spec("b", "priority: -5\n"), User("bo")).ok());
  EXPECT_TRUE(
      core_->CreateStudy(Spec("a", "priority: 10\n"), User("ann")).ok());
  EXPECT_TRUE(core_->CreateStudy(Spec("r", "priority: 90\n"), kAdmin).ok());
  EXPECT_EQ(core_->UpdateStudy("a", StudyChange{0, 0, 11}, User("ann"))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  auto lowered = core_->UpdateStudy("a", StudyChange{0, 0, 3}, User("ann"));
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(lowered->spec().priority(), 3);
  EXPECT_EQ(core_->GetStudy("a")->spec().priority(), 3);
}

TEST_F(SharingCoreTest, HigherPriorityTrialsStartFirstAndAnUpdateReorders) {
  Start();
  Create(Spec("low", Trial()), kAdmin);
  Create(Spec("high", "priority: 5\n" + Trial()), kAdmin);
  const std::string w = Register("w");
  EXPECT_EQ(Acquire(w), "high");
  EXPECT_EQ(Acquire(w), "high");
  ASSERT_TRUE(core_->UpdateStudy("low", StudyChange{0, 0, 6}, kAdmin).ok());
  EXPECT_EQ(Acquire(w), "low");
}

TEST_F(SharingCoreTest, AnOwnerAtMaxSlotsGetsNoMoreTrials) {
  Start("default max_slots=2\n");
  Create(Spec("a", Trial()), User("ann"));
  std::vector<std::string> workers;
  for (int i = 0; i < 3; ++i)
    workers.push_back(Register("w" + std::to_string(i)));
  EXPECT_EQ(Acquire(workers[0]), "a");
  EXPECT_EQ(Acquire(workers[1]), "a");
  EXPECT_EQ(Acquire(workers[2]), "");
  EXPECT_EQ(Waiting("a"),
            "waiting: owner 'ann' runs 2 trials, its quota's max_slots");
  // Another owner is not held back by ann's quota.
  Create(Spec("b", Trial()), User("bo"));
  EXPECT_EQ(Acquire(workers[2]), "b");
}

TEST_F(SharingCoreTest, EqualOwnersShareTheWorkersAndWeightsTilt) {
  Start("ann weight=3\n");
  Create(Spec("a", Trial()), User("ann"));
  Create(Spec("b", Trial()), User("bo"));
  std::map<std::string, int> got;
  for (int i = 0; i < 8; ++i) ++got[Acquire(Register("w" + std::to_string(i)))];
  // ann weighs 3: 6 of 8 slots to her, 2 to bo.
  EXPECT_EQ(got["a"], 6);
  EXPECT_EQ(got["b"], 2);
}

// A priority-10 study arrives while a priority-0 trial holds the only
// slot: once that attempt has run --preempt-min-run-s, its next report
// answers PAUSE, it goes back to the queue to resume from that report's
// checkpoint (recorded, not a failure), and the slot goes to the new study.
// Fair share orders dispatch only, unless --fair-share-preempt: then an
// owner below its share takes a slot from one above it at equal priority,
// through the same pause at a report, and only until the shares meet.
TEST_F(SharingCoreTest, FairShareTakesSlotsBackOnlyWithFairSharePreempt) {
  for (const bool preempt : {false, true}) {
    SCOPED_TRACE(preempt ? "--fair-share-preempt" : "without");
    core_.reset();  // a fresh scheduler on a fresh store
    store_ = storage::MemoryStudyStore::Create();
    fair_share_preempt_ = preempt;
    Start("", absl::Seconds(30), absl::Seconds(60));
    Create(Spec("ann-study", Trial(), 2), User("ann"));
    const std::string w1 = Register("w1"), w2 = Register("w2");
    auto a1 = AcquireOne(w1), a2 = AcquireOne(w2);
    ASSERT_TRUE(a1.has_value() && a2.has_value());
    Create(Spec("bo-study", Trial(), 2), User("bo"));
    EXPECT_EQ(Waiting("bo-study"), "");  // only busy workers hold it back
    core_->Tick();
    clock_.Advance(absl::Seconds(61));
    core_->Tick();
    // Found by the fairness bench: later ticks, before the marked trial
    // pauses, marked more for a slot already on its way (63 preemptions
    // where 21 moved the shares).
    clock_.Advance(absl::Seconds(2));
    core_->Tick();
    auto r1 = Report(w1, *a1, 1), r2 = Report(w2, *a2, 1);
    ASSERT_TRUE(r1.ok() && r2.ok());
    std::vector<v1::Decision::Action> actions = {r1->action(), r2->action()};
    std::sort(actions.begin(), actions.end());
    if (!preempt) {
      EXPECT_THAT(actions, ::testing::Each(v1::Decision::CONTINUE));
      continue;
    }
    // 2:0 becomes 1:1, not 0:2: one trial pauses, for bo's study.
    EXPECT_THAT(actions, ::testing::UnorderedElementsAre(v1::Decision::CONTINUE,
                                                         v1::Decision::PAUSE));
    const bool first = r1->action() == v1::Decision::PAUSE;
    EXPECT_EQ((first ? r1 : r2)->reason(), "preempted by study bo-study");
    const std::string freed = first ? w1 : w2;
    ASSERT_TRUE(
        core_->FinishTrial(FinishRequest(freed, first ? *a1 : *a2), kWorker)
            .ok());
    EXPECT_EQ(Acquire(freed), "bo-study");
    // At 1:1 nothing more moves, whoever waits.
    clock_.Advance(absl::Seconds(61));
    core_->Tick();
    clock_.Advance(absl::Seconds(2));
    core_->Tick();
    auto again = Report(first ? w2 : w1, first ? *a2 : *a1, 2);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->action(), v1::Decision::CONTINUE);
  }
}

TEST_F(SharingCoreTest, AHigherPriorityStudyPreemptsAtTheNextReport) {
  Start("", absl::Seconds(30), absl::Seconds(60));
  Create(Spec("low", Trial(), 1), kAdmin);
  const std::string w = Register("w");
  auto low = AcquireOne(w);
  ASSERT_TRUE(low.has_value());
  ASSERT_EQ(low->trial.study(), "low");
  Create(Spec("high", "priority: 10\n" + Trial(), 1), kAdmin);
  core_->Tick();
  clock_.Advance(absl::Seconds(30));
  core_->Tick();  // unplaced for 30 s, but the attempt is too young
  EXPECT_EQ(Report(w, *low, 1)->action(), v1::Decision::CONTINUE);
  clock_.Advance(absl::Seconds(31));
  core_->Tick();
  auto paused = Report(w, *low, 2);
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ(paused->action(), v1::Decision::PAUSE);
  EXPECT_EQ(paused->reason(), "preempted by study high");
  auto trial = core_->GetTrial("low", low->trial.number());
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->state(), v1::PENDING);
  EXPECT_EQ(trial->failures(), 0);
  EXPECT_EQ(trial->checkpoint_step(), 2);
  ASSERT_EQ(trial->preemptions_size(), 1);
  EXPECT_EQ(trial->preemptions(0).by_study(), "high");
  EXPECT_EQ(trial->preemptions(0).attempt(), 1);
  EXPECT_EQ(trial->preemptions(0).resume_step(), 2);
  EXPECT_FALSE(trial->preemptions(0).forced());
  // The worker's FinishTrial for the paused attempt is taken.
  const v1::FinishTrialRequest finish = FinishRequest(w, *low);
  EXPECT_TRUE(core_->FinishTrial(finish, kWorker).ok());
  // The slot goes to the higher priority; the preempted trial waits.
  EXPECT_EQ(Acquire(w), "high");
  EXPECT_EQ(core_->GetTrial("low", low->trial.number())->state(), v1::PENDING);
  // Once a slot frees, it resumes from its checkpoint, as attempt 2.
  const std::string w2 = Register("w2");
  auto resumed = AcquireOne(w2);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->trial.number(), low->trial.number());
  EXPECT_EQ(resumed->attempt, 2);
  EXPECT_EQ(resumed->start_step, 2);
}

TEST_F(SharingCoreTest, APreemptedTrialThatNeverReportsIsFencedAfterTheGrace) {
  Start("", absl::Seconds(5), absl::ZeroDuration());
  const std::string w = Register("w");
  auto low = StarvedBehind(w);  // marked; grace until +5 s
  ASSERT_TRUE(low.has_value());
  ASSERT_TRUE(core_
                  ->Heartbeat(
                      [&] {
                        v1::HeartbeatRequest h;
                        h.set_worker_id(w);
                        return h;
                      }(),
                      kWorker)
                  .ok());
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  auto trial = core_->GetTrial("low", low->trial.number());
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->state(), v1::PENDING);
  ASSERT_EQ(trial->preemptions_size(), 1);
  EXPECT_TRUE(trial->preemptions(0).forced());
  EXPECT_EQ(trial->failures(), 0);
  // The old attempt is fenced: its worker learns at its next report.
  EXPECT_EQ(Report(w, *low, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Each ended attempt of a worker trial leaves a usage record: slot- and
// GPU-seconds from its wall time, CPU seconds from its worker; GetUsage sums
// them by owner or study, a user sees only their own, and /metrics counts
// them by owner with the label count bounded.
TEST_F(SharingCoreTest, EndedAttemptsLeaveUsageRecordsThatGetUsageSums) {
  std::vector<v1::UsageRecord> seen;
  on_usage_ = [&](const v1::UsageRecord& r) { seen.push_back(r); };
  Start("", absl::Seconds(30), absl::ZeroDuration());
  Create(Spec("a", Trial("{gpus: 2}"), 1), User("ann"));
  Create(Spec("b", Trial(), 1), User("bo"));
  const std::string w = Register("w", {}, 2);
  const std::string w2 = Register("w2");
  auto a = AcquireOne(w, 2);
  auto b = AcquireOne(w2);
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_EQ(a->trial.study(), "a");
  clock_.Advance(absl::Seconds(100));
  v1::FinishTrialRequest finish = FinishRequest(w, *a);
  (*finish.mutable_final_metrics())["acc"] = 0.5;
  finish.set_cpu_seconds(42);
  ASSERT_TRUE(core_->FinishTrial(finish, kWorker).ok());
  clock_.Advance(absl::Seconds(50));
  // b's attempt ends by a STOP decision (its study is stopped).
  ASSERT_TRUE(core_->StopStudy("b", User("bo")).ok());
  EXPECT_EQ(Report(w2, *b, 1)->action(), v1::Decision::STOP);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].outcome(), "COMPLETED");
  EXPECT_EQ(seen[1].outcome(), "STOPPED");

  auto by_owner = core_->GetUsage("owner", absl::InfinitePast(), kAdmin);
  ASSERT_TRUE(by_owner.ok()) << by_owner.status();
  ASSERT_EQ(by_owner->totals_size(), 2);
  EXPECT_EQ(by_owner->totals(0).key(), "bo");  // most slot-seconds first
  EXPECT_DOUBLE_EQ(by_owner->totals(0).slot_seconds(), 150);
  EXPECT_DOUBLE_EQ(by_owner->totals(0).gpu_seconds(), 0);
  EXPECT_EQ(by_owner->totals(1).key(), "ann");
  EXPECT_DOUBLE_EQ(by_owner->totals(1).slot_seconds(), 100);
  EXPECT_DOUBLE_EQ(by_owner->totals(1).gpu_seconds(), 200);
  EXPECT_DOUBLE_EQ(by_owner->totals(1).cpu_seconds(), 42);
  EXPECT_EQ(by_owner->totals(1).attempts(), 1);
  // A user sees their own; a window leaves out what ended before it.
  auto own = core_->GetUsage("study", absl::InfinitePast(), User("ann"));
  ASSERT_TRUE(own.ok());
  ASSERT_EQ(own->totals_size(), 1);
  EXPECT_EQ(own->totals(0).key(), "a");
  EXPECT_EQ(own->totals(0).owner(), "ann");
  auto recent =
      core_->GetUsage("owner", clock_.Now() - absl::Seconds(10), kAdmin);
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->totals_size(), 1);
  EXPECT_EQ(recent->totals(0).key(), "bo");
  EXPECT_EQ(
      core_->GetUsage("owner", absl::InfinitePast(), kWorker).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      core_->GetUsage("zone", absl::InfinitePast(), kAdmin).status().code(),
      absl::StatusCode::kInvalidArgument);
  // The records are the store's.
  EXPECT_EQ(store_->ListUsage(0)->size(), 2u);
}

TEST_F(SharingCoreTest, APreemptedAttemptIsRecordedAsPreempted) {
  Start("", absl::Seconds(30), absl::ZeroDuration());
  const std::string w = Register("w");
  auto low = StarvedBehind(w);
  ASSERT_TRUE(low.has_value());
  EXPECT_EQ(Report(w, *low, 1)->action(), v1::Decision::PAUSE);
  auto records = store_->ListUsage(0);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].outcome(), "PREEMPTED");
  EXPECT_DOUBLE_EQ((*records)[0].slot_seconds(), 2);
}

// Regression (found by bench/fairness): a trial preempted at a report
// after its last checkpoint resumes from that checkpoint and reports the
// same step again; the new attempt must get its own answer, not the
// earlier attempt's PAUSE (which left it RUNNING with nobody running it).
TEST_F(SharingCoreTest, AResumedAttemptReportingThePausedStepAgainGoesOn) {
  Start("", absl::Seconds(30), absl::ZeroDuration());
  Create(Spec("low", Trial(), 1), kAdmin);
  const std::string w = Register("w");
  auto low = AcquireOne(w);
  ASSERT_TRUE(low.has_value());
  ASSERT_EQ(Report(w, *low, 1)->action(), v1::Decision::CONTINUE);
  Create(Spec("high", "priority: 1\n" + Trial(), 1), kAdmin);
  core_->Tick();
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  // Paused at step 2, whose report carries no checkpoint: it resumes from 1.
  EXPECT_EQ(Report(w, *low, 2, false)->action(), v1::Decision::PAUSE);
  EXPECT_EQ(Acquire(w), "high");
  const std::string w2 = Register("w2");
  auto resumed = AcquireOne(w2);
  ASSERT_TRUE(resumed.has_value());
  ASSERT_EQ(resumed->trial.number(), low->trial.number());
  EXPECT_EQ(resumed->start_step, 1);
  auto again = Report(w2, *resumed, 2, false);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->action(), v1::Decision::CONTINUE);
  EXPECT_EQ(core_->GetTrial("low", low->trial.number())->state(), v1::RUNNING);
  EXPECT_EQ(Report(w2, *resumed, 3)->action(), v1::Decision::CONTINUE);
}

TEST(UsageCountersTest, OwnersPastTheBoundShareOther) {
  metrics::Registry registry;
  auto count = NewUsageCounters(&registry, 2);
  for (const char* owner : {"ann", "bo", "cy", "dee", "ann"}) {
    v1::UsageRecord r;
    r.set_owner(owner);
    r.set_slot_seconds(10);
    r.set_gpu_seconds(1);
    count(r);
  }
  const std::string text = registry.Render();
  EXPECT_THAT(text,
              HasSubstr("dial_usage_slot_seconds_total{owner=\"ann\"} 20"));
  EXPECT_THAT(text,
              HasSubstr("dial_usage_slot_seconds_total{owner=\"bo\"} 10"));
  EXPECT_THAT(text,
              HasSubstr("dial_usage_slot_seconds_total{owner=\"other\"} 20"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("owner=\"cy\"")));
  EXPECT_THAT(text, HasSubstr("dial_usage_gpu_seconds_total{owner=\"ann\"} 2"));
}

}  // namespace
}  // namespace dial::scheduler
