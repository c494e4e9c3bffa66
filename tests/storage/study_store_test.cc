// One contract suite, run against every StudyStore implementation: memory,
// SQLite, SQLite with group commit (the scheduler's default), PostgreSQL
// with and without group commit, and the fault-injecting test store with no
// fault set. Then what only SQLite has:
// reopening, migrations, locking, pragmas.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "storage/memory_study_store.h"
#include "storage/pg_study_store.h"
#include "storage/sqlite_schema.h"
#include "storage/sqlite_study_store.h"
#include "storage/testing/faulty_study_store.h"
#include "storage/testing/pg_server.h"
#include "storage/testing/temp_dir.h"

namespace dial::storage {
namespace {

using google::protobuf::util::MessageDifferencer;
using google::protobuf::util::TimeUtil;
using testing::ScopedTempDir;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct StoreFactory {
  std::string name;
  // A new store whose files, if any, go in `dir`.
  std::function<absl::StatusOr<std::unique_ptr<StudyStore>>(
      const ScopedTempDir& dir)>
      make;
};
void PrintTo(const StoreFactory& f, std::ostream* os) { *os << f.name; }

absl::StatusOr<std::unique_ptr<StudyStore>> OpenSqlite(const ScopedTempDir& dir,
                                                       bool group_commit) {
  auto store = SqliteStudyStore::Create(
      {dir.File("contract.db"), /*full_sync=*/true, group_commit});
  if (!store.ok()) return store.status();
  return std::unique_ptr<StudyStore>(std::move(*store));
}

// A fresh database on this process's PostgreSQL server, started by the
// first test that needs one and stopped (with its files) at exit.
absl::StatusOr<std::unique_ptr<StudyStore>> OpenPostgres(bool group_commit) {
  static absl::StatusOr<std::unique_ptr<testing::PgServer>> server =
      testing::PgServer::Start();
  static int databases = 0;
  if (!server.ok()) return server.status();
  auto url = (*server)->NewDatabase(absl::StrCat("contract", ++databases));
  if (!url.ok()) return url.status();
  auto store = PgStudyStore::Create({*url, ""}, {group_commit});
  if (!store.ok()) return store.status();
  return std::unique_ptr<StudyStore>(std::move(*store));
}

// Waits (bounded) for `durability`'s answer about `seq`.
absl::Status WaitDurable(Durability& durability, uint64_t seq) {
  auto done = std::make_shared<absl::Notification>();
  auto result = std::make_shared<absl::Status>();
  durability.WhenDurable(seq, [done, result](absl::Status s) {
    *result = s;
    done->Notify();
  });
  if (!done->WaitForNotificationWithTimeout(absl::Seconds(30))) {
    return absl::DeadlineExceededError("no answer from WhenDurable");
  }
  return *result;
}

class StudyStoreContract : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    auto store = GetParam().make(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  // Reports of `number` in `study`: (step, {metric: value}) at time 5000 +
  // step ms.
  void Report(const std::string& study, int64_t number, int64_t step,
              std::map<std::string, double> metrics) {
    v1::Trial t = MakeTrial(study, number);
    t.set_last_step(step);
    v1::MetricPoint p;
    p.set_step(step);
    for (const auto& [name, value] : metrics)
      (*p.mutable_metrics())[name] = value;
    *p.mutable_time() = TimeUtil::MillisecondsToTimestamp(5000 + step);
    const absl::Status s = store_->RecordReport(t, p);
    ASSERT_TRUE(s.ok()) << number << "/" << step << ": " << s;
  }
  // What ForEachReport hands over, as (number, step) pairs.
  std::vector<std::pair<int64_t, int64_t>> Replay(
      const std::string& study, const std::vector<int64_t>& steps,
      std::vector<v1::MetricPoint>* points = nullptr) {
    std::vector<std::pair<int64_t, int64_t>> out;
    absl::Status status = store_->ForEachReport(
        study, steps, "loss", [&](int64_t number, const v1::MetricPoint& p) {
          out.push_back({number, p.step()});
          if (points) points->push_back(p);
        });
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }
  v1::Study MakeStudy(const std::string& name) {
    v1::Study study;
    study.set_name(name);
    study.mutable_spec()->set_name(name);
    study.mutable_spec()->mutable_objective()->set_metric("loss");
    study.set_state(v1::STUDY_ACTIVE);
    *study.mutable_create_time() = TimeUtil::MillisecondsToTimestamp(1000);
    *study.mutable_update_time() = TimeUtil::MillisecondsToTimestamp(1000);
    return study;
  }
  v1::Trial MakeTrial(const std::string& study, int64_t number) {
    v1::Trial t;
    t.set_study(study);
    t.set_number(number);
    t.set_state(v1::RUNNING);
    (*t.mutable_params())["lr"].set_double_value(0.01 * (number + 1));
    (*t.mutable_params())["units"].set_int_value(32 + number);
    (*t.mutable_params())["opt"].set_string_value("adam");
    t.set_client_id("c1");
    t.set_last_step(-1);
    t.set_attempt(1);
    *t.mutable_create_time() = TimeUtil::MillisecondsToTimestamp(2000);
    return t;
  }
  ScopedTempDir dir_{"store"};  // outlives the store
  std::unique_ptr<StudyStore> store_;
};

TEST_P(StudyStoreContract, StudiesRoundTrip) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("a")).ok());
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("b")).ok());
  EXPECT_EQ(store_->CreateStudy(MakeStudy("a")).code(),
            absl::StatusCode::kAlreadyExists);
  auto a = store_->GetStudy("a");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(MessageDifferencer::Equals(*a, MakeStudy("a")));
  EXPECT_EQ(store_->GetStudy("zzz").status().code(),
            absl::StatusCode::kNotFound);
  auto list = store_->ListStudies();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);

  v1::Study changed = MakeStudy("a");
  changed.set_state(v1::STUDY_COMPLETED);
  changed.mutable_spec()->mutable_budget()->set_max_trials(99);
  ASSERT_TRUE(store_->UpdateStudy(changed).ok());
  EXPECT_EQ(store_->GetStudy("a")->state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(store_->GetStudy("a")->spec().budget().max_trials(), 99);
  EXPECT_EQ(store_->UpdateStudy(MakeStudy("nope")).code(),
            absl::StatusCode::kNotFound);
}

// Issue 20: a study's queue is written with every update; its warm-start
// prior only by CreateStudy, so later updates cannot drop it.
TEST_P(StudyStoreContract, QueuesAndPriorsRoundTrip) {
  v1::Study study = MakeStudy("q");
  v1::Trial prior = MakeTrial("old", 3);
  prior.set_state(v1::COMPLETED);
  prior.set_objective_value(0.5);
  *study.add_prior_trials() = prior;
  ASSERT_TRUE(store_->CreateStudy(study).ok());
  v1::Study updated = study;
  updated.clear_prior_trials();  // what the core writes back
  auto* q = updated.add_queue();
  (*q->mutable_params())["lr"].set_double_value(0.1);
  q->set_id(1);
  q->set_origin(7);
  q->set_seed(42);
  updated.set_next_queue_id(1);
  ASSERT_TRUE(store_->UpdateStudy(updated).ok());
  auto read = store_->GetStudy("q");
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->queue_size(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(read->queue(0), *q));
  EXPECT_EQ(read->next_queue_id(), 1);
  ASSERT_EQ(read->prior_trials_size(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(read->prior_trials(0), prior));
  updated.clear_queue();
  ASSERT_TRUE(store_->UpdateStudy(updated).ok());
  EXPECT_EQ(store_->GetStudy("q")->queue_size(), 0);
  EXPECT_EQ(store_->GetStudy("q")->prior_trials_size(), 1);
}

// Issue 16: deleting a study of 700k trials held the scheduler's lock for
// 10 s. DeleteStudy is now one small write (the name is free at once) and
// PurgeDeleted removes the rows later.
TEST_P(StudyStoreContract, ADeletedStudysNameIsFreeAtOnceAndItsRowsPurgeLater) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("d")).ok());
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("keep")).ok());
  for (int64_t n = 0; n < 300; ++n) {
    ASSERT_TRUE(store_->PutTrial(MakeTrial("d", n)).ok());
  }
  Report("d", 7, 1, {{"loss", 1.0}});
  ASSERT_TRUE(store_->PutTrial(MakeTrial("keep", 0)).ok());
  ASSERT_TRUE(store_->DeleteStudy("d").ok());
  EXPECT_EQ(store_->GetStudy("d").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListStudies()->size(), 1u);
  EXPECT_EQ(store_->DeleteStudy("d").code(), absl::StatusCode::kNotFound);
  // The name is free before the purge, and the new study starts empty.
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("d")).ok());
  EXPECT_TRUE(store_->ListTrials("d", {})->empty());
  ASSERT_TRUE(store_->PurgeDeleted().ok());
  ASSERT_TRUE(store_->PurgeDeleted().ok());  // nothing left: still OK
  EXPECT_TRUE(store_->ListTrials("d", {})->empty());
  EXPECT_EQ(store_->ListTrials("keep", {})->size(), 1u);
  EXPECT_EQ(store_->ListStudies()->size(), 2u);
}

// Owners (never changed by UpdateStudy), lease tokens, and the audit log.
TEST_P(StudyStoreContract, OwnersLeaseTokensAndTheAuditLogRoundTrip) {
  v1::Study owned = MakeStudy("o");
  owned.set_owner("alice");
  ASSERT_TRUE(store_->CreateStudy(owned).ok());
  v1::Study changed = owned;
  changed.set_owner("mallory");
  changed.set_state(v1::STUDY_STOPPED);
  ASSERT_TRUE(store_->UpdateStudy(changed).ok());
  EXPECT_EQ(store_->GetStudy("o")->owner(), "alice");
  EXPECT_EQ(store_->GetStudy("o")->state(), v1::STUDY_STOPPED);

  v1::Trial t = MakeTrial("o", 0);
  t.set_lease_token("0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(store_->PutTrial(t).ok());
  EXPECT_EQ(store_->GetTrial("o", 0)->lease_token(), t.lease_token());

  for (int i = 0; i < 5; ++i) {
    v1::AuditEvent e;
    *e.mutable_time() = TimeUtil::MillisecondsToTimestamp(1000 * (i + 1));
    e.set_principal(i % 2 ? "bob" : "alice");
    e.set_role("user");
    e.set_action(absl::StrCat("Action", i));
    e.set_study(i < 3 ? "o" : "");
    e.set_detail("d");
    e.set_id(99);  // ignored: the store numbers events
    ASSERT_TRUE(store_->AppendAudit(e).ok());
  }
  auto all = store_->ListAudit("", 0, 10);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[0].action(), "Action4");  // newest first
  EXPECT_EQ((*all)[4].action(), "Action0");
  EXPECT_GT((*all)[0].id(), (*all)[1].id());
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds((*all)[4].time()), 1000);
  EXPECT_EQ((*all)[4].principal(), "alice");
  auto page = store_->ListAudit("o", (*all)[2].id(), 1);  // before Action2
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].action(), "Action1");
  // The log outlives the study.
  ASSERT_TRUE(store_->DeleteStudy("o").ok());
  EXPECT_EQ(store_->ListAudit("o", 0, 10)->size(), 3u);
}

TEST_P(StudyStoreContract, TrialsRoundTripWithParamsAndDetail) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  v1::Trial t = MakeTrial("s", 0);
  ASSERT_TRUE(store_->PutTrial(t).ok());
  auto got = store_->GetTrial("s", 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*got, t)) << got->DebugString();

  t.set_state(v1::COMPLETED);
  t.set_objective_value(0.25);
  (*t.mutable_final_metrics())["loss"] = 0.25;
  *t.mutable_end_time() = TimeUtil::MillisecondsToTimestamp(3000);
  auto* lineage = t.add_lineage();
  lineage->set_step(10);
  lineage->set_source_trial(3);
  // Issue 34: preemptions and the attempt's start and CPU seconds.
  auto* preempted = t.add_preemptions();
  preempted->set_by_study("urgent");
  preempted->set_attempt(1);
  preempted->set_resume_step(200);
  *t.mutable_attempt_start_time() = TimeUtil::MillisecondsToTimestamp(2500);
  t.set_attempt_cpu_seconds(1.5);
  (*t.mutable_params())["opt"].set_string_value("sgd");
  t.mutable_params()->erase("units");
  ASSERT_TRUE(store_->PutTrial(t).ok());
  got = store_->GetTrial("s", 0);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(MessageDifferencer::Equals(*got, t)) << got->DebugString();

  EXPECT_EQ(store_->GetTrial("s", 7).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->PutTrial(MakeTrial("missing", 0)).code(),
            absl::StatusCode::kNotFound);
}

// Issue 37: notes ride with the study and the trial, and a report keeps
// the trial's.
TEST_P(StudyStoreContract, NotesRoundTrip) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  v1::Study noted = MakeStudy("s");
  noted.set_note("round two\n<b>wider</b> ranges");
  ASSERT_TRUE(store_->UpdateStudy(noted).ok());
  EXPECT_EQ(store_->GetStudy("s")->note(), noted.note());
  EXPECT_EQ(store_->ListStudies()->front().note(), noted.note());
  v1::Trial t = MakeTrial("s", 0);
  t.set_note("diverged");
  ASSERT_TRUE(store_->PutTrial(t).ok());
  EXPECT_EQ(store_->GetTrial("s", 0)->note(), "diverged");
  v1::MetricPoint point;
  point.set_step(1);
  (*point.mutable_metrics())["loss"] = 0.5;
  t.set_last_step(1);
  ASSERT_TRUE(store_->RecordReport(t, point).ok());
  EXPECT_EQ(store_->GetTrial("s", 0)->note(), "diverged");
}

TEST_P(StudyStoreContract, ListTrialsFiltersAndPages) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  for (int i = 0; i < 10; ++i) {
    v1::Trial t = MakeTrial("s", i);
    t.set_state(i % 2 ? v1::COMPLETED : v1::RUNNING);
    ASSERT_TRUE(store_->PutTrial(t).ok());
  }
  auto all = store_->ListTrials("s", {});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*all)[i].number(), i);

  auto done = store_->ListTrials("s", {{v1::COMPLETED}, -1, 0});
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->size(), 5u);
  for (const auto& t : *done) EXPECT_EQ(t.state(), v1::COMPLETED);

  std::vector<int64_t> seen;
  int64_t after = -1;
  while (true) {
    auto page = store_->ListTrials("s", {{}, after, 3});
    ASSERT_TRUE(page.ok());
    if (page->empty()) break;
    EXPECT_LE(page->size(), 3u);
    for (const auto& t : *page) seen.push_back(t.number());
    after = page->back().number();
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(store_->ListTrials("none", {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StudyStoreContract, ReportsAppendHistoryOnce) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  v1::Trial t = MakeTrial("s", 0);
  ASSERT_TRUE(store_->PutTrial(t).ok());
  for (int step = 0; step < 3; ++step) {
    v1::MetricPoint p;
    p.set_step(step * 10);
    (*p.mutable_metrics())["loss"] = 1.0 / (step + 1);
    (*p.mutable_metrics())["acc"] = step == 2 ? NAN : 0.1 * step;
    *p.mutable_time() = TimeUtil::MillisecondsToTimestamp(5000 + step);
    t.set_last_step(step * 10);
    ASSERT_TRUE(store_->RecordReport(t, p).ok());
  }
  v1::MetricPoint dup;
  dup.set_step(10);
  (*dup.mutable_metrics())["loss"] = 9;
  EXPECT_EQ(store_->RecordReport(t, dup).code(),
            absl::StatusCode::kAlreadyExists);

  auto history = store_->GetMetricHistory("s", 0);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 3u);
  EXPECT_EQ((*history)[1].step(), 10);
  EXPECT_DOUBLE_EQ((*history)[1].metrics().at("loss"), 0.5);
  EXPECT_TRUE(std::isnan((*history)[2].metrics().at("acc")));
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds((*history)[2].time()), 5002);
  EXPECT_EQ(store_->GetTrial("s", 0)->last_step(), 20);
}

// Finding: long histories pushed GetTrial answers over gRPC's 64 MiB
// message limit. The history reads in pages: after a step, at most `limit`
// points, ending early once the points reach `max_bytes`.
TEST_P(StudyStoreContract, HistoryReadsInPages) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  ASSERT_TRUE(store_->PutTrial(MakeTrial("s", 0)).ok());
  ASSERT_TRUE(store_->PutTrial(MakeTrial("s", 1)).ok());
  // Steps 0, 10, ..., 90, recorded out of order, two metrics each; one
  // report of the other trial in between.
  for (int step : {30, 0, 90, 10, 20, 50, 40, 60, 80, 70}) {
    Report("s", 0, step, {{"loss", step * 0.5}, {"acc", NAN}});
  }
  Report("s", 1, 25, {{"loss", 1}});
  auto steps = [](const std::vector<v1::MetricPoint>& points) {
    std::vector<int64_t> out;
    for (const auto& p : points) out.push_back(p.step());
    return out;
  };

  auto all = store_->GetMetricHistory("s", 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(steps(*all),
            (std::vector<int64_t>{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}));
  // Pages of 4 after each page's last step cover the history once.
  std::vector<int64_t> paged;
  std::vector<size_t> sizes;
  int64_t after = -1;
  while (true) {
    auto page = store_->GetMetricHistory("s", 0, {after, 4, 0});
    ASSERT_TRUE(page.ok()) << page.status();
    if (page->empty()) break;
    sizes.push_back(page->size());
    for (const auto& p : *page) {
      paged.push_back(p.step());
      EXPECT_DOUBLE_EQ(p.metrics().at("loss"), p.step() * 0.5);
      EXPECT_TRUE(std::isnan(p.metrics().at("acc")));
      EXPECT_EQ(TimeUtil::TimestampToMilliseconds(p.time()), 5000 + p.step());
    }
    after = page->back().step();
  }
  EXPECT_EQ(paged, steps(*all));
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 4, 2}));
  // After a step that is not recorded: from the next one.
  EXPECT_EQ(steps(*store_->GetMetricHistory("s", 0, {35, 2, 0})),
            (std::vector<int64_t>{40, 50}));
  EXPECT_TRUE(store_->GetMetricHistory("s", 0, {90, 0, 0})->empty());

  // A byte bound ends the page after the point that reaches it, and a page
  // holds at least one point however small the bound.
  const size_t point_bytes = (*all)[0].ByteSizeLong();
  EXPECT_EQ(steps(*store_->GetMetricHistory("s", 0, {-1, 0, 1})),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(
      steps(*store_->GetMetricHistory("s", 0, {10, 100, 2 * point_bytes})),
      (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(steps(*store_->GetMetricHistory("s", 0, {10, 1, 2 * point_bytes})),
            (std::vector<int64_t>{20}));

  EXPECT_EQ(steps(*store_->GetMetricHistory("s", 1, {-1, 5, 0})),
            (std::vector<int64_t>{25}));
  EXPECT_EQ(store_->GetMetricHistory("s", 7, {-1, 5, 0}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StudyStoreContract, ForEachReportReplaysEveryReportInOrder) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  for (int n : {1, 0}) ASSERT_TRUE(store_->PutTrial(MakeTrial("s", n)).ok());
  Report("s", 1, 5, {{"loss", 0.5}, {"acc", 0.7}});
  Report("s", 0, 20, {{"loss", NAN}});
  Report("s", 0, 10, {{"acc", 0.1}});
  std::vector<v1::MetricPoint> points;
  EXPECT_EQ(Replay("s", {}, &points), (std::vector<std::pair<int64_t, int64_t>>{
                                          {0, 10}, {0, 20}, {1, 5}}));
  ASSERT_EQ(points.size(), 3u);
  EXPECT_TRUE(std::isnan(points[1].metrics().at("loss")));
  EXPECT_EQ(points[2].metrics_size(), 2);
  EXPECT_DOUBLE_EQ(points[2].metrics().at("acc"), 0.7);
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(points[2].time()), 5005);
  EXPECT_EQ(store_
                ->ForEachReport("none", {}, "loss",
                                [](int64_t, const v1::MetricPoint&) {})
                .code(),
            absl::StatusCode::kNotFound);
}

// With steps: only reports with a finite value of the metric count, and of
// those each trial's first at or after each step, and its last.
TEST_P(StudyStoreContract, ForEachReportWithStepsReplaysTheFilteredReports) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  for (int n = 0; n < 4; ++n) {
    ASSERT_TRUE(store_->PutTrial(MakeTrial("s", n)).ok());
  }
  // Trial 0: finite loss at 1, 2, 4, 6, 7, 8, 9; NaN at 3; no loss at 5;
  // infinite at 10.
  for (int step = 1; step <= 10; ++step) {
    std::map<std::string, double> m = {{"acc", 0.1 * step}};
    if (step == 3) {
      m["loss"] = NAN;
    } else if (step == 10) {
      m["loss"] = kInf;
    } else if (step != 5) {
      m["loss"] = 1.0 / step;
    }
    Report("s", 0, step, m);
  }
  // Trial 1: no reports. Trial 2: one finite report before every step.
  Report("s", 2, 2, {{"loss", 0.3}});
  // Trial 3: never a finite loss.
  Report("s", 3, 4, {{"loss", NAN}});
  Report("s", 3, 8, {{"acc", 1}});

  std::vector<v1::MetricPoint> points;
  EXPECT_EQ(Replay("s", {3, 6}, &points),
            (std::vector<std::pair<int64_t, int64_t>>{
                {0, 4}, {0, 6}, {0, 9}, {2, 2}}));
  // Whole reports: every metric of the step.
  ASSERT_EQ(points.size(), 4u);
  EXPECT_DOUBLE_EQ(points[0].metrics().at("acc"), 0.4);
  EXPECT_DOUBLE_EQ(points[0].metrics().at("loss"), 0.25);
  // A step past every report: only the last; a step at a report: that one.
  EXPECT_EQ(Replay("s", {100}),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 9}, {2, 2}}));
  EXPECT_EQ(Replay("s", {0, 2}), (std::vector<std::pair<int64_t, int64_t>>{
                                     {0, 1}, {0, 2}, {0, 9}, {2, 2}}));
}

TEST_P(StudyStoreContract, CheckpointIndexListsAStudyByTrialThenStep) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("other")).ok());
  for (int n : {0, 1, 2}) ASSERT_TRUE(store_->PutTrial(MakeTrial("s", n)).ok());
  ASSERT_TRUE(store_->PutTrial(MakeTrial("other", 0)).ok());
  EXPECT_TRUE(store_->ListCheckpoints("s")->empty());
  ASSERT_TRUE(
      store_->PutCheckpoint({"s", 1, 200, "s/1/200", 20, "d", 0.5}).ok());
  ASSERT_TRUE(
      store_->PutCheckpoint({"s", 0, 300, "s/0/300", 30, "c", -kInf}).ok());
  ASSERT_TRUE(
      store_->PutCheckpoint({"s", 1, 100, "s/1/100", 10, "b", NAN}).ok());
  ASSERT_TRUE(
      store_->PutCheckpoint({"s", 0, 100, "s/0/100", 10, "a", -2}).ok());
  ASSERT_TRUE(
      store_->PutCheckpoint({"other", 0, 5, "other/0/5", 1, "x", 1}).ok());
  // Replaces (s, 1, 200).
  ASSERT_TRUE(
      store_->PutCheckpoint({"s", 1, 200, "s/1/200", 21, "e", 0.75}).ok());

  auto list = store_->ListCheckpoints("s");
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> ids;
  for (const auto& r : *list) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"s/0/100", "s/0/300", "s/1/100",
                                           "s/1/200"}));
  ASSERT_EQ(list->size(), 4u);
  const CheckpointRecord& last = (*list)[3];
  EXPECT_EQ(last.study, "s");
  EXPECT_EQ(last.trial, 1);
  EXPECT_EQ(last.step, 200);
  EXPECT_EQ(last.size_bytes, 21);
  EXPECT_EQ(last.checksum, "e");
  EXPECT_DOUBLE_EQ(last.score, 0.75);
  EXPECT_DOUBLE_EQ((*list)[0].score, -2);
  EXPECT_EQ((*list)[1].score, -kInf);
  EXPECT_EQ((*list)[2].score, -kInf);  // NaN: no finite objective

  ASSERT_TRUE(store_->DeleteCheckpoint("s", 0, 100).ok());
  ASSERT_TRUE(store_->DeleteCheckpoint("s", 0, 999).ok());  // absent: OK
  EXPECT_EQ(store_->ListCheckpoints("s")->size(), 3u);
  EXPECT_EQ(store_->ListCheckpoints("other")->size(), 1u);

  EXPECT_EQ(store_->PutCheckpoint({"s", 7, 1, "s/7/1", 0, ""}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->PutCheckpoint({"none", 0, 1, "none/0/1", 0, ""}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteCheckpoint("s", 7, 1).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListCheckpoints("none").status().code(),
            absl::StatusCode::kNotFound);
  // A trial's records stay when the trial is written again, and go with
  // its study.
  ASSERT_TRUE(store_->PutTrial(MakeTrial("s", 1)).ok());
  EXPECT_EQ(store_->ListCheckpoints("s")->size(), 3u);
  ASSERT_TRUE(store_->DeleteStudy("s").ok());
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  EXPECT_TRUE(store_->ListCheckpoints("s")->empty());
}

TEST_P(StudyStoreContract, PutWorkerInsertsOrReplaces) {
  v1::Worker w;
  w.set_id("w1");
  w.set_host("node1");
  w.mutable_resources()->set_slots(2);
  w.mutable_resources()->add_gpus()->set_id("0");
  *w.mutable_last_seen() = TimeUtil::MillisecondsToTimestamp(7000);
  ASSERT_TRUE(store_->PutWorker(w).ok());
  *w.mutable_last_seen() = TimeUtil::MillisecondsToTimestamp(8000);
  ASSERT_TRUE(store_->PutWorker(w).ok());
}

// Every write becomes durable: at once (no durability()), or once its
// group is committed.
TEST_P(StudyStoreContract, WritesBecomeDurable) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  Durability* durability = store_->durability();
  if (durability == nullptr) return;
  if (auto* faulty = dynamic_cast<testing::FaultyStudyStore*>(store_.get())) {
    faulty->Commit();  // its commits are the test's to make
  }
  const uint64_t seq = durability->WrittenSeq();
  EXPECT_GT(seq, 0u);
  EXPECT_TRUE(WaitDurable(*durability, seq).ok());
  ASSERT_TRUE(store_->PutTrial(MakeTrial("s", 0)).ok());
  EXPECT_GT(durability->WrittenSeq(), seq);
}

// Usage records: appended, read back oldest first from a time on, and kept
// when their study is deleted.
TEST_P(StudyStoreContract, UsageRecordsOutliveTheirStudy) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  for (int i = 0; i < 3; ++i) {
    v1::UsageRecord r;
    r.set_study("s");
    r.set_owner("ann");
    r.set_trial(i);
    r.set_attempt(1);
    *r.mutable_start_time() = TimeUtil::MillisecondsToTimestamp(1000 * i);
    *r.mutable_end_time() = TimeUtil::MillisecondsToTimestamp(1000 * i + 500);
    r.set_slot_seconds(0.5);
    r.set_outcome("COMPLETED");
    ASSERT_TRUE(store_->AppendUsage(r).ok());
  }
  ASSERT_TRUE(store_->DeleteStudy("s").ok());
  auto all = store_->ListUsage(0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*all)[i].trial(), i);
  auto later = store_->ListUsage(2000);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0].trial(), 2);
  EXPECT_EQ((*later)[0].outcome(), "COMPLETED");
}

TEST_P(StudyStoreContract, DeleteStudyRemovesEverything) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  ASSERT_TRUE(store_->PutTrial(MakeTrial("s", 0)).ok());
  ASSERT_TRUE(store_->DeleteStudy("s").ok());
  EXPECT_EQ(store_->GetTrial("s", 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteStudy("s").code(), absl::StatusCode::kNotFound);
  // The name is free again, with no trials left behind.
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  EXPECT_TRUE(store_->ListTrials("s", {})->empty());
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StudyStoreContract,
    ::testing::Values(
        StoreFactory{"Memory",
                     [](const ScopedTempDir&)
                         -> absl::StatusOr<std::unique_ptr<StudyStore>> {
                       return MemoryStudyStore::Create();
                     }},
        StoreFactory{"Sqlite",
                     [](const ScopedTempDir& dir) {
                       return OpenSqlite(dir, /*group_commit=*/false);
                     }},
        StoreFactory{"SqliteGroupCommit",
                     [](const ScopedTempDir& dir) {
                       return OpenSqlite(dir, /*group_commit=*/true);
                     }},
        StoreFactory{"Postgres",
                     [](const ScopedTempDir&) {
                       return OpenPostgres(/*group_commit=*/false);
                     }},
        StoreFactory{"PostgresGroupCommit",
                     [](const ScopedTempDir&) {
                       return OpenPostgres(/*group_commit=*/true);
                     }},
        StoreFactory{"FaultyWithoutFaults",
                     [](const ScopedTempDir&)
                         -> absl::StatusOr<std::unique_ptr<StudyStore>> {
                       return testing::FaultyStudyStore::Create(
                           {/*group_commit=*/true});
                     }}),
    [](const auto& info) { return info.param.name; });

class SqliteStudyStoreTest : public ::testing::Test {
 protected:
  ScopedTempDir dir_{"store"};
};

TEST_F(SqliteStudyStoreTest, ReopenKeepsDataAndSchemaVersion) {
  const std::string path = dir_.File("reopen.db");
  {
    auto store = SqliteStudyStore::Create({path});
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->schema_version(), LatestSchemaVersion());
    v1::Study s;
    s.set_name("kept");
    s.set_state(v1::STUDY_ACTIVE);
    ASSERT_TRUE((*store)->CreateStudy(s).ok());
  }
  auto store = SqliteStudyStore::Create({path});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->schema_version(), LatestSchemaVersion());
  EXPECT_TRUE((*store)->GetStudy("kept").ok());
}

// A database of schema version 1 (before checkpoint scores, owners and the
// audit log) migrates: its checkpoint records read with score -infinity,
// new ones keep theirs, its studies have no owner, and the audit log works.
TEST_F(SqliteStudyStoreTest, MigratesADatabaseFromVersion1) {
  ASSERT_GE(LatestSchemaVersion(), 4);  // through issue 20's queue and prior
  const std::string path = dir_.File("v1.db");
  {
    sqlite3* db;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string sql =
        std::string(
            "CREATE TABLE schema_version(version INTEGER "
            "NOT NULL); INSERT INTO schema_version "
            "VALUES (1);") +
        MigrationSql(0) +
        "INSERT INTO studies VALUES (1, 's', x'', 1, 1000, "
        "1000);"
        "INSERT INTO trials(id, study_id, number, state, "
        "client_id, error, last_step, checkpoint, attempt, "
        "failures, worker_id, detail) VALUES (1, 1, 0, 2, "
        "'c1', '', 100, 's/0/100', 1, 0, 'w1', x'');"
        "INSERT INTO checkpoints VALUES (1, 100, 's/0/100', "
        "10, 'abc');";
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << err;
    sqlite3_close(db);
  }
  {
    auto store = SqliteStudyStore::Create({path});
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->schema_version(), LatestSchemaVersion());
    auto study = (*store)->GetStudy("s");
    ASSERT_TRUE(study.ok()) << study.status();
    EXPECT_EQ(study->owner(), "");
    EXPECT_EQ(study->queue_size(), 0);  // migration 4's empty extra
    v1::AuditEvent event;
    event.set_principal("root");
    event.set_action("Migrated");
    ASSERT_TRUE((*store)->AppendAudit(event).ok());
    auto trial = (*store)->GetTrial("s", 0);
    ASSERT_TRUE(trial.ok()) << trial.status();
    EXPECT_EQ(trial->checkpoint(), "s/0/100");
    ASSERT_TRUE(
        (*store)->PutCheckpoint({"s", 0, 200, "s/0/200", 20, "def", 0.5}).ok());
  }
  auto store = SqliteStudyStore::Create({path});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->schema_version(), LatestSchemaVersion());
  auto audit = (*store)->ListAudit("", 0, 10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].action(), "Migrated");
  auto list = (*store)->ListCheckpoints("s");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, "s/0/100");
  EXPECT_EQ((*list)[0].size_bytes, 10);
  EXPECT_EQ((*list)[0].checksum, "abc");
  EXPECT_EQ((*list)[0].score, -kInf);
  EXPECT_DOUBLE_EQ((*list)[1].score, 0.5);
}

TEST_F(SqliteStudyStoreTest, RefusesADatabaseFromANewerDial) {
  const std::string path = dir_.File("newer.db");
  { ASSERT_TRUE(SqliteStudyStore::Create({path}).ok()); }
  {
    sqlite3* db;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "UPDATE schema_version SET version = 99", nullptr, nullptr,
                 nullptr);
    sqlite3_close(db);
  }
  auto store = SqliteStudyStore::Create({path});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), ::testing::HasSubstr("newer"));
}

TEST_F(SqliteStudyStoreTest, OneProcessPerDatabase) {
  const std::string path = dir_.File("locked.db");
  auto first = SqliteStudyStore::Create({path});
  ASSERT_TRUE(first.ok());
  auto second = SqliteStudyStore::Create({path});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("in use"));
  first->reset();
  EXPECT_TRUE(SqliteStudyStore::Create({path}).ok());
}

TEST_F(SqliteStudyStoreTest, UsesWalAndForeignKeys) {
  const std::string path = dir_.File("pragmas.db");
  auto store = SqliteStudyStore::Create({path});
  ASSERT_TRUE(store.ok());
  sqlite3* db;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
               "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  // Foreign keys: a trial for a study that is gone cannot be written.
  EXPECT_EQ((*store)->PutCheckpoint({"none", 0, 1, "x", 0, ""}).code(),
            absl::StatusCode::kNotFound);
}

// A deleted study's rows are gone from the file once purged, also when the
// purge comes only after a restart.
TEST_F(SqliteStudyStoreTest, PurgeRemovesDeletedRowsAlsoAfterARestart) {
  const std::string path = dir_.File("purge.db");
  {
    auto store = SqliteStudyStore::Create({path});
    ASSERT_TRUE(store.ok());
    v1::Study study;
    study.set_name("big");
    ASSERT_TRUE((*store)->CreateStudy(study).ok());
    for (int64_t n = 0; n < 600; ++n) {
      v1::Trial t;
      t.set_study("big");
      t.set_number(n);
      (*t.mutable_params())["x"].set_double_value(n);
      ASSERT_TRUE((*store)->PutTrial(t).ok());
    }
    ASSERT_TRUE((*store)->DeleteStudy("big").ok());
  }
  auto count = [&](const char* sql) {
    sqlite3* db;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt;
    sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
    EXPECT_EQ(sqlite3_step(stmt), SQLITE_ROW);
    const int64_t n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return n;
  };
  EXPECT_EQ(count("SELECT count(*) FROM trials"), 600);  // not purged yet
  auto store = SqliteStudyStore::Create({path});
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->ListStudies()->empty());
  ASSERT_TRUE((*store)->PurgeDeleted().ok());
  store->reset();
  EXPECT_EQ(count("SELECT count(*) FROM trials"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM params"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM studies"), 0);
}

}  // namespace
}  // namespace dial::storage
