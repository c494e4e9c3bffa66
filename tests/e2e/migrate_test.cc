// `dialctl admin migrate` end to end: a dial-scheduler on SQLite runs an
// ask/tell study; it stops; dialctl copies its database into a fresh
// PostgreSQL database; a dial-scheduler on PostgreSQL then serves the same
// study, trials and reports, and the study goes on there. A second migrate
// into the now non-empty database is refused and changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "client/client.h"
#include "common/spec.h"
#include "storage/testing/pg_server.h"
#include "tests/e2e/subprocess.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Runs a shell command; its exit status and stdout (stderr joined).
std::pair<int, std::string> Shell(const std::string& cmd) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class MigrateE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dial-e2e-migrate-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto server = storage::testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = std::move(*server);
    auto url = pg_->NewDatabase("migrated");
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  void TearDown() override {
    scheduler_.Kill(SIGKILL);
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Starts dial-scheduler on `db`; returns a client of it.
  std::unique_ptr<client::DialClient> Start(const std::string& db) {
    const std::string log = (dir_ / "scheduler.log").string();
    EXPECT_TRUE(
        scheduler_.Start({DIAL_SCHEDULER_BIN, "--db=" + db,
                          "--checkpoint-root=" + (dir_ / "ckpt").string(),
                          "--listen=127.0.0.1:0"},
                         log));
    auto address = scheduler_.WaitFor("dial-scheduler listening on ",
                                      std::chrono::seconds(30));
    EXPECT_TRUE(address.has_value()) << "see " << log;
    auto c =
        client::DialClient::Create({address.value_or(""), absl::Seconds(10)});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::string Migrate() {
    return std::string(DIALCTL_BIN) + " admin migrate --from=sqlite://" +
           (dir_ / "dial.db").string() + " '--to=" + url_ + "'";
  }

  fs::path dir_;
  std::unique_ptr<storage::testing::PgServer> pg_;
  std::string url_;
  testing::Subprocess scheduler_;
};

TEST_F(MigrateE2eTest, ASqliteStudyGoesOnOnPostgresql) {
  auto spec = ParseStudySpec(R"(name: moved
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: 6, max_parallel_trials: 1}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  {
    auto c = Start((dir_ / "dial.db").string());
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->CreateStudy(*spec).ok());
    for (int i = 0; i < 3; ++i) {
      auto s = c->SuggestTrials("moved", 1, "cli");
      ASSERT_TRUE(s.ok() && s->trials_size() == 1) << s.status();
      const int64_t n = s->trials(0).number();
      for (int step = 1; step <= 4; ++step) {
        ASSERT_TRUE(
            c->ReportIntermediate("moved", n, step, {{"loss", 1.0 / step}})
                .ok());
      }
      ASSERT_TRUE(c->CompleteTrial("moved", n, {{"loss", 0.2 + i}}).ok());
    }
  }
  ASSERT_EQ(scheduler_.Kill(SIGTERM) & 0x7f, 0);  // stopped, not killed

  auto [rc, out] = Shell(Migrate());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("copied study moved: 3 trials, 12 reports"));
  EXPECT_THAT(out, HasSubstr("every count verified"));

  auto c = Start(url_);
  ASSERT_NE(c, nullptr);
  auto trials = c->ListAllTrials("moved", {});
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 3u);
  for (const v1::Trial& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED);
    auto full = c->GetTrial("moved", t.number());
    ASSERT_TRUE(full.ok());
    EXPECT_EQ(full->metric_history_size(), 4);
  }
  // The study goes on where it was.
  auto next = c->SuggestTrials("moved", 1, "cli");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->trials_size(), 1);
  EXPECT_EQ(next->trials(0).number(), 3);

  // Again, into a database that is no longer empty: refused.
  auto [again, why] = Shell(Migrate());
  EXPECT_NE(again, 0);
  EXPECT_THAT(why, HasSubstr("not empty"));
  EXPECT_THAT(why, HasSubstr("nothing was written"));
  EXPECT_EQ(c->ListAllTrials("moved", {})->size(), 4u);

  // A --from that is not there is an error, not an empty copy.
  auto [missing, said] =
      Shell(std::string(DIALCTL_BIN) +
            " admin migrate --from=" + (dir_ / "typo.db").string() +
            " --to=" + (dir_ / "new.db").string());
  EXPECT_NE(missing, 0);
  EXPECT_THAT(said, HasSubstr("there is no database at"));
  EXPECT_FALSE(fs::exists(dir_ / "typo.db"));
}

// Finding 14 of the third security review: a --to URL refused for holding
// a password was echoed whole, password included, in dialctl's error.
TEST(MigrateErrorsTest, ARefusedUrlsPasswordIsNotEchoed) {
  const fs::path dir = fs::temp_directory_path() /
                       ("dial-e2e-migrate-pw-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string from = (dir / "from.db").string();
  auto [made, made_out] =
      Shell("sqlite3 " + from + " 'CREATE TABLE x(y)' </dev/null");
  ASSERT_EQ(made, 0) << made_out;
  for (const std::string to :
       {"postgresql://dial:hunter2-secret@db.example:5432/dial",
        "postgresql://dial:hunter2-secret@db.example/dial?sslmode=require"}) {
    auto [rc, out] =
        Shell(std::string(DIALCTL_BIN) + " admin migrate --from=" + from +
              " '--to=" + to + "'");
    EXPECT_NE(rc, 0);
    EXPECT_THAT(out, HasSubstr("holds a password"));
    EXPECT_THAT(out, HasSubstr("postgresql://dial:***@db.example"));
    EXPECT_THAT(out, ::testing::Not(HasSubstr("hunter2")));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dial
