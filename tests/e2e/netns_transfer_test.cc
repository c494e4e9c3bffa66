// Hosts that share nothing but a bad network. The test builds network
// namespaces of its own (see tests/e2e/netns.h): a scheduler host, two
// worker hosts and a client host. dial-scheduler runs with TLS, client
// certificates and tokens; each dial-worker keeps checkpoints in a cache
// of its own (--checkpoint-cache) and reaches the scheduler through a
// delaying proxy in its namespace (+100 ms each way), with 2% of its
// packets dropped both ways (nftables). While a study of dial-train trials
// runs, one worker host is cut off for 20 s (its link down, then up).
// Then: the study completes; the cut-off attempt was fenced and its trial
// finished on the other host from the last checkpoint uploaded before the
// cut; every report a worker logged as acknowledged is in the database,
// once, and every trial's history has each evaluation step exactly once.
//
// Needs root, `ip netns` and nft; skips itself (with the reason) without
// them. Its directory (/tmp/dial-netns-transfer-PID) stays after a
// failure, or always with DIAL_KEEP_E2E_DIR=1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dial/v1/service.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tests/e2e/netns.h"
#include "tests/e2e/subprocess.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::Ran;
using testing::ReadFile;
using testing::RunCommand;
using testing::Tail;
using testing::WriteFile;

constexpr int kPort = 7444;
constexpr int kTrials = 4;
constexpr int kEvals = 30;  // reports per trial: steps 100..3000
constexpr auto kPartition = std::chrono::seconds(20);

std::string NftBinary() {
  for (const char* p : {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

class NetnsTransferTest : public ::testing::Test {
 protected:
  // Latency and loss on the workers' links (else a clean network).
  virtual bool Faults() const { return true; }
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (network namespaces); running as uid "
                   << geteuid();
    }
    if (std::string(DIAL_TRAIN_BIN).empty()) {
      GTEST_SKIP() << "built without the trainer";
    }
    ip_ = testing::IpBinary();
    nft_ = NftBinary();
    if (ip_.empty() || !RunCommand({ip_, "netns", "list"}).ok()) {
      GTEST_SKIP() << "`ip netns` is unavailable";
    }
    if (nft_.empty()) GTEST_SKIP() << "nft (nftables) is not installed";
    const std::string net = absl::StrCat("10.214.", 1 + getpid() % 250, ".");
    network_ = std::make_unique<testing::TestNetwork>(ip_, "dxfr", net);
    std::string error;
    if (!network_->Build({"sch", "wa", "wb", "cli"}, &error)) {
      GTEST_SKIP() << "`ip netns add` does not work here: " << error;
    }
    ASSERT_FALSE(HasFailure()) << "the test network could not be built";

    dir_ = fs::temp_directory_path() /
           ("dial-netns-transfer-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    scheduler_ip_ = network_->Address("sch");
    target_ = absl::StrCat(scheduler_ip_, ":", kPort);
    Ran ca = RunCommand({"/bin/bash", DIAL_SOURCE_DIR "/deploy/dev-ca.sh",
                         (dir_ / "ca").string(), "--san", scheduler_ip_});
    ASSERT_TRUE(ca.ok()) << ca.output;

    ASSERT_TRUE(scheduler_.Start(
        network_->In(
            "sch",
            {DIAL_SCHEDULER_BIN, "--db=" + (dir_ / "dial.db").string(),
             "--checkpoint-root=" + (dir_ / "store").string(),
             "--listen=" + target_, "--worker-lease-ms=3000",
             "--tls-cert=" + Ca("server.crt"), "--tls-key=" + Ca("server.key"),
             "--tls-client-ca=" + Ca("ca.crt"),
             "--auth-tokens=" + Ca("auth-tokens")}),
        (dir_ / "scheduler.log").string()));
    ASSERT_TRUE(
        scheduler_
            .WaitFor("dial-scheduler listening on ", std::chrono::seconds(30))
            .has_value())
        << Tail(dir_ / "scheduler.log");
    for (const std::string host : {"wa", "wb"}) {
      ASSERT_NO_FATAL_FAILURE(StartWorkerHost(host));
    }
  }

  void TearDown() override {
    for (auto* p : {&workers_[0], &workers_[1], &proxies_[0], &proxies_[1],
                    &scheduler_}) {
      p->Kill(SIGKILL);
    }
    network_.reset();  // the namespaces, after the processes in them
    if (!dir_.empty() && !HasFailure() && !std::getenv("DIAL_KEEP_E2E_DIR")) {
      fs::remove_all(dir_);
    }
  }

  std::string Ca(const std::string& file) const {
    return (dir_ / "ca" / file).string();
  }

  // A worker host: 2% loss both ways, a proxy adding 100 ms each way, and
  // dial-worker with its own cache, reaching the scheduler through it.
  void StartWorkerHost(const std::string& host) {
    const int i = host == "wa" ? 0 : 1;
    if (!Faults()) {
      ASSERT_NO_FATAL_FAILURE(StartWorker(host, target_));
      return;
    }
    for (const std::string& rule :
         {std::string("add table inet dialloss"),
          std::string("add chain inet dialloss in { type filter hook input "
                      "priority 0; }"),
          std::string("add chain inet dialloss out { type filter hook output "
                      "priority 0; }"),
          std::string("add rule inet dialloss in ip saddr != 127.0.0.0/8 "
                      "numgen random mod 100 < 2 drop"),
          std::string("add rule inet dialloss out ip daddr != 127.0.0.0/8 "
                      "numgen random mod 100 < 2 drop")}) {
      Ran ran = RunCommand(network_->In(host, {nft_, rule}));
      ASSERT_TRUE(ran.ok()) << "nft " << rule << ": " << ran.output;
    }
    ASSERT_TRUE(proxies_[i].Start(
        network_->In(
            host,
            {"/usr/bin/python3", DIAL_SOURCE_DIR "/tests/e2e/delay_proxy.py",
             "--listen=127.0.0.1:0", "--to=" + target_, "--delay-ms=100"}),
        (dir_ / (host + "-proxy.log")).string()));
    auto proxy = proxies_[i].WaitFor("listening on ", std::chrono::seconds(30));
    ASSERT_TRUE(proxy.has_value()) << Tail(dir_ / (host + "-proxy.log"));
    ASSERT_NO_FATAL_FAILURE(StartWorker(host, *proxy));
  }
  void StartWorker(const std::string& host, const std::string& address) {
    const int i = host == "wa" ? 0 : 1;
    ASSERT_TRUE(workers_[i].Start(
        network_->In(
            host, {DIAL_WORKER_BIN, "--scheduler=" + address,
                   "--tls-ca=" + Ca("ca.crt"), "--tls-cert=" + Ca("worker.crt"),
                   "--tls-key=" + Ca("worker.key"),
                   "--token=" + ReadFile(dir_ / "ca/tokens/worker.token"),
                   "--slots=1", "--cpus=1", "--host=" + host,
                   "--trainer=" DIAL_TRAIN_BIN,
                   "--work-dir=" + (dir_ / host).string(),
                   "--checkpoint-cache=" + (dir_ / host / "cache").string(),
                   "--ack-log=" + (dir_ / host / "acks.log").string(),
                   "--acquire-wait-ms=1000", "--grace-s=5"}),
        (dir_ / (host + ".log")).string()));
  }

  // e2e_probe_client in the client host as the admin (who sees workers).
  testing::Ran Probe(const std::vector<std::string>& args,
                     std::chrono::seconds timeout = std::chrono::seconds(30)) {
    std::vector<std::string> argv = {
        PROBE_BIN,
        "--target=" + target_,
        "--tls_ca=" + Ca("ca.crt"),
        "--tls_cert=" + Ca("user.crt"),
        "--tls_key=" + Ca("user.key"),
        "--token_file=" + (dir_ / "ca/tokens/admin.token").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(network_->In("cli", argv), timeout);
  }
  // Creates a study from `yaml`, retrying while the scheduler is not yet
  // reachable over the new links.
  void CreateStudy(const std::string& name, const std::string& yaml) {
    const fs::path spec = dir_ / (name + ".yaml");
    WriteFile(spec, yaml);
    Ran created;
    const auto reach_by =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    do {
      created = Probe({"--action=create-study", "--spec=" + spec.string(),
                       "--call_timeout_s=3"});
    } while (!absl::StrContains(created.output, "RESULT 0 ") &&
             absl::StrContains(created.output, "UNAVAILABLE") &&
             std::chrono::steady_clock::now() < reach_by);
    ASSERT_THAT(created.output, HasSubstr("RESULT 0 OK")) << created.output;
  }
  void WaitDone(const std::string& study) {
    Ran done = Probe({"--action=wait-done", "--study=" + study,
                      "--timeout_s=240", "--call_timeout_s=5"},
                     std::chrono::seconds(260));
    ASSERT_THAT(done.output, HasSubstr("RESULT 0 OK"))
        << done.output << "\nscheduler log:\n"
        << Tail(dir_ / "scheduler.log") << "\nwa log:\n"
        << Tail(dir_ / "wa.log") << "\nwb log:\n"
        << Tail(dir_ / "wb.log");
  }
  v1::Trial GetTrial(const std::string& study, int64_t n) {
    v1::GetTrialResponse got;
    EXPECT_TRUE(ProbeJson({"--action=get-trial", "--study=" + study,
                           "--trial=" + std::to_string(n)},
                          &got));
    return got.trial();
  }

  // The JSON line and RESULT of a probe, parsed into `message`.
  template <typename Message>
  bool ProbeJson(const std::vector<std::string>& args, Message* message) {
    Ran ran = Probe(args);
    std::string json;
    for (absl::string_view line : absl::StrSplit(ran.output, '\n')) {
      if (absl::ConsumePrefix(&line, "JSON ")) json = std::string(line);
    }
    return !json.empty() &&
           google::protobuf::util::JsonStringToMessage(json, message).ok();
  }

  std::string ip_, nft_, scheduler_ip_, target_;
  fs::path dir_;
  std::unique_ptr<testing::TestNetwork> network_;
  testing::Subprocess scheduler_;
  testing::Subprocess proxies_[2];
  testing::Subprocess workers_[2];
};

TEST_F(NetnsTransferTest, LatencyLossAndAPartitionLoseAndDoubleNothing) {
  const std::string study = "faults-" + std::to_string(getpid());
  ASSERT_NO_FATAL_FAILURE(CreateStudy(
      study,
      absl::StrCat("name: ", study, R"(
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.01}}]
searcher: {random: {seed: 5}}
budget: {max_trials: )",
                   kTrials,
                   R"(, max_parallel_trials: 2, max_failures_per_trial: 2}
trial: {trainer: {dataset: synthetic, steps: 3000, eval_every: 100, batch_size: 64, units: 128}}
)")));

  // Cut wb off once its trial has a restore point uploaded past step 200.
  v1::Trial victim;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(150);
  while (std::chrono::steady_clock::now() < deadline &&
         victim.study().empty()) {
    v1::ListTrialsResponse listed;
    if (!ProbeJson({"--action=list-trials", "--study=" + study}, &listed)) {
      continue;
    }
    for (const v1::Trial& t : listed.trials()) {
      if (t.state() == v1::RUNNING && absl::StartsWith(t.worker_id(), "wb") &&
          t.checkpoint_step() >= 300) {
        victim = t;
      }
    }
  }
  ASSERT_FALSE(victim.study().empty())
      << "wb never ran a trial to an uploaded checkpoint\nwb log:\n"
      << Tail(dir_ / "wb.log");
  network_->SetLink("wb", false);
  const auto heal_at = std::chrono::steady_clock::now() + kPartition;
  // The partition lasts at least its 20 s (the fault itself, not a wait
  // for a result); meanwhile wb's lease runs out and wa takes the trial
  // over. wa has one slot: if it was busy with another trial, the
  // partition lasts until wa has started the victim (at most 150 s more),
  // so a healed wb cannot win it back first.
  std::this_thread::sleep_until(heal_at);
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(150);
  for (v1::Trial now = GetTrial(study, victim.number());
       !(absl::StartsWith(now.worker_id(), "wa") &&
         now.attempt() > victim.attempt()) &&
       now.state() != v1::COMPLETED &&
       std::chrono::steady_clock::now() < give_up;
       now = GetTrial(study, victim.number())) {
  }
  network_->SetLink("wb", true);

  ASSERT_NO_FATAL_FAILURE(WaitDone(study));

  // Every trial completed, each evaluation step once, in order.
  std::map<int64_t, std::set<int64_t>> recorded;
  for (int64_t n = 0; n < kTrials; ++n) {
    const v1::Trial t = GetTrial(study, n);
    EXPECT_EQ(t.state(), v1::COMPLETED) << n << ": " << t.error();
    ASSERT_EQ(t.metric_history_size(), kEvals) << "trial " << n;
    for (int i = 0; i < kEvals; ++i) {
      EXPECT_EQ(t.metric_history(i).step(), 100 * (i + 1)) << "trial " << n;
      recorded[n].insert(t.metric_history(i).step());
    }
    if (n == victim.number()) {
      // Taken over by wa after wb's lease ran out.
      EXPECT_GE(t.attempt(), victim.attempt() + 1);
      EXPECT_TRUE(absl::StartsWith(t.worker_id(), "wa")) << t.worker_id();
    }
  }
  // Every acknowledged report is on record.
  int acks = 0;
  for (const std::string host : {"wa", "wb"}) {
    for (absl::string_view line : absl::StrSplit(
             ReadFile(dir_ / host / "acks.log"), '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      ASSERT_EQ(f.size(), 5u) << line;
      if (f[1] != study) continue;
      ++acks;
      EXPECT_TRUE(recorded[std::stoll(f[2])].count(std::stoll(f[4])))
          << "acknowledged but not recorded: " << line;
    }
  }
  EXPECT_GE(acks, kTrials * kEvals);
  // wa resumed the victim from the checkpoint wb had uploaded (or a later
  // one), fetched over the network into its own cache.
  const std::string name =
      absl::StrCat(study, "/", victim.number(), " attempt ");
  const std::string wa_log = ReadFile(dir_ / "wa.log");
  EXPECT_THAT(wa_log, HasSubstr("downloaded checkpoint " + study + "/" +
                                std::to_string(victim.number()) + "/"))
      << Tail(dir_ / "wa.log");
  EXPECT_THAT(wa_log, HasSubstr(" from checkpoint " + study + "/" +
                                std::to_string(victim.number()) + "/"));
  // wb learns its attempt is gone once it reaches the scheduler again,
  // and kills it instead of finishing it (polled: at most 60 s).
  const auto told_by =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string wb_log;
  auto fenced = [&] {
    wb_log = ReadFile(dir_ / "wb.log");
    return absl::StrContains(wb_log, "killing it") ||
           absl::StrContains(wb_log, "no longer knows this worker");
  };
  while (!fenced() && std::chrono::steady_clock::now() < told_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(fenced()) << Tail(dir_ / "wb.log");
}

// The same hosts on a clean network: an ASHA study with promotion (trials
// pause and resume on whichever host is free) and a PBT study (exploits
// copy checkpoints between hosts) run at once and complete.
class NetnsHostsTest : public NetnsTransferTest {
 protected:
  bool Faults() const override { return false; }
};

TEST_F(NetnsHostsTest, AshaPromotionAndPbtCompleteAcrossTwoHosts) {
  const std::string pid = std::to_string(getpid());
  const std::string asha = "promo-" + pid, pbt = "pbt-" + pid;
  ASSERT_NO_FATAL_FAILURE(CreateStudy(asha, "name: " + asha + R"(
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 1.0e-6, max: 0.01, scale: LOG}}]
searcher: {random: {seed: 4}}
scheduler: {asha: {min_steps: 50, max_steps: 450, reduction_factor: 3, promotion: true}}
budget: {max_trials: 9, max_parallel_trials: 2}
trial: {trainer: {dataset: synthetic, steps: 450, eval_every: 50, batch_size: 32}}
)"));
  // Two slots shared equally would run one PBT member at a time, and a
  // population exploits only members in step with it: PBT goes first.
  ASSERT_NO_FATAL_FAILURE(CreateStudy(pbt, "name: " + pbt + R"(
priority: 1
objective: {metric: val_loss, goal: MINIMIZE}
search_space: [{name: lr, discrete: {values: [1.0e-7, 1.0e-6, 0.003, 0.01]}}]
searcher: {grid: {}}
scheduler: {pbt: {perturbation_interval: 100, quantile: 0.25, seed: 2}}
budget: {max_trials: 4, max_parallel_trials: 4}
trial: {trainer: {dataset: synthetic, steps: 800, eval_every: 50, batch_size: 32}}
)"));
  ASSERT_NO_FATAL_FAILURE(WaitDone(asha));
  ASSERT_NO_FATAL_FAILURE(WaitDone(pbt));

  // Each reported step once, in order, in every trial of both studies.
  auto steps_once = [](const v1::Trial& t) {
    for (int i = 0; i < t.metric_history_size(); ++i) {
      EXPECT_EQ(t.metric_history(i).step(), 50 * (i + 1))
          << t.study() << "/" << t.number();
    }
  };
  int resumed = 0, completed = 0;
  for (int64_t n = 0; n < 9; ++n) {
    const v1::Trial t = GetTrial(asha, n);
    EXPECT_TRUE(t.state() == v1::COMPLETED || t.state() == v1::STOPPED)
        << n << ": " << v1::TrialState_Name(t.state()) << " " << t.error();
    completed += t.state() == v1::COMPLETED;
    resumed += t.attempt() >= 2;
    steps_once(t);
  }
  EXPECT_GE(completed, 1);
  EXPECT_GE(resumed, 1);
  int exploits = 0;
  for (int64_t n = 0; n < 4; ++n) {
    const v1::Trial t = GetTrial(pbt, n);
    EXPECT_EQ(t.state(), v1::COMPLETED) << n << ": " << t.error();
    EXPECT_EQ(t.last_step(), 800);
    steps_once(t);
    for (const v1::LineageEntry& e : t.lineage()) {
      ++exploits;
      // The copy the trial restored from is in the cache of the host that
      // ran it; its source came from the scheduler's store.
      const fs::path copy = fs::path(pbt) / std::to_string(n) /
                            ("from-" + std::to_string(e.source_trial()) + "-" +
                             std::to_string(e.source_step())) /
                            "MANIFEST";
      EXPECT_TRUE(fs::exists(dir_ / "wa/cache" / copy) ||
                  fs::exists(dir_ / "wb/cache" / copy))
          << copy;
    }
  }
  EXPECT_GE(exploits, 1);
  // Checkpoints crossed between the hosts: some resume or exploit on one
  // host used a checkpoint the other had uploaded.
  const std::string logs =
      ReadFile(dir_ / "wa.log") + ReadFile(dir_ / "wb.log");
  EXPECT_THAT(logs, HasSubstr("downloaded checkpoint "));
}

}  // namespace
}  // namespace dial
