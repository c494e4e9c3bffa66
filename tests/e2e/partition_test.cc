// A leader cut off from its PostgreSQL database but alive (issue 35), in
// network namespaces of the test's own: the database server in one, two
// schedulers in two more, an ask/tell client (e2e_report_loop) in a
// fourth. nftables in the leader's namespace drops its packets to and from
// the database only; the client still reaches it.
//
// - The cut-off leader stops serving (it stands by) within about a lease,
//   and the standby takes the lease and serves; the client goes on.
// - After the heal the old leader stays a standby, naming the new leader.
// - Nothing the old leader wrote is committed after the takeover: a
//   trigger of the test's own notes each row written and from which
//   address, and the server's commit timestamps
//   (track_commit_timestamp) order those commits against the takeover.
// - Every report the client saw acknowledged is in the database once.
//
// Needs root, `ip netns`, nft and PostgreSQL; skips itself without them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "storage/pg_connection.h"
#include "storage/testing/pg_server.h"
#include "tests/e2e/netns.h"

namespace dial {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Ran;
using testing::RunCommand;
using testing::Tail;
namespace fs = std::filesystem;

constexpr int kLeaseMs = 3000;

std::string NftBinary() {
  for (const char* p : {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

class PartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    ip_ = testing::IpBinary();
    nft_ = NftBinary();
    if (ip_.empty() || !RunCommand({ip_, "netns", "list"}).ok()) {
      GTEST_SKIP() << "`ip netns` is unavailable";
    }
    if (nft_.empty()) GTEST_SKIP() << "nft (nftables) is not installed";
    const std::string net = absl::StrCat("10.215.", 1 + getpid() % 250, ".");
    network_ = std::make_unique<testing::TestNetwork>(ip_, "dpart", net);
    std::string error;
    if (!network_->Build({"db", "sa", "sb", "cli"}, &error)) {
      GTEST_SKIP() << "`ip netns add` does not work here: " << error;
    }
    ASSERT_FALSE(HasFailure()) << "the test network could not be built";
    dir_ = fs::temp_directory_path() /
           ("dial-partition-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);

    // Off loopback a scheduler serves only TLS with tokens.
    Ran ca =
        RunCommand({"/bin/bash", DIAL_SOURCE_DIR "/deploy/dev-ca.sh",
                    (dir_ / "ca").string(), "--san", network_->Address("sa"),
                    "--san", network_->Address("sb")});
    ASSERT_TRUE(ca.ok()) << ca.output;

    storage::testing::PgServer::Options pg;
    pg.netns = network_->Ns("db");
    pg.listen_address = network_->Address("db");
    pg.trust_network = net + "0/24";
    pg.settings = "-c track_commit_timestamp=on";
    auto server = storage::testing::PgServer::Start(pg);
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = std::move(*server);
    auto local = pg_->NewDatabase("part");
    ASSERT_TRUE(local.ok()) << local.status();
    local_url_ = *local;  // over the socket: the test's own checks
    url_ = absl::StrCat("postgresql://postgres@", network_->Address("db"),
                        ":5432/part");
  }
  void TearDown() override {
    for (auto* p : {&loop_, &schedulers_[0], &schedulers_[1]}) {
      p->Kill(SIGKILL);
    }
    pg_.reset();
    network_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string Ca(const std::string& file) const {
    return (dir_ / "ca" / file).string();
  }
  std::string Address(int i) const {
    return network_->Address(i == 0 ? "sa" : "sb") + ":7070";
  }
  // Starts scheduler i in its namespace; waits for its first line.
  void StartScheduler(int i, const std::string& line) {
    const std::string host = i == 0 ? "sa" : "sb";
    const fs::path log = dir_ / (host + ".log");
    ASSERT_TRUE(schedulers_[i].Start(
        network_->In(
            host,
            {DIAL_SCHEDULER_BIN, "--db=" + url_,
             "--checkpoint-root=" + (dir_ / "ckpt").string(),
             "--listen=" + Address(i), "--advertise=" + Address(i),
             absl::StrCat("--leader-lease-ms=", kLeaseMs),
             "--tls-cert=" + Ca("server.crt"), "--tls-key=" + Ca("server.key"),
             "--auth-tokens=" + Ca("auth-tokens")}),
        log.string()));
    ASSERT_TRUE(
        schedulers_[i].WaitFor(line, std::chrono::seconds(30)).has_value())
        << Tail(log);
  }
  // Runs dialctl in the client's namespace against `address` alone.
  Ran Dialctl(const std::string& address, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        DIALCTL_BIN, "--scheduler=" + address, "--timeout-s=2",
        "--tls-ca=" + Ca("ca.crt"),
        "--token=" + testing::ReadFile(dir_ / "ca/tokens/admin.token")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(network_->In("cli", argv), std::chrono::seconds(20));
  }
  // Reads the client's lines until `more` more acknowledgements (at most
  // `seconds`); false if they did not come.
  bool Acks(size_t more, int seconds) {
    const size_t want = acked_.size() + more;
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (acked_.size() < want) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      if (left.count() <= 0) return false;
      auto line = loop_.ReadLine(left);
      if (!line) return false;
      std::vector<std::string> w = absl::StrSplit(*line, ' ');
      int64_t trial = 0, step = 0;
      if (w.size() == 4 && w[0] == "ACK" && absl::SimpleAtoi(w[2], &trial) &&
          absl::SimpleAtoi(w[3], &step)) {
        acked_.insert({trial, step});
      }
    }
    return true;
  }
  // The lease row, as the database has it.
  std::pair<std::string, int64_t> Leader() {
    auto conn = storage::PgConnection::Open({local_url_, ""});
    if (!conn.ok()) return {"", 0};
    auto r = (*conn)->Exec(
        "SELECT address, epoch FROM leader WHERE expires > clock_timestamp()");
    if (!r.ok() || r->rows() == 0) return {"", 0};
    return {r->Bytes(0, 0), r->Int(0, 1)};
  }
  // Drops (or again lets through) scheduler a's traffic with the database.
  void CutOffFromDatabase(bool cut) {
    const std::string db = network_->Address("db");
    std::vector<std::vector<std::string>> rules;
    if (cut) {
      rules = {
          {"add", "table", "inet", "part"},
          {"add", "chain", "inet", "part", "in",
           "{ type filter hook input priority 0; }"},
          {"add", "chain", "inet", "part", "out",
           "{ type filter hook output priority 0; }"},
          {"add", "rule", "inet", "part", "in", "ip", "saddr", db, "drop"},
          {"add", "rule", "inet", "part", "out", "ip", "daddr", db, "drop"}};
    } else {
      rules = {{"delete", "table", "inet", "part"}};
    }
    for (auto& rule : rules) {
      rule.insert(rule.begin(), nft_);
      Ran ran = RunCommand(network_->In("sa", rule));
      ASSERT_TRUE(ran.ok()) << ran.output;
    }
  }

  std::string ip_, nft_;
  std::unique_ptr<testing::TestNetwork> network_;
  std::unique_ptr<storage::testing::PgServer> pg_;
  fs::path dir_;
  std::string url_, local_url_;
  testing::Subprocess schedulers_[2];
  testing::Subprocess loop_;
  std::set<std::pair<int64_t, int64_t>> acked_;
};

TEST_F(PartitionTest, ALeaderCutOffFromTheDatabaseStandsByAndCommitsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartScheduler(0, "dial-scheduler listening on "));
  // The test's own record of every row written, by whom (the schedulers
  // connect over TCP from their namespaces' addresses).
  {
    auto conn = storage::PgConnection::Open({local_url_, ""});
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE((*conn)
                    ->ExecScript(R"sql(
CREATE TABLE test_writes(client inet, tbl text);
CREATE FUNCTION test_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO test_writes VALUES (inet_client_addr(), TG_TABLE_NAME);
  RETURN NULL;
END $$;
CREATE TRIGGER note AFTER INSERT OR UPDATE ON metrics
  FOR EACH ROW EXECUTE FUNCTION test_note();
CREATE TRIGGER note AFTER INSERT OR UPDATE ON trials
  FOR EACH ROW EXECUTE FUNCTION test_note();
CREATE TRIGGER note AFTER UPDATE ON leader
  FOR EACH ROW EXECUTE FUNCTION test_note();
)sql")
                    .ok());
  }
  ASSERT_NO_FATAL_FAILURE(StartScheduler(1, "dial-scheduler standby on "));
  ASSERT_TRUE(loop_.Start(
      network_->In("cli", {REPORT_LOOP_BIN,
                           "--scheduler=" + Address(0) + "," + Address(1),
                           "--seconds=240", "--tls_ca=" + Ca("ca.crt"),
                           "--token_file=" + Ca("tokens/alice.token")}),
      (dir_ / "loop.log").string()));
  ASSERT_TRUE(Acks(20, 60)) << Tail(dir_ / "loop.log");
  ASSERT_EQ(Leader().first, Address(0));
  const int64_t first_epoch = Leader().second;

  CutOffFromDatabase(true);
  const auto cut = Clock::now();
  // The leader stops serving within about a lease: it stands by.
  bool standing_by = false;
  while (!standing_by && Clock::now() - cut < std::chrono::seconds(20)) {
    standing_by = !Dialctl(Address(0), {"scheduler", "health"}).ok();
  }
  const double stopped_s =
      std::chrono::duration<double>(Clock::now() - cut).count();
  ASSERT_TRUE(standing_by) << Tail(dir_ / "sa.log");
  EXPECT_LE(stopped_s, 2.0 * kLeaseMs / 1000) << Tail(dir_ / "sa.log");
  // Its term ends (the calls waiting on the database fail) within a few
  // leases, still cut off: it refuses as a standby. It cannot know the
  // leader, so it must not name itself (it did, from its own term).
  Ran refused;
  while (Clock::now() - cut < std::chrono::milliseconds(4 * kLeaseMs)) {
    refused = Dialctl(Address(0), {"study", "get", "loop"});
    if (absl::StrContains(refused.output, "standby")) break;
  }
  std::printf("cut off: standing by again after %.2f s\n",
              std::chrono::duration<double>(Clock::now() - cut).count());
  EXPECT_THAT(refused.output, ::testing::HasSubstr("standby"))
      << Tail(dir_ / "sa.log");
  EXPECT_THAT(
      refused.output,
      ::testing::Not(::testing::HasSubstr("the leader is " + Address(0))));
  // The standby takes over, and the client goes on through it.
  ASSERT_TRUE(Acks(20, 60)) << Tail(dir_ / "sb.log");
  EXPECT_EQ(Leader().first, Address(1));
  const int64_t second_epoch = Leader().second;
  EXPECT_GT(second_epoch, first_epoch);
  std::printf("cut off: the leader stood by after %.2f s\n", stopped_s);

  CutOffFromDatabase(false);
  // Healed, it stays a standby and names the new leader once it has read
  // the lease.
  Ran asked;
  const auto healed = Clock::now();
  while (Clock::now() - healed < std::chrono::seconds(30)) {
    asked = Dialctl(Address(0), {"study", "get", "loop"});
    if (absl::StrContains(asked.output, "the leader is")) break;
  }
  EXPECT_FALSE(asked.ok());
  EXPECT_THAT(asked.output, ::testing::HasSubstr("the leader is " + Address(1)))
      << Tail(dir_ / "sa.log");
  ASSERT_TRUE(Acks(20, 60));
  EXPECT_FALSE(Dialctl(Address(0), {"scheduler", "health"}).ok());
  EXPECT_EQ(Leader(), std::make_pair(Address(1), second_epoch));
  EXPECT_THAT(testing::ReadFile(dir_ / "sa.log"),
              ::testing::HasSubstr("standing by again"));
  loop_.Kill(SIGKILL);

  auto conn = storage::PgConnection::Open({local_url_, ""});
  ASSERT_TRUE(conn.ok());
  // Nothing of a's committed after b's takeover (b's first write of the
  // lease row); and a did write before it.
  const std::string a_ip = network_->Address("sa");
  const std::string b_ip = network_->Address("sb");
  auto counts = (*conn)->Exec(
      "WITH takeover AS (SELECT min(pg_xact_commit_timestamp(xmin)) AS at "
      "FROM test_writes WHERE tbl = 'leader' AND client = $2::text::inet) "
      "SELECT count(*) FILTER (WHERE pg_xact_commit_timestamp(w.xmin) < "
      "t.at), count(*) FILTER (WHERE pg_xact_commit_timestamp(w.xmin) >= "
      "t.at), count(t.at) FROM test_writes w, takeover t "
      "WHERE w.client = $1::text::inet AND w.tbl <> 'leader'",
      storage::PgParams().Text(a_ip).Text(b_ip));
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_GT(counts->Int(0, 0), 0) << "a wrote nothing before the cut";
  EXPECT_EQ(counts->Int(0, 1), 0) << "a committed after the takeover";
  EXPECT_GT(counts->Int(0, 2), 0) << "no takeover was recorded";
  // Every acknowledged report is stored, once (the key allows no more).
  for (const auto& [trial, step] : acked_) {
    auto r = (*conn)->Exec(
        "SELECT count(*) FROM metrics m JOIN studies s ON s.id = m.study_id "
        "WHERE s.name = 'loop' AND m.number = $1 AND m.step = $2",
        storage::PgParams().Int(trial).Int(step));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->Int(0, 0), 1) << "trial " << trial << " step " << step;
  }
}

}  // namespace
}  // namespace dial
