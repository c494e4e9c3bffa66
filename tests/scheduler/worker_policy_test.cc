// What the scheduler does with what a worker says it will and will not run
// (the third security review's findings 1, 7, 8 and 12): a study that
// requires isolation never runs on a worker that cannot isolate; a worker
// is neither offered nor preempted for a command its allow-list refuses; a
// refusal marks the worker unsuitable for the study and costs the trial no
// failure; a worker's CPU seconds are checked; what a worker says of itself
// and what notes hold cannot drive a terminal. SchedulerCore with a memory
// store and a fake clock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "scheduler/request_checks.h"
#include "tests/scheduler/sharing_fixture.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

v1::WorkerResources Isolated() {
  v1::WorkerResources r;
  r.mutable_isolation()->set_isolated(true);
  r.mutable_isolation()->set_method("per-attempt-user");
  return r;
}

v1::WorkerResources Commands(std::vector<std::string> globs) {
  v1::WorkerResources r;
  for (auto& g : globs) r.mutable_commands()->add_allowed(std::move(g));
  return r;
}

std::string CommandTrial(const std::string& argv0,
                         const std::string& resources = "") {
  return "trial: {command: {argv: [" + argv0 + "]}" +
         (resources.empty() ? "" : ", resources: " + resources) + "}\n";
}

TEST_F(SharingCoreTest, AStudyThatRequiresIsolationNeverRunsOnASharedWorker) {
  Start();
  Create(Spec("iso", Trial("{require_isolation: true}")), kAdmin);
  const std::string shared = Register("shared");
  EXPECT_EQ(Acquire(shared), "");
  EXPECT_THAT(Waiting("iso"), HasSubstr("cannot isolate"));
  // A study that does not require it still runs there.
  Create(Spec("any", Trial()), kAdmin);
  EXPECT_EQ(Acquire(shared), "any");
  const std::string isolated = RegisterWith("iso1", Isolated());
  EXPECT_EQ(Acquire(isolated), "iso");
}

TEST_F(SharingCoreTest, AWorkerIsNotOfferedACommandItsAllowListRefuses) {
  Start();
  Create(Spec("bob", CommandTrial("/opt/bob/miner")), kAdmin);
  const std::string python = RegisterWith("py", Commands({"/usr/bin/*"}));
  EXPECT_EQ(Acquire(python), "");
  EXPECT_THAT(Waiting("bob"),
              HasSubstr("--allow-command does not match /opt/bob/miner"));
  // '*' does not cross '/', as on the worker (FNM_PATHNAME).
  const std::string deep = RegisterWith("deep", Commands({"/opt/*"}));
  EXPECT_EQ(Acquire(deep), "");
  const std::string bobs = RegisterWith("bobs", Commands({"/opt/bob/*"}));
  EXPECT_EQ(Acquire(bobs), "bob");
  // The built-in trainer is always allowed.
  Create(Spec("trainer", Trial()), kAdmin);
  EXPECT_EQ(Acquire(python), "trainer");
}

// Finding 8: bob's priority-0 study, whose command the worker refuses,
// preempted carol's priority -5 trial, then burned 200 failed attempts.
TEST_F(SharingCoreTest, NoPreemptionForATrialTheWorkerWouldRefuse) {
  Start("", absl::Seconds(30), absl::ZeroDuration());
  Create(Spec("carol", "priority: -5\n" + Trial(), 1), kAdmin);
  const std::string w =
      RegisterWith("w", Commands({"/usr/bin/python3", "/bin/sh"}));
  auto low = AcquireOne(w);
  ASSERT_TRUE(low.has_value());
  ASSERT_EQ(low->trial.study(), "carol");
  Create(Spec("bob", CommandTrial("/opt/bob/miner"), 1), kAdmin);
  core_->Tick();
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  auto kept = Report(w, *low, 1);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->action(), v1::Decision::CONTINUE);
  // A study the worker accepts does preempt (the mechanism is live).
  Create(Spec("dave", CommandTrial("/bin/sh"), 1), kAdmin);
  core_->Tick();
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  auto paused = Report(w, *low, 2);
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ(paused->action(), v1::Decision::PAUSE);
  EXPECT_EQ(paused->reason(), "preempted by study dave");
}

TEST_F(SharingCoreTest, ARefusalCostsNoFailureAndTheWorkerIsNotAskedAgain) {
  Start("", absl::Seconds(30), absl::ZeroDuration());
  // No failure is allowed: a refusal counted as one would end the trial.
  Create(Spec("r", CommandTrial("/opt/r/train"), 1), kAdmin);
  const std::string w1 = Register("w1");  // an older worker: says nothing
  auto a = AcquireOne(w1);
  ASSERT_TRUE(a.has_value());
  v1::FinishTrialRequest refused = FinishRequest(w1, *a);
  refused.set_refused(true);
  refused.set_error("trial.command.argv[0]: /opt/r/train is not allowed here");
  ASSERT_TRUE(core_->FinishTrial(refused, kWorker).ok());
  auto trial = core_->GetTrial("r", a->trial.number());
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->state(), v1::PENDING);
  EXPECT_EQ(trial->failures(), 0);
  // Not offered to w1 again, and the study says why it waits.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Acquire(w1), "");
  EXPECT_THAT(Waiting("r"), HasSubstr("/opt/r/train is not allowed here"));
  // Nor does it preempt what w1 runs.
  Create(Spec("low", "priority: -5\n" + Trial(), 1), kAdmin);
  auto low = AcquireOne(w1);
  ASSERT_TRUE(low.has_value());
  EXPECT_EQ(low->trial.study(), "low");
  core_->Tick();
  clock_.Advance(absl::Seconds(2));
  core_->Tick();
  EXPECT_EQ(Report(w1, *low, 1)->action(), v1::Decision::CONTINUE);
  // Another worker runs it, as its next attempt.
  const std::string w2 = Register("w2");
  auto again = AcquireOne(w2);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->trial.study(), "r");
  EXPECT_EQ(again->trial.number(), a->trial.number());
  EXPECT_EQ(again->attempt, 2);
}

// Finding 7: NaN and -1e15 were taken, and an owner's totals read NaN.
// A value out of range is dropped (the finish itself, the trial's result,
// is kept); usage counts only a value that could be true.
TEST_F(SharingCoreTest, CpuSecondsAreFiniteNotNegativeAndWithinWallTimesCpus) {
  EXPECT_TRUE(CheckCpuSeconds(39.5, 10, 4).ok());
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), -1e15, -1.0, 1e6,
                     4 * (10 + kCpuSecondsSlack) + 1}) {
    const absl::Status s = CheckCpuSeconds(bad, 10, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("cpu_seconds")) << bad;
  }
  Start();
  Create(Spec("u", Trial(), 2), kAdmin);
  v1::WorkerResources r;
  r.set_cpus(4);
  const std::string w = RegisterWith("w", r);
  const std::string w2 = RegisterWith("w2", r);
  auto a = AcquireOne(w);
  auto b = AcquireOne(w2);
  ASSERT_TRUE(a.has_value() && b.has_value());
  clock_.Advance(absl::Seconds(10));
  for (auto [worker, assignment, cpu] :
       {std::tuple{w, *a, std::numeric_limits<double>::quiet_NaN()},
        std::tuple{w2, *b, -1e15}}) {
    v1::FinishTrialRequest f = FinishRequest(worker, assignment);
    (*f.mutable_final_metrics())["acc"] = 0.5;
    f.set_cpu_seconds(cpu);
    ASSERT_TRUE(core_->FinishTrial(f, kWorker).ok());
    EXPECT_EQ(core_->GetTrial("u", assignment.trial.number())->state(),
              v1::COMPLETED);
  }
  core_->WaitIdle();
  auto usage = core_->GetUsage("owner", absl::InfinitePast(), kAdmin);
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_EQ(usage->totals_size(), 1);
  EXPECT_EQ(usage->totals(0).cpu_seconds(), 0);  // not NaN, not -1e15
  EXPECT_EQ(usage->totals(0).attempts(), 2);
  // A true figure counts.
  auto c = AcquireOne(w);
  ASSERT_TRUE(c.has_value());
  clock_.Advance(absl::Seconds(10));
  v1::FinishTrialRequest f = FinishRequest(w, *c);
  (*f.mutable_final_metrics())["acc"] = 0.5;
  f.set_cpu_seconds(39.5);
  ASSERT_TRUE(core_->FinishTrial(f, kWorker).ok());
  core_->WaitIdle();
  usage = core_->GetUsage("owner", absl::InfinitePast(), kAdmin);
  ASSERT_TRUE(usage.ok());
  EXPECT_DOUBLE_EQ(usage->totals(0).cpu_seconds(), 39.5);
}

// Finding 12: a newline, OSC and CSI in the host went into the worker id,
// ListWorkers and the scheduler's log as a forged line.
TEST_F(SharingCoreTest, AHostOrWorkerTextThatCouldDriveATerminalIsRefused) {
  Start();
  v1::WorkerResources r;
  r.set_slots(1);
  for (const std::string host :
       {"w1\n2026-12-07T00:00:00.000 info dial-scheduler: forged",
        "w1\x1b]0;pwned\x07", "w1\x1b[2J",
        "w1\xc2\x9b"
        "2J",
        "w 1"}) {
    auto w = core_->RegisterWorker(host, r, kWorker);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(w.status().message(), HasSubstr("host"));
  }
  v1::WorkerResources gpu = r;
  gpu.add_gpus()->set_model("H100\x1b[2J");
  EXPECT_THAT(core_->RegisterWorker("w1", gpu, kWorker).status().message(),
              HasSubstr("resources.gpus[0].model"));
  v1::WorkerResources why = r;
  why.mutable_isolation()->set_reason(
      "no\xe2\x80\xae"
      "root");
  EXPECT_THAT(core_->RegisterWorker("w1", why, kWorker).status().message(),
              HasSubstr("resources.isolation.reason"));
  EXPECT_TRUE(core_->RegisterWorker("node-7.example:1", r, kWorker).ok());
}

TEST_F(SharingCoreTest, NotesRefuseC1ControlsAndBidirectionalOverrides) {
  Start();
  Create(Spec("n", Trial()), kAdmin);
  for (const std::string note : {"csi \xc2\x9b"
                                 "2J",
                                 "override \xe2\x80\xae"
                                 "gnp.exe",
                                 "isolate \xe2\x81\xa6x", "esc \x1b[2J"}) {
    auto set = core_->SetNote("n", std::nullopt, note, kAdmin);
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument) << note;
    EXPECT_THAT(set.status().message(), HasSubstr("note:"));
  }
  EXPECT_TRUE(
      core_->SetNote("n", std::nullopt, "two lines\n\tand é, 中文", kAdmin)
          .ok());
}

}  // namespace
}  // namespace dial::scheduler
