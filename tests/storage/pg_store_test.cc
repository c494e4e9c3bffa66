// PgStudyStore beyond the contract suite (study_store_test.cc), on a real
// PostgreSQL server: schema versions and the forward migration, what a bad
// URL, wrong credentials, an unreachable server or a newer schema get at
// start-up, and a server lost and back. Also OpenStudyStore, which picks
// the store --db names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/open_study_store.h"
#include "storage/pg_leader_lease.h"
#include "storage/pg_study_store.h"
#include "storage/testing/pg_server.h"
#include "storage/testing/temp_dir.h"

namespace dial::storage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

OpenStoreOptions Opts(const std::string& db, const std::string& password = "") {
  OpenStoreOptions o;
  o.db = db;
  o.password_file = password;
  return o;
}

v1::Study AStudy(const std::string& name) {
  v1::Study study;
  study.set_name(name);
  study.mutable_spec()->set_name(name);
  study.set_state(v1::STUDY_ACTIVE);
  return study;
}

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::string NewDatabase(const std::string& name) {
    auto url = server_->NewDatabase(name);
    EXPECT_TRUE(url.ok()) << url.status();
    return url.ok() ? *url : "";
  }
  // Tables in the database at `url` (public schema).
  std::vector<std::string> Tables(const std::string& url) {
    auto conn = PgConnection::Open({url, ""});
    EXPECT_TRUE(conn.ok()) << conn.status();
    std::vector<std::string> out;
    if (!conn.ok()) return out;
    auto r = (*conn)->Exec(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' "
        "ORDER BY 1");
    EXPECT_TRUE(r.ok()) << r.status();
    for (int i = 0; r.ok() && i < r->rows(); ++i) out.push_back(r->Bytes(i, 0));
    return out;
  }
  std::unique_ptr<testing::PgServer> server_;
};

TEST_F(PgStoreTest, AnOlderSchemaMigratesForwardKeepingWhatItHolds) {
  const std::string url = NewDatabase("old");
  {
    auto conn = PgConnection::Open({url, ""});
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE(PgStudyStore::MigrateTo(**conn, 1).ok());
    // A study written by a Dial at schema 1.
    v1::Study study = AStudy("kept");
    std::string bytes;
    study.SerializeToString(&bytes);
    ASSERT_TRUE((*conn)
                    ->Exec("INSERT INTO studies(name, study, prior) VALUES "
                           "('kept', $1, '')",
                           PgParams().Bytes(bytes))
                    .ok());
  }
  EXPECT_THAT(Tables(url), Not(::testing::Contains("usage")));
  auto store = PgStudyStore::Create({url, ""});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->SchemaVersion(), PgStudyStore::LatestSchemaVersion());
  EXPECT_EQ((*store)->GetStudy("kept")->spec().name(), "kept");
  v1::UsageRecord usage;
  usage.set_owner("ann");
  usage.mutable_end_time()->set_seconds(100);
  ASSERT_TRUE((*store)->AppendUsage(usage).ok());
  EXPECT_EQ((*store)->ListUsage(0)->size(), 1u);
  // Opening again migrates nothing and keeps everything.
  store->reset();
  auto again = PgStudyStore::Create({url, ""});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->ListUsage(0)->size(), 1u);
}

TEST_F(PgStoreTest, ANewerSchemaIsRefusedAndNothingIsWritten) {
  const std::string url = NewDatabase("newer");
  {
    auto conn = PgConnection::Open({url, ""});
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE((*conn)
                    ->ExecScript("CREATE TABLE dial_schema(version BIGINT NOT "
                                 "NULL); INSERT INTO dial_schema VALUES (99)")
                    .ok());
  }
  auto store = PgStudyStore::Create({url, ""});
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("newer than this Dial"));
  EXPECT_THAT(Tables(url), ::testing::ElementsAre("dial_schema"));
}

TEST_F(PgStoreTest, ALostServerIsUnavailableUntilItIsBack) {
  auto store = PgStudyStore::Create({NewDatabase("lost"), ""});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->CreateStudy(AStudy("a")).ok());
  ASSERT_TRUE(server_->Kill().ok());
  const absl::Status down = (*store)->CreateStudy(AStudy("b"));
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_EQ((*store)->GetStudy("a").status().code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE(server_->Restart().ok());
  // The connection is made again within the backoff (at most 2 s).
  absl::Status up = absl::UnavailableError("not tried");
  for (int i = 0; i < 100 && absl::IsUnavailable(up); ++i) {
    up = (*store)->GetStudy("a").status();
    if (absl::IsUnavailable(up)) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(up.ok()) << up;
  // What failed while it was down was not written.
  EXPECT_EQ((*store)->GetStudy("b").status().code(),
            absl::StatusCode::kNotFound);
}

std::unique_ptr<PgLeaderLease> Lease(const std::string& url,
                                     const std::string& holder,
                                     absl::Duration lease) {
  auto l = PgLeaderLease::Create({{url, ""}, holder, holder + ":7070", lease});
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? std::move(*l) : nullptr;
}

// Polls `fn` (every 20 ms, at most 10 s) until it returns true.
bool Eventually(const std::function<bool()>& fn) {
  for (int i = 0; i < 500; ++i) {
    if (fn()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_F(PgStoreTest, OneSchedulerLeadsAndAStandbyTakesOverOnceTheLeaseRunsOut) {
  const std::string url = NewDatabase("lease");
  ASSERT_TRUE(PgStudyStore::Create({url, ""}).ok());
  auto a = Lease(url, "a", absl::Milliseconds(600));
  auto b = Lease(url, "b", absl::Milliseconds(600));
  auto first = a->TryAcquire();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(b->TryAcquire().status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto seen = b->Read();
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->holder, "a");
  EXPECT_EQ(seen->address, "a:7070");
  EXPECT_FALSE(seen->expired);
  // The holder renews (the same epoch), however often.
  ASSERT_TRUE(a->Renew(*first).ok());
  EXPECT_EQ(*a->TryAcquire(), *first);
  // Unrenewed, it runs out and b takes it with a new epoch.
  int64_t second = 0;
  ASSERT_TRUE(Eventually([&] {
    auto got = b->TryAcquire();
    if (got.ok()) second = *got;
    return got.ok();
  }));
  EXPECT_GT(second, *first);
  EXPECT_EQ(a->Renew(*first).code(), absl::StatusCode::kFailedPrecondition);
  // Given up, it is free at once.
  ASSERT_TRUE(b->Release(second).ok());
  auto third = a->TryAcquire();
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_GT(*third, second);
}

// Fencing in the database: once another scheduler took over, a write of
// the old epoch changes nothing, and a takeover waits for the old
// leader's transactions in flight (or for the server to end the ones left
// idle for a lease).
TEST_F(PgStoreTest, AWriteOfAnOldEpochNeverCommitsAfterATakeover) {
  const std::string url = NewDatabase("fence");
  auto old_leader = PgStudyStore::Create({url, ""});
  ASSERT_TRUE(old_leader.ok()) << old_leader.status();
  const absl::Duration lease = absl::Milliseconds(500);
  auto a = Lease(url, "a", lease);
  auto b = Lease(url, "b", lease);
  const int64_t epoch = *a->TryAcquire();
  ASSERT_TRUE((*old_leader)->SetFence("a", epoch, lease).ok());
  ASSERT_TRUE((*old_leader)->CreateStudy(AStudy("before")).ok());

  // A transaction of a's in flight when its lease runs out: the takeover
  // waits for it, so it commits before the new epoch begins.
  auto conn = PgConnection::Open({url, ""});
  ASSERT_TRUE(conn.ok());
  PgConnection& c = **conn;
  ASSERT_TRUE(c.ExecScript("BEGIN").ok());
  auto held = c.Exec(
      "SELECT 1 FROM leader WHERE id = 1 AND holder = 'a' AND epoch = $1 AND "
      "expires > clock_timestamp() FOR SHARE",
      PgParams().Int(epoch));
  ASSERT_TRUE(held.ok() && held->rows() == 1);
  std::atomic<bool> committed{false}, committed_first{false};
  std::thread takeover([&] {
    ASSERT_TRUE(Eventually([&] { return b->TryAcquire().ok(); }));
    committed_first = committed.load();
  });
  auto watcher = PgConnection::Open({url, ""});
  ASSERT_TRUE(watcher.ok());
  // b's UPDATE waits on a's share lock.
  ASSERT_TRUE(Eventually([&] {
    auto r =
        (*watcher)->Exec("SELECT count(*) FROM pg_locks WHERE NOT granted");
    return r.ok() && r->Int(0, 0) > 0;
  }));
  ASSERT_TRUE(
      c.ExecScript("INSERT INTO workers VALUES ('in-flight', '')").ok());
  // Set before the COMMIT is sent: the takeover can end as soon as the
  // server has committed, before COMMIT returns here (a CI run saw the
  // flag still false when it was set after).
  committed = true;
  ASSERT_TRUE(c.ExecScript("COMMIT").ok());
  takeover.join();
  EXPECT_TRUE(committed_first) << "the takeover did not wait";

  // After it, a's writes change nothing.
  const absl::Status after = (*old_leader)->CreateStudy(AStudy("after"));
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable) << after;
  EXPECT_THAT(after.message(), HasSubstr("no longer leads"));
  auto reader = PgStudyStore::Create({url, ""});
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE((*reader)->GetStudy("before").ok());
  EXPECT_EQ((*reader)->GetStudy("after").status().code(),
            absl::StatusCode::kNotFound);

  // A leader paused inside a transaction: the server ends it after a lease
  // idle, and the takeover goes on.
  const int64_t epoch_b = *b->TryAcquire();
  auto paused = PgConnection::Open({url, ""});
  ASSERT_TRUE(paused.ok());
  ASSERT_TRUE((*paused)
                  ->SetOnConnect(
                      absl::StrCat("SET idle_in_transaction_session_timeout = ",
                                   absl::ToInt64Milliseconds(lease)))
                  .ok());
  ASSERT_TRUE((*paused)->ExecScript("BEGIN").ok());
  ASSERT_TRUE((*paused)
                  ->Exec("SELECT 1 FROM leader WHERE id = 1 AND epoch = $1 "
                         "FOR SHARE",
                         PgParams().Int(epoch_b))
                  .ok());
  EXPECT_TRUE(Eventually([&] { return a->TryAcquire().ok(); }));
  EXPECT_EQ((*paused)->ExecScript("COMMIT").code(),
            absl::StatusCode::kUnavailable);
}

TEST(PgUrlTest, BadUrlsAndPasswordsInUrlsAreRefusedWithoutEchoingThem) {
  EXPECT_EQ(CheckPostgresUrl("mysql://db/x").code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* url : {"postgresql://dial:s3cret@db:5432/dial",
                          "postgresql://db/dial?password=s3cret"}) {
    const absl::Status s = CheckPostgresUrl(url);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(s.message(), HasSubstr("--db-password-file"));
    EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));
  }
  EXPECT_TRUE(
      CheckPostgresUrl("postgresql://dial@db:5432/dial?sslmode=require").ok());
  EXPECT_TRUE(CheckPostgresUrl("postgresql:///dial?host=/run/pg").ok());
  EXPECT_EQ(DescribeUrl("postgresql://dial@db/dial?sslmode=require"),
            "postgresql://dial@db/dial");
  // A password in the URL is refused, and never shown (finding 14 of the
  // third security review: dialctl admin migrate echoed it).
  EXPECT_EQ(DescribeUrl("postgresql://dial:s3cret@db:5432/dial"),
            "postgresql://dial:***@db:5432/dial");
  EXPECT_EQ(DescribeUrl("postgresql://dial:s3cret@db"),
            "postgresql://dial:***@db");
  EXPECT_EQ(DescribeDb("postgresql://a:b:c@h/d?x=1"), "postgresql://a:***@h/d");
  // A raw '/' in the password neither escapes the check nor the masking.
  EXPECT_FALSE(CheckPostgresUrl("postgresql://u:p/w@host/db").ok());
  EXPECT_EQ(DescribeUrl("postgresql://u:p/w@host/db"),
            "postgresql://u:***@host/db");
  EXPECT_EQ(DescribeUrl("postgresql:///dial?host=/run/pg&user=u"),
            "postgresql:///dial");
}

TEST(PgCredentialsTest, WrongCredentialsAndAnUnreachableServerAreClearErrors) {
  testing::PgServer::Options options;
  options.password = "right-horse";
  auto server = testing::PgServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto url = (*server)->NewDatabase("creds");
  ASSERT_TRUE(url.ok()) << url.status();
  auto wrong = PgStudyStore::Create({*url, "wrong-battery"});
  ASSERT_EQ(wrong.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(wrong.status().message(), HasSubstr("password authentication"));
  EXPECT_THAT(wrong.status().message(), Not(HasSubstr("wrong-battery")));
  auto right = PgStudyStore::Create({*url, "right-horse"});
  ASSERT_TRUE(right.ok()) << right.status();
  // Through --db-password-file.
  testing::ScopedTempDir dir;
  std::ofstream(dir.File("pw")) << "right-horse\n";
  auto opened = OpenStudyStore(Opts(*url, dir.File("pw")));
  EXPECT_TRUE(opened.ok()) << opened.status();
  // A server that is not there.
  auto gone = PgStudyStore::Create(
      {"postgresql:///x?host=/nonexistent-dial-dir&user=postgres", ""});
  ASSERT_EQ(gone.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(gone.status().message(), HasSubstr("cannot connect"));
}

TEST(OpenStudyStoreTest, DbNamesSqliteOrPostgres) {
  testing::ScopedTempDir dir;
  auto bare = OpenStudyStore(Opts(dir.File("a.db")));
  EXPECT_TRUE(bare.ok()) << bare.status();
  auto url = OpenStudyStore(Opts("sqlite://" + dir.File("b.db")));
  EXPECT_TRUE(url.ok()) << url.status();
  EXPECT_TRUE(std::filesystem::exists(dir.File("b.db")));
  EXPECT_EQ(OpenStudyStore(Opts("sqlite://relative.db")).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto mysql = OpenStudyStore(Opts("mysql://db/dial"));
  EXPECT_EQ(mysql.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mysql.status().message(), HasSubstr("'mysql'"));
  EXPECT_EQ(
      OpenStudyStore(Opts(dir.File("c.db"), dir.File("pw"))).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenStudyStore(Opts("postgresql://db/dial", dir.File("missing")))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DescribeDb("postgresql://u@h/d?sslmode=require"),
            "postgresql://u@h/d");
}

}  // namespace
}  // namespace dial::storage
