// One contract suite, run against every StudyStore implementation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "storage/memory_study_store.h"
#include "storage/sqlite_study_store.h"

namespace dial::storage {
namespace {

namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;
using google::protobuf::util::TimeUtil;

std::string TempPath(const std::string& name) {
  auto dir = fs::temp_directory_path() /
             ("dial-store-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  return (dir / name).string();
}

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<StudyStore>()> make;
};
void PrintTo(const StoreFactory& f, std::ostream* os) { *os << f.name; }

class StudyStoreContract : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    store_ = GetParam().make();
    ASSERT_NE(store_, nullptr);
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

TEST_P(StudyStoreContract, CheckpointIndexAndWorkers) {
  ASSERT_TRUE(store_->CreateStudy(MakeStudy("s")).ok());
  ASSERT_TRUE(store_->PutTrial(MakeTrial("s", 0)).ok());
  ASSERT_TRUE(store_->PutCheckpoint({"s", 0, 100, "s/0/100", 10, "abc"}).ok());
  ASSERT_TRUE(store_->PutCheckpoint({"s", 0, 200, "s/0/200", 20, "def"}).ok());
  auto list = store_->ListCheckpoints("s", 0);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].id, "s/0/200");
  EXPECT_EQ((*list)[1].size_bytes, 20);
  ASSERT_TRUE(store_->DeleteCheckpoint("s", 0, 100).ok());
  EXPECT_EQ(store_->ListCheckpoints("s", 0)->size(), 1u);

  v1::Worker w;
  w.set_id("w1");
  w.set_host("node1");
  w.mutable_resources()->set_slots(2);
  w.mutable_resources()->add_gpus()->set_id("0");
  *w.mutable_last_seen() = TimeUtil::MillisecondsToTimestamp(7000);
  ASSERT_TRUE(store_->PutWorker(w).ok());
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals((*workers)[0], w));
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
    ::testing::Values(StoreFactory{"Memory",
                                   [] { return MemoryStudyStore::Create(); }},
                      StoreFactory{"Sqlite",
                                   []() -> std::unique_ptr<StudyStore> {
                                     std::string path = TempPath("contract.db");
                                     fs::remove(path);
                                     auto store =
                                         SqliteStudyStore::Create({path});
                                     return store.ok() ? std::move(*store)
                                                       : nullptr;
                                   }}),
    [](const auto& info) { return info.param.name; });

TEST(SqliteStudyStoreTest, ReopenKeepsDataAndSchemaVersion) {
  std::string path = TempPath("reopen.db");
  fs::remove(path);
  {
    auto store = SqliteStudyStore::Create({path});
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->schema_version(), 1);
    v1::Study s;
    s.set_name("kept");
    s.set_state(v1::STUDY_ACTIVE);
    ASSERT_TRUE((*store)->CreateStudy(s).ok());
  }
  auto store = SqliteStudyStore::Create({path});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->schema_version(), 1);
  EXPECT_TRUE((*store)->GetStudy("kept").ok());
}

TEST(SqliteStudyStoreTest, RefusesADatabaseFromANewerDial) {
  std::string path = TempPath("newer.db");
  fs::remove(path);
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

TEST(SqliteStudyStoreTest, OneProcessPerDatabase) {
  std::string path = TempPath("locked.db");
  fs::remove(path);
  auto first = SqliteStudyStore::Create({path});
  ASSERT_TRUE(first.ok());
  auto second = SqliteStudyStore::Create({path});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("in use"));
  first->reset();
  EXPECT_TRUE(SqliteStudyStore::Create({path}).ok());
}

TEST(SqliteStudyStoreTest, UsesWalAndForeignKeys) {
  std::string path = TempPath("pragmas.db");
  fs::remove(path);
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

}  // namespace
}  // namespace dial::storage
