// EventHub: what watchers get, in which order, and when they stop getting
// it. Events are stripped of what no watcher needs before they are queued.
#include "scheduler/event_hub.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

v1::StudyEvent Reported(int64_t trial) {
  v1::StudyEvent e;
  e.set_kind(v1::StudyEvent::TRIAL_REPORTED);
  e.mutable_study()->set_name("s");
  e.mutable_trial()->set_number(trial);
  return e;
}

v1::StudyEvent Snapshot() {
  v1::StudyEvent e;
  e.set_kind(v1::StudyEvent::SNAPSHOT);
  e.mutable_study()->set_name("s");
  return e;
}

// Finding: every event carried the whole spec, so four watchers that
// never read, on a study with a 1 MB spec, held 570 MB after 150 reports.
// The hub strips what it queues: the spec down to objective and budget,
// trials without history or lease token.
TEST(EventHubTest, QueuedEventsCarryNoSpec) {
  EventHub hub;
  std::vector<v1::StudyEvent> seen;
  v1::StudyEvent snapshot;
  snapshot.set_kind(v1::StudyEvent::SNAPSHOT);
  *snapshot.mutable_study()->mutable_spec() = BigSpec(200000);
  hub.Add(
      "big", [&](const v1::StudyEvent& e) { seen.push_back(e); }, snapshot);

  v1::StudyEvent event;
  event.set_kind(v1::StudyEvent::TRIAL_REPORTED);
  v1::Study& study = *event.mutable_study();
  study.set_name("big");
  *study.mutable_spec() = BigSpec(200000);
  study.set_state(v1::STUDY_ACTIVE);
  (*study.mutable_trial_counts())["RUNNING"] = 1;
  study.set_trials_created(1);
  study.set_owner("alice");
  v1::Trial& trial = *event.mutable_trial();
  trial.set_number(4);
  trial.set_lease_token("secret");
  for (int step = 0; step < 100; ++step) {
    auto* point = trial.add_metric_history();
    point->set_step(step);
    (*point->mutable_metrics())["loss"] = step;
  }
  *event.mutable_best_trial() = trial;
  hub.Publish("big", event);
  hub.Deliver();

  ASSERT_EQ(seen.size(), 2u);
  for (const v1::StudyEvent& e : seen) {
    EXPECT_LT(e.ByteSizeLong(), 1000u) << e.kind();
    EXPECT_EQ(e.study().spec().search_space_size(), 0);
    EXPECT_FALSE(e.study().spec().has_searcher());
    EXPECT_EQ(e.study().spec().objective().metric(), "loss");
    EXPECT_EQ(e.study().spec().budget().max_trials(), 1000);
  }
  const v1::StudyEvent& got = seen[1];
  EXPECT_EQ(got.study().name(), "big");
  EXPECT_EQ(got.study().state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(got.study().trial_counts().at("RUNNING"), 1);
  EXPECT_EQ(got.study().owner(), "alice");
  EXPECT_EQ(got.trial().number(), 4);
  EXPECT_EQ(got.trial().metric_history_size(), 0);
  EXPECT_TRUE(got.trial().lease_token().empty());
  EXPECT_EQ(got.best_trial().metric_history_size(), 0);
  EXPECT_TRUE(got.best_trial().lease_token().empty());
}

TEST(EventHubTest, EventStudyKeepsAllButTheSpec) {
  v1::Study study;
  study.set_name("s");
  *study.mutable_spec() = BigSpec(1000);
  study.set_state(v1::STUDY_COMPLETED);
  study.mutable_create_time()->set_seconds(5);
  study.mutable_update_time()->set_seconds(6);
  (*study.mutable_trial_counts())["COMPLETED"] = 3;
  study.set_trials_created(3);
  study.set_owner("bob");
  study.set_note("round 2");
  v1::Study expected = study;
  v1::StudySpec small;
  *small.mutable_objective() = study.spec().objective();
  *small.mutable_budget() = study.spec().budget();
  *expected.mutable_spec() = small;
  EXPECT_EQ(EventStudy(study).SerializeAsString(),
            expected.SerializeAsString());
  // A new field of v1::Study must be copied by EventStudy (or left out on
  // purpose): this count makes whoever adds one look. Left out: queue,
  // prior_trials and next_queue_id (issue 20), which can be large, and
  // waiting (issue 34), which only GetStudy and ListStudies work out.
  EXPECT_EQ(v1::Study::descriptor()->field_count(), 13);
}

// Each watcher gets its snapshot first, then every event of its study in
// the order published, even when many threads publish and deliver.
TEST(EventHubTest, WatchersGetTheirStudysEventsInOrder) {
  EventHub hub;
  std::mutex mu;
  std::vector<int64_t> a, b;
  std::vector<v1::StudyEvent::Kind> first;
  auto watcher = [&](std::vector<int64_t>* into) {
    return [&, into](const v1::StudyEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.kind() == v1::StudyEvent::SNAPSHOT) {
        first.push_back(e.kind());
        return;
      }
      into->push_back(e.trial().number());
    };
  };
  hub.Add("s", watcher(&a), Snapshot());
  hub.Add("s", watcher(&b), Snapshot());
  hub.Add(
      "other",
      [](const v1::StudyEvent& e) {
        EXPECT_EQ(e.kind(), v1::StudyEvent::SNAPSHOT) << "not its study's";
      },
      Snapshot());
  EXPECT_TRUE(hub.Watched("s"));
  EXPECT_FALSE(hub.Watched("nobody"));
  // Publishing is ordered by the caller (the core's lock): one mutex here.
  std::mutex publish;
  std::atomic<int64_t> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        {
          std::lock_guard<std::mutex> lock(publish);
          hub.Publish("s", Reported(next++));
        }
        hub.Deliver();
      }
    });
  }
  for (auto& t : threads) t.join();
  hub.Deliver();
  ASSERT_EQ(a.size(), 1000u);
  ASSERT_EQ(b.size(), 1000u);
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a[i], i);
    EXPECT_EQ(b[i], i);
  }
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(hub.queued(), 0u);
  EXPECT_EQ(hub.watchers(), 3u);
}

TEST(EventHubTest, ARemovedWatcherGetsNothingMore) {
  EventHub hub;
  std::vector<int64_t> seen;
  int64_t id = 0;
  id = hub.Add(
      "s",
      [&](const v1::StudyEvent& e) {
        if (e.kind() != v1::StudyEvent::TRIAL_REPORTED) return;
        seen.push_back(e.trial().number());
        if (e.trial().number() == 1) hub.Remove(id);  // from its callback
      },
      Snapshot());
  hub.Publish("s", Reported(0));
  hub.Publish("s", Reported(1));
  hub.Publish("s", Reported(2));
  hub.Deliver();
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(hub.Watched("s"));
  EXPECT_EQ(hub.watchers(), 0u);
  hub.Publish("s", Reported(3));
  hub.Deliver();
  EXPECT_EQ(seen.size(), 2u);
}

}  // namespace
}  // namespace dial::scheduler
