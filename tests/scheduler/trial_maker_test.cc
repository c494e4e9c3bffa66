// TrialMaker over the memory store with a fake clock: asks make RUNNING
// trials for their client (and give an open client its trials back),
// top-ups keep a worker-run study's PENDING trials, queued configurations
// go first, an exhausted space ends the study, work for a deleted study is
// dropped, a slow fit holds up no other study, checkpoint deletion waits
// for the commit without holding up asks, and fits are timed.
#include "scheduler/trial_maker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "storage/checkpoint_store.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

class TrialMakerTest : public ::testing::Test {
 protected:
  ~TrialMakerTest() override { maker_.Stop(); }

  // Asks synchronously.
  absl::StatusOr<Suggestion> Ask(const std::shared_ptr<StudyEntry>& entry,
                                 int32_t count, const std::string& client) {
    std::promise<absl::StatusOr<Suggestion>> answer;
    std::function<void()> now;
    {
      absl::MutexLock lock(&mu_);
      now = maker_.Suggest(entry, count, client, [&](Reply<Suggestion> r) {
        answer.set_value(std::move(r));
      });
    }
    if (now) now();
    return answer.get_future().get();
  }
  void Fill(const std::shared_ptr<StudyEntry>& entry) {
    {
      absl::MutexLock lock(&mu_);
      maker_.Fill(entry);
    }
    maker_.WaitIdle();
  }

  absl::Notification release_;
  std::unique_ptr<storage::MemoryStudyStore> store_ =
      storage::MemoryStudyStore::Create();
  CoreParts parts_{store_.get(),
                   [this](const v1::StudySpec& spec)
                       -> absl::StatusOr<std::unique_ptr<searchers::Searcher>> {
                     if (spec.name() == "slow") {
                       return std::make_unique<GatedSearcher>(&release_);
                     }
                     return searchers::CreateSearcher(spec);
                   }};
  Limits limits_;
  metrics::Histogram fits_{metrics::LatencyBuckets()};
  absl::Mutex mu_;  // the core's lock, as far as the maker knows
  // Durability held back until the test lets it go.
  absl::Notification committed_;
  // The maker's parts over this fixture: the lock is mu_, durability comes
  // once committed_ is notified.
  TrialMaker::Parts MakerParts(storage::CheckpointStore* checkpoints,
                               int threads) {
    return {store_.get(),
            checkpoints,
            &parts_.quota,
            &parts_.lifecycle,
            &parts_.outbox,
            &parts_.loader,
            &limits_,
            &fits_,
            [this](WriteTicket*, const std::function<void()>& body) {
              absl::MutexLock lock(&mu_);
              body();
            },
            [this](WriteTicket, std::function<void(absl::Status)> done) {
              committed_.WaitForNotification();
              done(absl::OkStatus());
            },
            threads};
  }
  TrialMaker maker_{MakerParts(nullptr, 2)};
};

TEST_F(TrialMakerTest, AnAskMakesRunningTrialsAndAClientGetsItsOwnBack) {
  auto entry = parts_.Add(SmallSpec("s", 10));
  auto asked = Ask(entry, 2, "c");
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_EQ(asked->trials.size(), 2u);
  for (const auto& t : asked->trials) {
    EXPECT_EQ(t.state(), v1::RUNNING);
    EXPECT_EQ(t.client_id(), "c");
    EXPECT_EQ(store_->GetTrial("s", t.number())->state(), v1::RUNNING);
  }
  EXPECT_FALSE(asked->done);
  // Asking again with open trials returns those, not new ones.
  auto again = Ask(entry, 2, "c");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->trials.size(), 2u);
  EXPECT_EQ(again->trials[0].number(), asked->trials[0].number());
  EXPECT_EQ(entry->trials().size(), 2u);
  EXPECT_EQ(fits_.snapshot().count, 2u);  // one fit per new trial
}

TEST_F(TrialMakerTest, ATopUpKeepsAWorkerRunStudysPendingTrials) {
  v1::StudySpec spec =
      SmallSpec("w", 10, "trial: {command: {argv: [\"true\"]}}\n");
  spec.mutable_budget()->set_max_parallel_trials(3);
  auto entry = parts_.Add(spec);
  Fill(entry);
  EXPECT_EQ(entry->pending().size(), 3u);
  EXPECT_TRUE(parts_.outbox.dispatch);
  for (int64_t n : entry->pending()) {
    EXPECT_EQ(store_->GetTrial("w", n)->state(), v1::PENDING);
  }
  // Full: another top-up makes none.
  Fill(entry);
  EXPECT_EQ(entry->trials().size(), 3u);
}

TEST_F(TrialMakerTest, QueuedConfigurationsGoFirst) {
  auto entry = parts_.Add(SmallSpec("s", 10));
  v1::Study study = entry->study();
  auto* q = study.add_queue();
  q->set_id(1);
  (*q->mutable_params())["x"].set_double_value(0.125);
  auto saved = Save::Study(*store_, study);
  ASSERT_TRUE(saved.ok());
  entry->Apply(*std::move(saved));
  auto asked = Ask(entry, 2, "c");
  ASSERT_TRUE(asked.ok());
  ASSERT_EQ(asked->trials.size(), 2u);
  EXPECT_EQ(asked->trials[0].params().at("x").double_value(), 0.125);
  EXPECT_EQ(asked->trials[0].queue_id(), 1);
  EXPECT_NE(asked->trials[1].params().at("x").double_value(), 0.125);
  EXPECT_EQ(entry->study().queue_size(), 0);
  EXPECT_EQ(fits_.snapshot().count, 1u);  // the queued one needed no fit
}

TEST_F(TrialMakerTest, AnExhaustedSpaceEndsTheStudy) {
  auto spec = ParseStudySpec(R"(
name: g
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1, grid_points: 2}}]
searcher: {grid: {}}
budget: {max_trials: 10}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  FillSpecDefaults(7, *spec);
  auto entry = parts_.Add(*spec);
  auto asked = Ask(entry, 3, "c");
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->trials.size(), 2u);
  EXPECT_TRUE(entry->exhausted());
  EXPECT_FALSE(asked->done);  // two trials still run
}

TEST_F(TrialMakerTest, WorkForADeletedStudyIsDropped) {
  auto entry =
      parts_.Add(SmallSpec("w", 10, "trial: {command: {argv: [\"true\"]}}\n"));
  {
    absl::MutexLock lock(&mu_);
    parts_.studies.Remove("w");
  }
  EXPECT_EQ(Ask(entry, 1, "c").status().code(), absl::StatusCode::kNotFound);
  Fill(entry);
  EXPECT_TRUE(entry->trials().empty());
  EXPECT_TRUE(store_->ListTrials("w", {})->empty());
}

TEST_F(TrialMakerTest, ASlowFitHoldsUpNoOtherStudy) {
  auto slow = parts_.Add(SmallSpec("slow", 10, "searcher: {bayesian: {}}\n"));
  auto quick = parts_.Add(SmallSpec("quick", 10));
  std::promise<absl::StatusOr<Suggestion>> stuck;
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(maker_.Suggest(
                  slow, 1, "a",
                  [&](Reply<Suggestion> r) { stuck.set_value(std::move(r)); }),
              nullptr);  // a model fit: queued
  }
  for (int i = 0; i < 5; ++i) {
    auto asked = Ask(quick, 1, "b" + std::to_string(i));
    ASSERT_TRUE(asked.ok());
    EXPECT_EQ(asked->trials.size(), 1u);
  }
  auto future = stuck.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);
  release_.Notify();
  EXPECT_TRUE(future.get().ok());
}

// An ask of a kind that fits no model runs on the caller's thread: with
// the pool's only thread held by another study's fit, it is answered at
// once (before, it waited for the fit).
TEST_F(TrialMakerTest, AnAskThatFitsNoModelWaitsForNoPoolThread) {
  TrialMaker maker(MakerParts(nullptr, 1));
  auto slow = parts_.Add(SmallSpec("slow", 10, "searcher: {bayesian: {}}\n"));
  auto quick = parts_.Add(SmallSpec("quick", 10));
  std::promise<absl::StatusOr<Suggestion>> stuck;
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(maker.Suggest(
                  slow, 1, "a",
                  [&](Reply<Suggestion> r) { stuck.set_value(std::move(r)); }),
              nullptr);
  }
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 3; ++i) {
    std::optional<std::thread::id> answered_on;
    std::function<void()> now;
    {
      absl::MutexLock lock(&mu_);
      now = maker.Suggest(quick, 1, "b" + std::to_string(i),
                          [&](Reply<Suggestion> r) {
                            EXPECT_TRUE(r.ok()) << r.status();
                            answered_on = std::this_thread::get_id();
                          });
    }
    ASSERT_NE(now, nullptr);
    now();
    EXPECT_EQ(answered_on, caller);
  }
  EXPECT_EQ(quick->trials().size(), 3u);
  release_.Notify();
  EXPECT_TRUE(stuck.get_future().get().ok());
  maker.Stop();
}

TEST_F(TrialMakerTest, CheckpointDeletionWaitsForTheCommitButHoldsUpNoAsk) {
  storage::testing::ScopedTempDir dir("trial-maker");
  auto checkpoints =
      storage::FileCheckpointStore::Create({dir.path().string()});
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  const std::filesystem::path path = dir.path() / "s" / "0" / "5";
  std::filesystem::create_directories(path);
  TrialMaker maker(MakerParts(checkpoints->get(), 1));
  auto entry = parts_.Add(SmallSpec("s", 10));
  {
    absl::MutexLock lock(&mu_);
    maker.DeleteWhenDurable({{"s/0/5", "s", 0, 5, true}}, WriteTicket{1});
  }
  // The deletion waits for the commit; an ask goes ahead meanwhile.
  std::promise<absl::StatusOr<Suggestion>> answer;
  std::function<void()> now;
  {
    absl::MutexLock lock(&mu_);
    now = maker.Suggest(entry, 1, "c", [&](Reply<Suggestion> r) {
      answer.set_value(std::move(r));
    });
  }
  if (now) now();
  auto asked = answer.get_future().get();
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->trials.size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(path));
  committed_.Notify();
  maker.WaitIdle();
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace dial::scheduler
