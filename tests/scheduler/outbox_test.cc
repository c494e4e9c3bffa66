// No callback runs under the core's lock: watchers, parked long polls and
// ask/tell answers are called after it is released, and a watcher's
// snapshot comes before every later event. A watcher or callback that
// blocks or calls back into the core would hang these tests (bounded by
// future timeouts) if the lock were held.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "storage/memory_study_store.h"

namespace dial::scheduler {
namespace {

constexpr auto kBound = std::chrono::seconds(20);

v1::StudySpec Spec(const std::string& extra) {
  auto spec = ParseStudySpec(
      "name: s\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: -5, max: 5}}]\n" +
      extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

searchers::Metrics Loss(double v) {
  searchers::Metrics m;
  m["loss"] = v;
  return m;
}

class OutboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = storage::MemoryStudyStore::Create();
    SchedulerCoreOptions options;
    options.store = store_.get();
    options.clock = &clock_;
    options.tick = absl::ZeroDuration();
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  // An ask/tell study with trials 0 and 1 RUNNING, and a watcher that
  // blocks on its first event after the snapshot until `release_`; then
  // trial 0's report, on a thread of its own, delivers that event.
  // Returns once the watcher is blocked: that thread holds the delivery.
  void BlockDeliveryInAWatcher() {
    ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 3}")).ok());
    auto asked = core_->SuggestTrials("s", 2, "c");
    ASSERT_TRUE(asked.ok() && asked->trials.size() == 2) << asked.status();
    auto id = core_->Watch("s", [this](const v1::StudyEvent& e) {
      if (e.kind() == v1::StudyEvent::SNAPSHOT || entered_.HasBeenNotified()) {
        return;
      }
      entered_.Notify();
      release_.WaitForNotification();
    });
    ASSERT_TRUE(id.ok());
    blocking_watch_ = *id;
    delivering_ = std::async(std::launch::async, [this] {
      return core_->ReportIntermediate("s", 0, 1, Loss(1), "").status();
    });
    ASSERT_TRUE(entered_.WaitForNotificationWithTimeout(absl::Seconds(20)));
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (delivering_.valid()) delivering_.wait();
    if (blocking_watch_) core_->Unwatch(blocking_watch_);
  }

  FakeClock clock_;
  std::unique_ptr<storage::StudyStore> store_;
  std::unique_ptr<SchedulerCore> core_;
  absl::Notification entered_, release_;
  std::future<absl::Status> delivering_;
  int64_t blocking_watch_ = 0;
};

// A watcher that blocks holds up only the thread delivering to it: other
// calls, reads and writes, go on meanwhile.
TEST_F(OutboxTest, AWatcherThatBlocksHoldsNoLock) {
  ASSERT_NO_FATAL_FAILURE(BlockDeliveryInAWatcher());

  // Meanwhile the core answers everything else.
  auto others = std::async(std::launch::async, [&] {
    EXPECT_TRUE(core_->GetStudy("s").ok());
    EXPECT_TRUE(core_->ReportIntermediate("s", 1, 1, Loss(2), "").ok());
    EXPECT_TRUE(core_->CompleteTrial("s", 1, Loss(2), "").ok());
    auto trial = core_->GetTrial("s", 1);
    return trial.ok() ? trial->state() : v1::TRIAL_STATE_UNSPECIFIED;
  });
  ASSERT_EQ(others.wait_for(kBound), std::future_status::ready)
      << "a call waited for the blocked watcher: the lock was held";
  EXPECT_EQ(others.get(), v1::COMPLETED);
  EXPECT_EQ(delivering_.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);

  release_.Notify();
  ASSERT_EQ(delivering_.wait_for(kBound), std::future_status::ready);
  EXPECT_TRUE(delivering_.get().ok());
}

// Events queued while another thread is delivering reach a new watcher
// after its snapshot, in order, and the snapshot shows the state before
// them.
TEST_F(OutboxTest, TheSnapshotComesBeforeEveryLaterEvent) {
  ASSERT_NO_FATAL_FAILURE(BlockDeliveryInAWatcher());

  // The delivering thread is held: everything below is queued behind it.
  absl::Mutex mu;
  std::vector<v1::StudyEvent> seen;
  auto second = core_->Watch("s", [&](const v1::StudyEvent& e) {
    absl::MutexLock lock(&mu);
    seen.push_back(e);
  });
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(core_->CompleteTrial("s", 1, Loss(0.5), "").ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(seen.empty()) << "delivered past the blocked watcher";
  }
  release_.Notify();
  ASSERT_EQ(delivering_.wait_for(kBound), std::future_status::ready);
  ASSERT_TRUE(delivering_.get().ok());

  absl::MutexLock lock(&mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind(), v1::StudyEvent::SNAPSHOT);
  EXPECT_EQ(seen[0].study().trial_counts().count("COMPLETED"), 0u);
  EXPECT_EQ(seen[1].kind(), v1::StudyEvent::TRIAL_FINISHED);
  EXPECT_EQ(seen[1].trial().number(), 1);
  EXPECT_EQ(seen[1].study().trial_counts().at("COMPLETED"), 1);
  core_->Unwatch(*second);
}

// A parked long poll is answered after the lock is released: its callback
// may call the core again (absl::Mutex is not reentrant).
TEST_F(OutboxTest, AParkedLongPollsAnswerMayCallTheCore) {
  v1::WorkerResources resources;
  resources.set_slots(1);
  auto worker = core_->RegisterWorker("h", resources);
  ASSERT_TRUE(worker.ok());
  std::promise<std::pair<bool, int32_t>> answered;
  core_->AcquireTrial(
      worker->worker_id(), 0, absl::Seconds(30), [] { return true; },
      [&](Reply<std::optional<Assignment>> r) {
        // Re-entering the core here deadlocks if the lock is held.
        auto study = core_->GetStudy("s");
        answered.set_value(
            {r.ok() && r->has_value(),
             study.ok() ? study->trial_counts().at("RUNNING") : -1});
      });
  // The study's first PENDING trial is handed to the parked call by the
  // suggestion thread.
  auto spec = ParseStudySpec(
      "name: s\nobjective: {metric: acc, goal: MAXIMIZE}\n"
      "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
      "budget: {max_trials: 1}\ntrial: {trainer: {dataset: synthetic}}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto created = core_->CreateStudy(*spec);
  ASSERT_TRUE(created.ok()) << created.status();
  auto result = answered.get_future();
  ASSERT_EQ(result.wait_for(kBound), std::future_status::ready);
  auto [assigned, running] = result.get();
  EXPECT_TRUE(assigned);
  EXPECT_EQ(running, 1);
}

// The ask/tell answer carries the ticket of its writes; the memory store
// is durable at once, so every ticket is.
TEST_F(OutboxTest, RepliesCarryTheirTicket) {
  ASSERT_TRUE(core_->CreateStudy(Spec("budget: {max_trials: 2}")).ok());
  auto asked = core_->SuggestTrials("s", 1, "c");
  ASSERT_TRUE(asked.ok());
  std::promise<absl::Status> durable;
  core_->WhenDurable(asked.ticket(),
                     [&](absl::Status s) { durable.set_value(s); });
  auto done = durable.get_future();
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready);
  EXPECT_TRUE(done.get().ok());
}

}  // namespace
}  // namespace dial::scheduler
