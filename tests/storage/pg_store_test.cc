// PgStudyStore beyond the contract suite (study_store_test.cc), on a real
// PostgreSQL server: schema versions and the forward migration, what a bad
// URL, wrong credentials, an unreachable server or a newer schema get at
// start-up, and a server lost and back. Also OpenStudyStore, which picks
// the store --db names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/open_study_store.h"
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
}

TEST(PgCredentialsTest, WrongCredentialsAndAnUnreachableServerAreClearErrors) {
  auto server = testing::PgServer::Start({false, "right-horse"});
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
