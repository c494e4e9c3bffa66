// Failover end to end (issue 35): a real PostgreSQL server, two
// dial-scheduler processes on it (one leads, one stands by), two
// dial-workers and an ask/tell client that all list both schedulers. The
// leader is SIGKILLed three times; each time the standby serves within
// 5 s. At the end every report a worker (--ack-log) or the client saw
// acknowledged is stored exactly once, and both studies complete.
//
// bench/ha/failover.sh runs it with more kills and the default lease:
// DIAL_FAILOVER_KILLS (default 3) and DIAL_FAILOVER_LEASE_MS (default
// 1500); it prints each failover's time and their median and max.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/spec.h"
#include "storage/pg_leader_lease.h"
#include "storage/testing/pg_server.h"
#include "tests/e2e/subprocess.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Step = std::tuple<std::string, int64_t, int64_t>;  // study, trial, step

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}
const int kKills = EnvInt("DIAL_FAILOVER_KILLS", 3);
const std::string kLeaseMs =
    std::to_string(EnvInt("DIAL_FAILOVER_LEASE_MS", 1500));

class FailoverE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dial-e2e-failover-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto server = storage::testing::PgServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    pg_ = std::move(*server);
    auto url = pg_->NewDatabase("failover");
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  void TearDown() override {
    stop_client_ = true;
    if (client_thread_.joinable()) client_thread_.join();
    client_.reset();
    for (auto& w : workers_) w.Kill(SIGKILL);
    for (auto& s : schedulers_) s.Kill(SIGKILL);
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Starts scheduler `i` on `listen`; returns the address it stands by on.
  std::string StartScheduler(int i, const std::string& listen) {
    const std::string log =
        (dir_ / ("scheduler" + std::to_string(i) + ".log")).string();
    EXPECT_TRUE(schedulers_[i].Start(
        {DIAL_SCHEDULER_BIN, "--db=" + url_,
         "--checkpoint-root=" + (dir_ / "ckpt").string(), "--listen=" + listen,
         "--leader-lease-ms=" + kLeaseMs},
        log));
    auto address = schedulers_[i].WaitFor("dial-scheduler standby on ",
                                          std::chrono::seconds(30));
    EXPECT_TRUE(address.has_value()) << "see " << log;
    return address.value_or("");
  }
  // Which scheduler the database says leads (-1: none yet).
  int Leader() {
    auto lease = storage::PgLeaderLease::Create(
        {{url_, ""}, "test-observer", "", absl::Seconds(1)});
    if (!lease.ok()) return -1;
    auto state = (*lease)->Read();
    if (!state.ok() || state->expired) return -1;
    for (int i = 0; i < 2; ++i) {
      if (state->address == addresses_[i]) return i;
    }
    return -1;
  }
  static bool WaitUntil(const std::function<bool()>& done,
                        std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // Runs `call` until it is not UNAVAILABLE (a failover), at most 30 s.
  template <typename Fn>
  static auto Retry(Fn call) {
    auto result = call();
    for (int i = 0; i < 300 && absl::IsUnavailable(result.status()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      result = call();
    }
    return result;
  }
  // The ask/tell client: trials of 10 steps until the budget is spent,
  // each acknowledged report noted.
  void RunClient(client::DialClient& c) {
    while (!stop_client_) {
      auto s = Retry([&] { return c.SuggestTrials("asktell", 1, "cli"); });
      if (!s.ok() || s->trials_size() == 0) return;
      const int64_t number = s->trials(0).number();
      for (int step = 1; step <= 10 && !stop_client_; ++step) {
        auto d = Retry([&] {
          return c.ReportIntermediate("asktell", number, step,
                                      {{"loss", 1.0 / step}});
        });
        if (!d.ok()) return;
        std::lock_guard<std::mutex> lock(mu_);
        acked_.insert({"asktell", number, step});
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!Retry([&] {
             return c.CompleteTrial("asktell", number, {{"loss", 0.1}});
           }).ok()) {
        return;
      }
    }
  }
  size_t Acked() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = acked_.size();
    for (int w = 0; w < 2; ++w) {
      std::ifstream in(dir_ / ("ack" + std::to_string(w)));
      std::string line;
      while (std::getline(in, line)) ++n;
    }
    return n;
  }

  fs::path dir_;
  std::unique_ptr<storage::testing::PgServer> pg_;
  std::string url_;
  testing::Subprocess schedulers_[2];
  std::string addresses_[2];
  testing::Subprocess workers_[2];
  std::unique_ptr<client::DialClient> client_;
  std::thread client_thread_;
  std::atomic<bool> stop_client_{false};
  std::mutex mu_;
  std::set<Step> acked_;
};

TEST_F(FailoverE2eTest, KillingTheLeaderThreeTimesLosesNothingAcknowledged) {
  addresses_[0] = StartScheduler(0, "127.0.0.1:0");
  ASSERT_TRUE(
      schedulers_[0]
          .WaitFor("dial-scheduler listening on ", std::chrono::seconds(30))
          .has_value());
  addresses_[1] = StartScheduler(1, "127.0.0.1:0");
  const std::string targets = addresses_[0] + "," + addresses_[1];
  auto client = client::DialClient::Create({targets, absl::Seconds(10)});
  ASSERT_TRUE(client.ok()) << client.status();
  // A member: the client thread uses it until TearDown joins it.
  client_ = std::move(*client);
  client::DialClient& c = *client_;

  auto workers = ParseStudySpec(R"(name: workers
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: )" + std::to_string(std::max(4, 2 * kKills)) +
                                R"(, max_parallel_trials: 2}
trial:
  command:
    argv: [/usr/bin/python3, )" DIAL_SOURCE_DIR R"(/tests/e2e/slow_trial.py]
    env: {STEPS: "60", STEP_SLEEP: "0.1"}
)");
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_TRUE(Retry([&] { return c.CreateStudy(*workers); }).ok());
  auto asktell = ParseStudySpec(R"(name: asktell
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: )" + std::to_string(std::max(8, 3 * kKills)) +
                                R"(, max_parallel_trials: 1}
)");
  ASSERT_TRUE(asktell.ok()) << asktell.status();
  ASSERT_TRUE(Retry([&] { return c.CreateStudy(*asktell); }).ok());
  for (int w = 0; w < 2; ++w) {
    const std::string host = "w" + std::to_string(w);
    ASSERT_TRUE(workers_[w].Start(
        {DIAL_WORKER_BIN, "--scheduler=" + targets, "--slots=1", "--cpus=1",
         "--host=" + host, "--work-dir=" + (dir_ / host).string(),
         "--checkpoint-root=" + (dir_ / "ckpt").string(),
         "--acquire-wait-ms=1000", "--grace-s=5",
         "--allow-command=/usr/bin/python3",
         "--ack-log=" + (dir_ / ("ack" + std::to_string(w))).string()},
        (dir_ / (host + ".log")).string()));
  }
  client_thread_ = std::thread([&] { RunClient(c); });

  std::vector<double> failovers;
  for (int kill = 0; kill < kKills; ++kill) {
    SCOPED_TRACE("kill " + std::to_string(kill + 1));
    const size_t before = Acked();
    ASSERT_TRUE(WaitUntil([&] { return Acked() >= before + 10; },
                          std::chrono::seconds(60)))
        << "no progress; see " << dir_;
    const int leader = Leader();
    ASSERT_GE(leader, 0);
    const int standby = 1 - leader;
    schedulers_[leader].Kill(SIGKILL);
    const auto killed = Clock::now();
    // The standby serves: a read through the client, which follows it.
    ASSERT_TRUE(WaitUntil([&] { return c.GetStudy("workers").ok(); },
                          std::chrono::seconds(30)));
    const double took =
        std::chrono::duration<double>(Clock::now() - killed).count();
    EXPECT_LE(took, 5.0) << "the standby took over after " << took << " s";
    std::printf("kill %d: the standby served %.2f s after the leader died\n",
                kill + 1, took);
    failovers.push_back(took);
    EXPECT_EQ(Leader(), standby);
    // The killed one comes back, on its address, as the standby.
    EXPECT_EQ(StartScheduler(leader, addresses_[leader]), addresses_[leader]);
  }

  std::sort(failovers.begin(), failovers.end());
  std::printf(
      "failover over %zu kills (lease %s ms): median %.2f s, max %.2f s\n",
      failovers.size(), kLeaseMs.c_str(),
      (failovers[(failovers.size() - 1) / 2] +
       failovers[failovers.size() / 2]) /
          2,
      failovers.back());

  // Both studies complete.
  for (const char* name : {"workers", "asktell"}) {
    ASSERT_TRUE(WaitUntil(
        [&] {
          auto s = c.GetStudy(name);
          return s.ok() && s->state() == v1::STUDY_COMPLETED;
        },
        std::chrono::seconds(120)))
        << name << " did not complete; see " << dir_;
  }
  client_thread_.join();
  // Every acknowledged report is stored exactly once.
  std::set<Step> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all = acked_;
  }
  for (int w = 0; w < 2; ++w) {
    std::ifstream in(dir_ / ("ack" + std::to_string(w)));
    std::string worker, study;
    int64_t trial, attempt, step;
    while (in >> worker >> study >> trial >> attempt >> step) {
      all.insert({study, trial, step});
    }
  }
  ASSERT_GT(all.size(), 50u);
  std::map<std::pair<std::string, int64_t>, std::map<int64_t, int>> stored;
  for (const char* name : {"workers", "asktell"}) {
    auto trials = c.ListAllTrials(name, {});
    ASSERT_TRUE(trials.ok()) << trials.status();
    for (const auto& t : *trials) {
      EXPECT_EQ(t.state(), v1::COMPLETED) << name << " " << t.number();
      auto full = c.GetTrial(name, t.number());
      ASSERT_TRUE(full.ok());
      for (const auto& p : full->metric_history()) {
        ++stored[{name, t.number()}][p.step()];
      }
    }
  }
  for (const auto& [study, trial, step] : all) {
    EXPECT_EQ((stored[std::make_pair(study, trial)][step]), 1)
        << study << " trial " << trial << " step " << step;
  }
  for (const auto& [key, steps] : stored) {
    for (const auto& [step, n] : steps) {
      EXPECT_EQ(n, 1) << key.first << " " << key.second << " step " << step;
    }
  }
}

}  // namespace
}  // namespace dial
