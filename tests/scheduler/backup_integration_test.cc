// BackupDatabase end to end: a real server on 127.0.0.1:0 over a real SQLite
// file, backed up through the client library while clients keep writing; the
// copy is then opened as a database of its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "client/client.h"
#include "common/spec.h"
#include "google/protobuf/util/message_differencer.h"
#include "scheduler/server.h"
#include "storage/sqlite_study_store.h"

namespace dial::scheduler {
namespace {

namespace fs = std::filesystem;
using client::DialClient;
using google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

class BackupIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dial-backup-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "backups");
    auto store =
        storage::SqliteStudyStore::Create({(dir_ / "dial.db").string()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    SchedulerServerOptions options;
    options.store = store_.get();
    options.listen = "127.0.0.1:0";
    options.backup_dir = (dir_ / "backups").string();
    auto server = SchedulerServer::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto client = DialClient::Create({server_->address(), absl::Seconds(30)});
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }
  v1::StudySpec Spec(const std::string& name) {
    auto spec = ParseStudySpec("name: " + name +
                               "\nobjective: {metric: loss, goal: MINIMIZE}\n"
                               "search_space: [{name: x, float: {min: -3, "
                               "max: 3}}]\n"
                               "budget: {max_trials: 50, "
                               "max_parallel_trials: 4}\n");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  fs::path dir_;
  std::unique_ptr<storage::SqliteStudyStore> store_;
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<DialClient> client_;
};

TEST_F(BackupIntegrationTest, ABackupTakenWhileClientsWriteIsAWholeDatabase) {
  // One study with finished trials and reports.
  ASSERT_TRUE(client_->CreateStudy(Spec("done")).ok());
  auto asked = client_->SuggestTrials("done", 3, "c");
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_EQ(asked->trials_size(), 3);
  for (const auto& t : asked->trials()) {
    for (int step = 1; step <= 4; ++step) {
      ASSERT_TRUE(client_
                      ->ReportIntermediate("done", t.number(), step,
                                           {{"loss", 1.0 / step}})
                      .ok());
    }
    ASSERT_TRUE(
        client_->CompleteTrial("done", t.number(), {{"loss", 0.1}}).ok());
  }
  // Another one that a client keeps reporting to during the backups.
  ASSERT_TRUE(client_->CreateStudy(Spec("busy")).ok());
  auto busy = client_->SuggestTrials("busy", 1, "c");
  ASSERT_TRUE(busy.ok());
  const int64_t busy_trial = busy->trials(0).number();
  std::atomic<bool> stop{false}, failed{false};
  std::atomic<int64_t> last_step{0};
  std::thread writer([&] {
    auto client = DialClient::Create({server_->address(), absl::Seconds(30)});
    for (int64_t step = 1; client.ok() && !stop.load(); ++step) {
      if (!(*client)
               ->ReportIntermediate("busy", busy_trial, step,
                                    {{"loss", 1.0 / step}})
               .ok()) {
        break;
      }
      last_step = step;
    }
    failed = !stop.load();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (last_step.load() < 5 && !failed.load() && absl::Now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_FALSE(failed.load());

  std::string path;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "dial-backup-" + std::to_string(i) + ".db";
    path = (dir_ / "backups" / name).string();
    auto backup = client_->BackupDatabase(name);
    ASSERT_TRUE(backup.ok()) << backup.status();
    EXPECT_EQ(backup->path(), path);
    EXPECT_EQ(backup->bytes(), static_cast<int64_t>(fs::file_size(path)));
  }
  stop = true;
  writer.join();
  EXPECT_GT(last_step.load(), 5);

  // Refusals come back as codes a client acts on. Issue 16 finding 2: a
  // backup wrote anywhere (a copy in an arbitrary directory, an unrelated
  // SQLite file replaced); now only new files in --backup-dir.
  const std::string elsewhere = (dir_ / "elsewhere.db").string();
  for (const std::string& bad :
       {elsewhere, std::string("../elsewhere.db"), std::string("a/b.db"),
        std::string(".hidden.db"), std::string("")}) {
    auto refused = client_->BackupDatabase(bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("--backup-dir")) << bad;
  }
  EXPECT_FALSE(fs::exists(elsewhere));
  const uintmax_t size_before = fs::file_size(path);
  auto again = client_->BackupDatabase(fs::path(path).filename().string());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(fs::file_size(path), size_before);

  // The copy opens as a database of its own, with the same studies and the
  // finished study's trials and reports as they are live.
  auto copy = storage::SqliteStudyStore::Create({path});
  ASSERT_TRUE(copy.ok()) << copy.status();
  auto studies = (*copy)->ListStudies();
  ASSERT_TRUE(studies.ok());
  ASSERT_EQ(studies->size(), 2u);
  EXPECT_EQ((*studies)[0].name(), "done");
  EXPECT_EQ((*studies)[1].name(), "busy");
  auto live_trials = client_->ListAllTrials("done", {});
  auto copied_trials = (*copy)->ListTrials("done", {});
  ASSERT_TRUE(live_trials.ok() && copied_trials.ok());
  ASSERT_EQ(copied_trials->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        MessageDifferencer::Equals((*live_trials)[i], (*copied_trials)[i]))
        << (*copied_trials)[i].DebugString();
    EXPECT_EQ((*copied_trials)[i].state(), v1::COMPLETED);
    auto history = (*copy)->GetMetricHistory("done", i);
    ASSERT_TRUE(history.ok());
    EXPECT_EQ(history->size(), 4u);
  }
  // The busy trial is caught at one commit: its last step and its reports
  // agree, as they were written in one transaction.
  auto caught = (*copy)->GetTrial("busy", busy_trial);
  ASSERT_TRUE(caught.ok()) << caught.status();
  auto caught_history = (*copy)->GetMetricHistory("busy", busy_trial);
  ASSERT_TRUE(caught_history.ok());
  ASSERT_FALSE(caught_history->empty());
  EXPECT_EQ(caught_history->back().step(), caught->last_step());
  EXPECT_EQ(static_cast<int64_t>(caught_history->size()), caught->last_step());
  EXPECT_LE(caught->last_step(), last_step.load());

  // The server goes on as before.
  EXPECT_TRUE(client_->CreateStudy(Spec("after")).ok());
}

}  // namespace
}  // namespace dial::scheduler
