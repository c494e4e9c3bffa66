// Helpers shared by the scheduler core's tests: waiting for durability,
// one-metric reports, specs, a per-test scratch directory, and the core's
// parts wired without the core (for the per-part tests). Not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "searchers/searcher.h"
#include "storage/testing/temp_dir.h"

namespace dial::scheduler {

// Waits until what a reply's `ticket` covers is durable (or lost).
inline absl::Status Durable(SchedulerCore& core, WriteTicket ticket) {
  absl::Notification done;
  absl::Status result;
  core.WhenDurable(ticket, [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

// Metrics holding one value.
inline searchers::Metrics Metric(const std::string& name, double v) {
  searchers::Metrics m;
  m[name] = v;
  return m;
}

// A study `name` minimising "loss" over x in [0, 1], with `extra` spec
// lines, defaults filled (seed 7).
inline v1::StudySpec SmallSpec(const std::string& name, int max_trials,
                               const std::string& extra = "") {
  auto spec =
      ParseStudySpec("name: " + name +
                     "\nobjective: {metric: loss, goal: MINIMIZE}\n"
                     "search_space:\n  - {name: x, float: {min: 0, max: 1}}\n"
                     "budget: {max_trials: " +
                     std::to_string(max_trials) + "}\n" + extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return v1::StudySpec();
  FillSpecDefaults(7, *spec);
  return *spec;
}

// Suggests only once the test lets it go, as a slow model fit would.
class GatedSearcher : public searchers::Searcher {
 public:
  explicit GatedSearcher(absl::Notification* release) : release_(release) {}
  using Searcher::Suggest;
  absl::StatusOr<searchers::Params> Suggest(
      int64_t, const std::vector<searchers::Params>&) override {
    release_->WaitForNotification();
    searchers::Params p;
    p["x"].set_double_value(0.5);
    return p;
  }

 private:
  absl::Notification* release_;
};

// The core's parts wired as the core wires them (without retention or
// checkpoints), over `store` and a fake clock, for tests of one part.
// `factory` replaces the default searcher factory if given.
struct CoreParts {
  explicit CoreParts(storage::StudyStore* store_in,
                     SearcherFactory factory = nullptr)
      : store(store_in),
        loader(
            store_in,
            factory ? std::move(factory)
                    : [](const v1::StudySpec&
                             s) { return searchers::CreateSearcher(s); },
            [](const v1::StudySpec& s) {
              return searchers::CreateTrialScheduler(s);
            }) {}

  // `spec`'s study, ACTIVE and owned by `owner`, written to the store and
  // loaded as the core would; also in `studies`.
  std::shared_ptr<StudyEntry> Add(const v1::StudySpec& spec,
                                  const std::string& owner = "") {
    v1::Study study;
    study.set_name(spec.name());
    study.set_owner(owner);
    *study.mutable_spec() = spec;
    study.set_state(v1::STUDY_ACTIVE);
    EXPECT_TRUE(store->CreateStudy(study).ok());
    auto entry = loader.Load(study);
    EXPECT_TRUE(entry.ok()) << entry.status();
    if (!entry.ok()) return nullptr;
    studies.Add(*entry);
    return *entry;
  }

  storage::StudyStore* store;
  FakeClock clock;
  EventHub events;
  WorkerRegistry workers{&clock, absl::Seconds(10)};
  Outbox outbox;
  StudyRegistry studies;
  CheckpointRetention retention;
  CheckpointQuota quota{0};
  StudyLoader loader;
  TrialLifecycle lifecycle{{store, &clock, &events, &workers, nullptr, nullptr,
                            nullptr, &outbox, nullptr, nullptr}};
};

// A spec of about `filler_bytes` (long categorical values no event needs).
inline v1::StudySpec BigSpec(size_t filler_bytes) {
  auto spec = ParseStudySpec(R"(
name: big
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: x, float: {min: 0, max: 1}}
budget: {max_trials: 1000, max_parallel_trials: 2}
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  // Bulk that no event needs: many long categorical values (a trial
  // carries only the one it got).
  auto* c = spec->add_search_space();
  c->set_name("c");
  for (size_t i = 0; i * 100 < filler_bytes || i < 1; ++i) {
    std::string value = std::to_string(i);
    value.resize(100, 'v');
    c->mutable_categorical()->add_values(value);
  }
  return *spec;
}

// A fresh directory per test (dir_), removed afterwards with everything in
// it, and a database path in it (path_).
class DbDirTest : public ::testing::Test {
 protected:
  storage::testing::ScopedTempDir temp_{"scheduler"};
  const std::filesystem::path dir_ = temp_.path();
  const std::string path_ = temp_.File("dial.db");
};

// A worker's report of `a` at `step` (metric acc = 0.1 * step), with
// `checkpoint` if not empty.
inline v1::ReportProgressRequest ReportRequest(const std::string& worker,
                                               const Assignment& a,
                                               int64_t step,
                                               const std::string& checkpoint) {
  v1::ReportProgressRequest r;
  r.set_worker_id(worker);
  r.set_study(a.trial.study());
  r.set_trial(a.trial.number());
  r.set_attempt(a.attempt);
  r.set_lease_token(a.trial.lease_token());
  r.set_step(step);
  (*r.mutable_metrics())["acc"] = 0.1 * step;
  r.set_checkpoint(checkpoint);
  return r;
}
// A worker's FinishTrial of `a`, without metrics or error.
inline v1::FinishTrialRequest FinishRequest(const std::string& worker,
                                            const Assignment& a) {
  v1::FinishTrialRequest r;
  r.set_worker_id(worker);
  r.set_study(a.trial.study());
  r.set_trial(a.trial.number());
  r.set_attempt(a.attempt);
  r.set_lease_token(a.trial.lease_token());
  return r;
}

}  // namespace dial::scheduler
