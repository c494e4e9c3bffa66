// Group commit on PostgreSQL (PgStudyStore with group_commit), on a real
// server: writes are answered only once their group is committed; a
// write that fails leaves its group's other writes in place; a dropped
// connection or a lost lease loses the group whole (its waiters are told,
// the lost handler runs, writes are refused until Recover) and nothing of
// it is in the database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "storage/pg_leader_lease.h"
#include "storage/pg_study_store.h"
#include "storage/testing/pg_server.h"

namespace dial::storage {
namespace {

using ::testing::HasSubstr;

v1::Study AStudy(const std::string& name) {
  v1::Study study;
  study.set_name(name);
  study.mutable_spec()->set_name(name);
  study.set_state(v1::STUDY_ACTIVE);
  return study;
}

v1::Trial ATrial(const std::string& study, int64_t number) {
  v1::Trial t;
  t.set_study(study);
  t.set_number(number);
  t.set_state(v1::RUNNING);
  return t;
}

// What WhenDurable answered, once it has.
struct Answer {
  absl::Notification done;
  absl::Status status;
};
std::shared_ptr<Answer> Ask(Durability& d, uint64_t seq) {
  auto a = std::make_shared<Answer>();
  d.WhenDurable(seq, [a](absl::Status s) {
    a->status = s;
    a->done.Notify();
  });
  return a;
}

class PgGroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto url = server_->NewDatabase("groups");
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    auto store = PgStudyStore::Create({url_, ""}, {/*group_commit=*/true});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ASSERT_NE(store_->durability(), nullptr);
    auto reader = PgStudyStore::Create({url_, ""});
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = std::move(*reader);  // sees only what is committed
  }
  std::unique_ptr<testing::PgServer> server_;
  std::string url_;
  std::unique_ptr<PgStudyStore> store_;
  std::unique_ptr<PgStudyStore> reader_;
};

TEST_F(PgGroupCommitTest, AnswersWaitForTheCommitOfTheirGroup) {
  store_->HoldCommitsForTesting(true);
  ASSERT_TRUE(store_->CreateStudy(AStudy("s")).ok());
  ASSERT_TRUE(store_->PutTrial(ATrial("s", 0)).ok());
  v1::MetricPoint point;
  point.set_step(1);
  v1::Trial progressed = ATrial("s", 0);
  progressed.set_last_step(1);
  ASSERT_TRUE(store_->RecordReport(progressed, point).ok());
  auto answer = Ask(*store_, store_->WrittenSeq());
  // Applied (the store reads them back) but not committed.
  EXPECT_EQ(store_->GetTrial("s", 0)->last_step(), 1);
  EXPECT_FALSE(answer->done.HasBeenNotified());
  EXPECT_EQ(reader_->GetStudy("s").status().code(),
            absl::StatusCode::kNotFound);

  store_->HoldCommitsForTesting(false);
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(answer->status.ok()) << answer->status;
  auto trial = reader_->GetTrial("s", 0);
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_EQ(trial->last_step(), 1);
  EXPECT_EQ(reader_->GetMetricHistory("s", 0)->size(), 1u);
}

// A unique violation fails its statement, which in PostgreSQL fails the
// whole transaction: the savepoint keeps the group's other writes.
TEST_F(PgGroupCommitTest, AFailingWriteLeavesItsGroupsOtherWrites) {
  store_->HoldCommitsForTesting(true);
  ASSERT_TRUE(store_->CreateStudy(AStudy("s")).ok());
  EXPECT_EQ(store_->CreateStudy(AStudy("s")).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->PutTrial(ATrial("missing", 0)).code(),
            absl::StatusCode::kNotFound);
  v1::MetricPoint point;
  point.set_step(3);
  EXPECT_EQ(store_->RecordReport(ATrial("s", 9), point).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->PutTrial(ATrial("s", 0)).ok());
  ASSERT_TRUE(store_->RecordReport(ATrial("s", 0), point).ok());
  EXPECT_EQ(store_->RecordReport(ATrial("s", 0), point).code(),
            absl::StatusCode::kAlreadyExists);
  auto answer = Ask(*store_, store_->WrittenSeq());
  store_->HoldCommitsForTesting(false);
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(answer->status.ok()) << answer->status;
  EXPECT_TRUE(reader_->GetTrial("s", 0).ok());
  EXPECT_EQ(reader_->GetMetricHistory("s", 0)->size(), 1u);
}

TEST_F(PgGroupCommitTest, ADroppedConnectionLosesTheGroupWhole) {
  ASSERT_TRUE(store_->CreateStudy(AStudy("kept")).ok());
  {
    auto committed = Ask(*store_, store_->WrittenSeq());
    ASSERT_TRUE(
        committed->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(committed->status.ok());
  }
  std::atomic<int> lost_calls{0};
  store_->SetLostHandler([&] { ++lost_calls; });
  store_->HoldCommitsForTesting(true);
  ASSERT_TRUE(store_->CreateStudy(AStudy("gone")).ok());
  auto answer = Ask(*store_, store_->WrittenSeq());
  store_->DropConnectionForTesting();
  store_->HoldCommitsForTesting(false);
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kUnavailable)
      << answer->status;
  EXPECT_EQ(lost_calls.load(), 1);
  // Refused until the owner reloads and says so.
  EXPECT_EQ(store_->CreateStudy(AStudy("later")).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(reader_->GetStudy("gone").status().code(),
            absl::StatusCode::kNotFound);
  store_->Recover();
  ASSERT_TRUE(store_->CreateStudy(AStudy("later")).ok());
  auto later = Ask(*store_, store_->WrittenSeq());
  ASSERT_TRUE(later->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(later->status.ok()) << later->status;
  EXPECT_TRUE(reader_->GetStudy("kept").ok());
  EXPECT_TRUE(reader_->GetStudy("later").ok());
  store_->SetLostHandler(nullptr);
}

// Fenced per group: a group applied while the lease was held but
// committed after another scheduler took over never commits.
TEST_F(PgGroupCommitTest, AGroupOfAnOldEpochNeverCommits) {
  const absl::Duration lease = absl::Milliseconds(400);
  auto a = PgLeaderLease::Create({{url_, ""}, "a", "a:7070", lease});
  auto b = PgLeaderLease::Create({{url_, ""}, "b", "b:7070", lease});
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t epoch = *(*a)->TryAcquire();
  // The server would end the group's transaction once idle for a lease;
  // a longer idle timeout here makes the COMMIT's own fence check refuse.
  ASSERT_TRUE(store_->SetFence("a", epoch, absl::Seconds(60)).ok());
  store_->HoldCommitsForTesting(true);
  ASSERT_TRUE(store_->CreateStudy(AStudy("late")).ok());
  auto answer = Ask(*store_, store_->WrittenSeq());
  // a stops renewing; b takes over once the lease has run out.
  absl::StatusOr<int64_t> taken;
  for (int i = 0; i < 500 && !taken.ok(); ++i) {
    taken = (*b)->TryAcquire();
    if (!taken.ok()) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(taken.ok()) << taken.status();
  store_->HoldCommitsForTesting(false);
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(answer->status.message(), HasSubstr("no longer leads"));
  EXPECT_EQ(reader_->GetStudy("late").status().code(),
            absl::StatusCode::kNotFound);
}

// A group's COMMIT runs on one connection while the next group is applied
// on the other, which sees the first group's rows only once it committed:
// a write that needs them (a trial of a study just created) waits for that
// COMMIT instead of failing NOT_FOUND.
TEST_F(PgGroupCommitTest, AWriteWaitsForTheRowsOfTheGroupBeingCommitted) {
  const absl::Duration lease = absl::Seconds(60);
  auto a = PgLeaderLease::Create({{url_, ""}, "a", "a:7070", lease});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(store_->SetFence("a", *(*a)->TryAcquire(), lease).ok());
  // The lease row locked elsewhere stops the next COMMIT at its fence
  // check, until the server ends that idle transaction after a second.
  auto blocker = PgConnection::Open({url_, ""});
  ASSERT_TRUE(blocker.ok());
  ASSERT_TRUE((*blocker)
                  ->ExecScript("SET idle_in_transaction_session_timeout = 1000")
                  .ok());
  ASSERT_TRUE((*blocker)->ExecScript("BEGIN").ok());
  ASSERT_TRUE((*blocker)
                  ->ExecScript("SELECT 1 FROM leader WHERE id = 1 FOR UPDATE")
                  .ok());
  ASSERT_TRUE(store_->CreateStudy(AStudy("s")).ok());
  auto watcher = PgConnection::Open({url_, ""});
  ASSERT_TRUE(watcher.ok());
  bool waiting = false;
  for (int i = 0; i < 500 && !waiting; ++i) {
    auto r =
        (*watcher)->Exec("SELECT count(*) FROM pg_locks WHERE NOT granted");
    waiting = r.ok() && r->Int(0, 0) > 0;
    if (!waiting) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(waiting) << "the COMMIT did not reach its fence check";
  // The study's group is being committed: its row is not yet visible to
  // the connection this write uses.
  const absl::Status put = store_->PutTrial(ATrial("s", 0));
  EXPECT_TRUE(put.ok()) << put;
  auto answer = Ask(*store_, store_->WrittenSeq());
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(answer->status.ok()) << answer->status;
  EXPECT_TRUE(reader_->GetTrial("s", 0).ok());
}

}  // namespace
}  // namespace dial::storage
