// StudyExecutor: one study's tasks in order and one at a time, studies in
// turns, and (through the core) a study whose searcher is slow holds up no
// other study's asks. Issue 33 measured that one suggestion thread let a
// Bayesian study's fits slow a random study's asks 270x (p99).
#include "scheduler/study_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "searchers/searcher.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::testing::ElementsAre;

TEST(StudyExecutorTest, AStudysTasksRunInOrderOneAtATime) {
  StudyExecutor executor(4);
  std::mutex mu;
  std::map<std::string, std::vector<int>> order;
  std::map<std::string, std::atomic<int>> inside;
  std::atomic<bool> overlapped{false};
  for (const std::string study : {"a", "b"}) inside[study] = 0;
  for (int i = 0; i < 200; ++i) {
    for (const std::string study : {"a", "b"}) {
      executor.Enqueue(study, {[&, study, i] {
                                 if (++inside[study] > 1) overlapped = true;
                                 {
                                   std::lock_guard<std::mutex> lock(mu);
                                   order[study].push_back(i);
                                 }
                                 --inside[study];
                               },
                               nullptr});
    }
  }
  executor.WaitIdle();
  EXPECT_FALSE(overlapped) << "two tasks of one study ran at once";
  for (const std::string study : {"a", "b"}) {
    ASSERT_EQ(order[study].size(), 200u);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(order[study][i], i);
  }
  EXPECT_EQ(executor.size(), 0u);
}

// One thread: study b's task runs after a's running task, not after a's
// whole queue.
TEST(StudyExecutorTest, StudiesTakeTurns) {
  StudyExecutor executor(1);
  absl::Notification started, release;
  std::mutex mu;
  std::vector<std::string> ran;
  auto record = [&](std::string name) {
    return StudyExecutor::Task{[&, name] {
                                 std::lock_guard<std::mutex> lock(mu);
                                 ran.push_back(name);
                               },
                               nullptr};
  };
  executor.Enqueue("a", {[&] {
                           started.Notify();
                           release.WaitForNotification();
                           std::lock_guard<std::mutex> lock(mu);
                           ran.push_back("a1");
                         },
                         nullptr});
  started.WaitForNotification();
  executor.Enqueue("a", record("a2"));
  executor.Enqueue("a", record("a3"));
  executor.Enqueue("b", record("b1"));
  executor.Enqueue("c", record("c1"));
  EXPECT_EQ(executor.size(), 4u);
  release.Notify();
  executor.WaitIdle();
  EXPECT_THAT(ran, ElementsAre("a1", "b1", "c1", "a2", "a3"));
}

TEST(StudyExecutorTest, StopCancelsWhatIsQueuedAndLetsTheRunningTaskEnd) {
  StudyExecutor executor(1);
  absl::Notification started, release;
  std::atomic<bool> first_done{false}, second_ran{false};
  std::atomic<int> cancelled{0};
  executor.Enqueue("a", {[&] {
                           started.Notify();
                           release.WaitForNotification();
                           first_done = true;
                         },
                         [&] { ++cancelled; }});
  started.WaitForNotification();
  executor.Enqueue("a", {[&] { second_ran = true; }, [&] { ++cancelled; }});
  executor.Enqueue("b", {[&] { second_ran = true; }, [&] { ++cancelled; }});
  std::thread stopper([&] { executor.Stop(); });
  // Once Stop has begun, a task is refused; the probes queued before that
  // are cancelled with the rest.
  std::atomic<int> probes{0};
  int queued_probes = 0;
  for (int i = 0; i < 10000000; ++i) {
    if (!executor.Enqueue("probe",
                          {[&] { second_ran = true; }, [&] { ++probes; }})) {
      break;
    }
    ++queued_probes;
    std::this_thread::yield();
  }
  release.Notify();
  stopper.join();
  EXPECT_TRUE(first_done);
  EXPECT_FALSE(second_ran);
  EXPECT_EQ(cancelled, 2);
  EXPECT_EQ(probes, queued_probes);
  EXPECT_FALSE(executor.Enqueue("a", {[&] { second_ran = true; }, nullptr}));
  EXPECT_EQ(executor.size(), 0u);
}

// A claimed turn runs on the caller's thread; the study's work queued
// meanwhile waits for it, then runs on the pool, in order.
TEST(StudyExecutorTest, AClaimedTurnRunsHereAndWhatIsQueuedMeanwhileWaits) {
  StudyExecutor executor(2);
  ASSERT_TRUE(executor.Claim("a"));
  EXPECT_FALSE(executor.Claim("a"));  // one turn at a time
  EXPECT_FALSE(executor.Idle());
  std::mutex mu;
  std::vector<std::string> ran;
  auto record = [&](std::string name) {
    std::lock_guard<std::mutex> lock(mu);
    ran.push_back(name);
  };
  const std::thread::id caller = std::this_thread::get_id();
  absl::Notification b_ran;
  executor.RunClaimed("a", [&] {
    executor.Enqueue("a", {[&] { record("a2"); }, nullptr});
    executor.Enqueue("b", {[&] {
                             record("b1");
                             b_ran.Notify();
                           },
                           nullptr});
    // b runs on the pool meanwhile; a's own task waits for this one.
    EXPECT_TRUE(b_ran.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_EQ(executor.size(), 1u);
    record(std::this_thread::get_id() == caller ? "a1 on the caller"
                                                : "a1 elsewhere");
  });
  executor.WaitIdle();
  EXPECT_THAT(ran, ElementsAre("b1", "a1 on the caller", "a2"));
  // A study with work queued or running is not claimed.
  absl::Notification started, release;
  executor.Enqueue("c", {[&] {
                           started.Notify();
                           release.WaitForNotification();
                         },
                         nullptr});
  started.WaitForNotification();
  EXPECT_FALSE(executor.Claim("c"));
  EXPECT_TRUE(executor.Claim("d"));
  executor.RunClaimed("d", [] {});
  release.Notify();
  executor.WaitIdle();
}

// Stop during a claimed turn: what was queued behind it is cancelled, not
// lost, and no new turn is claimed.
TEST(StudyExecutorTest, StopDuringAClaimedTurnCancelsWhatWaitsForIt) {
  StudyExecutor executor(1);
  ASSERT_TRUE(executor.Claim("a"));
  std::atomic<int> cancelled{0};
  bool ran = false;
  executor.RunClaimed("a", [&] {
    executor.Enqueue("a", {[&] { ran = true; }, [&] { ++cancelled; }});
    executor.Stop();
  });
  EXPECT_FALSE(ran);
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(executor.size(), 0u);
  EXPECT_TRUE(executor.Idle());
  EXPECT_FALSE(executor.Claim("b"));
}

v1::StudySpec Spec(const std::string& name,
                   const std::string& searcher = "random: {seed: 3}") {
  auto spec =
      ParseStudySpec("name: " + name +
                     "\nobjective: {metric: loss, goal: MINIMIZE}\n"
                     "search_space:\n  - {name: x, float: {min: -5, max: 5}}\n"
                     "budget: {max_trials: 50}\nsearcher: {" +
                     searcher + "}\n");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Before: one suggestion thread, so "quick"'s asks waited for "slow"'s fit.
TEST(StudyExecutorTest, AStudysSlowFitHoldsUpNoOtherStudysAsks) {
  absl::Notification release;
  auto store = storage::MemoryStudyStore::Create();
  SchedulerCoreOptions options;
  options.store = store.get();
  options.suggestion_threads = 2;
  options.searcher_factory = [&](const v1::StudySpec& spec)
      -> absl::StatusOr<std::unique_ptr<searchers::Searcher>> {
    if (spec.name() == "slow") return std::make_unique<GatedSearcher>(&release);
    return searchers::CreateSearcher(spec);
  };
  auto core = SchedulerCore::Create(options);
  ASSERT_TRUE(core.ok());
  ASSERT_TRUE((*core)->CreateStudy(Spec("slow", "bayesian: {}")).ok());
  ASSERT_TRUE((*core)->CreateStudy(Spec("quick")).ok());
  std::promise<absl::StatusOr<Suggestion>> stuck;
  (*core)->SuggestTrialsAsync(
      "slow", 1, "a",
      [&](absl::StatusOr<Suggestion> r) { stuck.set_value(std::move(r)); });
  // While "slow" fits, "quick" is asked and told ten times.
  auto quick = std::async(std::launch::async, [&] {
    for (int i = 0; i < 10; ++i) {
      auto asked = (*core)->SuggestTrials("quick", 1, "b");
      if (!asked.ok() || asked->trials.size() != 1) return false;
      searchers::Metrics m;
      m["loss"] = i;
      if (!(*core)
               ->CompleteTrial("quick", asked->trials[0].number(), m, "")
               .ok()) {
        return false;
      }
    }
    return true;
  });
  ASSERT_EQ(quick.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "quick's asks waited behind slow's fit";
  EXPECT_TRUE(quick.get());
  auto future = stuck.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);
  release.Notify();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(30)),
            std::future_status::ready);
  EXPECT_TRUE(future.get().ok());
}

}  // namespace
}  // namespace dial::scheduler
