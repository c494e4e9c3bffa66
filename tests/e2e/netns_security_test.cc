// A secured deployment on a network of its own, attacked from a host on
// that network. The test builds network namespaces (names unique to this
// process) joined by veth pairs on a bridge that lives in a namespace of
// its own: the scheduler's, a worker's, a legitimate user's (alice) and an
// attacker's. No namespace has a default route, so no packet of the test
// can leave them. dial-scheduler runs with TLS, client certificates (mTLS)
// and bearer tokens from deploy/dev-ca.sh; dial-worker with the worker
// certificate and token, allowed to run only /usr/bin/python3. Alice runs a
// small worker-run study; the attacker (e2e_probe_client run with `ip
// netns exec`) tries each known attack, every one must be refused, and
// alice's study must still end with every trial COMPLETED.
//
// Needs root and `ip netns`; skips itself (with the reason) without them.
// Its directory (/tmp/dial-netns-sec-PID-TEST: logs, transcript.log of every
// probe) stays after a failure, or always with DIAL_KEEP_E2E_DIR=1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dial/v1/service.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tests/e2e/netns.h"
#include "tests/e2e/subprocess.h"

namespace dial {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using testing::IpBinary;
using ::testing::Not;
using testing::Ran;
using testing::ReadFile;
using testing::RunCommand;
using testing::Tail;
using testing::WriteFile;

constexpr int kPort = 7443;
constexpr int kSteps = 5;  // reports of each of alice's trials
constexpr auto kProbeTimeout = std::chrono::seconds(150);

// Credentials a probe connects with.
struct Creds {
  bool tls = true;
  std::string ca, cert, key;  // cert empty: no client certificate
  std::string token_file;     // empty: no token
};

// What e2e_probe_client printed.
struct Probed {
  int code = -1;
  std::string code_name = "NO_RESULT";
  std::string message;
  std::vector<std::string> json;  // its JSON lines, in order
  std::string output;             // everything, for failure messages
  std::string Json() const { return json.empty() ? "" : json.back(); }
};

std::ostream& operator<<(std::ostream& os, const Probed& p) {
  return os << p.code_name << " (" << p.message << ")\n--- probe output:\n"
            << p.output;
}

class NetnsSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (network namespaces); running as uid "
                   << geteuid();
    }
    ip_ = IpBinary();
    if (ip_.empty() || !RunCommand({ip_, "netns", "list"}).ok()) {
      GTEST_SKIP() << "`ip netns` is unavailable (no iproute2 `ip`, or it "
                      "cannot list network namespaces)";
    }
    const std::string pid = std::to_string(getpid());
    const int subnet = 1 + getpid() % 250;
    net_ = absl::StrCat("10.213.", subnet, ".");
    network_ = std::make_unique<testing::TestNetwork>(ip_, "dsec", net_);
    std::string error;
    if (!network_->Build({"sch", "wrk", "usr", "atk"}, &error)) {
      GTEST_SKIP() << "`ip netns add` does not work here: " << error;
    }
    ASSERT_FALSE(HasFailure()) << "the test network could not be built";

    dir_ = fs::temp_directory_path() /
           ("dial-netns-sec-" + pid + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "backups");
    fs::create_directories(dir_ / "secrets");
    scheduler_ip_ = net_ + "1";
    target_ = absl::StrCat(scheduler_ip_, ":", kPort);

    Ran ca = RunCommand({"/bin/bash", DIAL_SOURCE_DIR "/deploy/dev-ca.sh",
                         (dir_ / "ca").string(), "--san", scheduler_ip_});
    ASSERT_TRUE(ca.ok()) << ca.output;
    Ran evil = RunCommand({"/bin/bash", DIAL_SOURCE_DIR "/deploy/dev-ca.sh",
                           (dir_ / "evil-ca").string()});
    ASSERT_TRUE(evil.ok()) << evil.output;

    // The worker's secret: only the worker's --secrets-dir holds it.
    std::random_device random;
    secret_ = absl::StrCat("s3cret-", random(), "-", random());
    WriteFile(dir_ / "secrets/e2e_api_key", secret_);
    fs::permissions(dir_ / "secrets/e2e_api_key", fs::perms::owner_read);

    ASSERT_TRUE(scheduler_.Start(
        {ip_, "netns", "exec", Ns("sch"), DIAL_SCHEDULER_BIN,
         "--db=" + (dir_ / "dial.db").string(),
         "--checkpoint-root=" + (dir_ / "ckpt").string(), "--listen=" + target_,
         "--worker-lease-ms=3000", "--tls-cert=" + Ca("server.crt"),
         "--tls-key=" + Ca("server.key"), "--tls-client-ca=" + Ca("ca.crt"),
         "--auth-tokens=" + Ca("auth-tokens"),
         "--backup-dir=" + (dir_ / "backups").string()},
        (dir_ / "scheduler.log").string()));
    ASSERT_TRUE(
        scheduler_
            .WaitFor("dial-scheduler listening on ", std::chrono::seconds(30))
            .has_value())
        << "dial-scheduler did not start with TLS, --tls-client-ca and "
           "--auth-tokens; its log:\n"
        << Tail(dir_ / "scheduler.log");

    ASSERT_TRUE(worker_.Start(
        {ip_, "netns", "exec", Ns("wrk"), DIAL_WORKER_BIN,
         "--scheduler=" + target_, "--tls-ca=" + Ca("ca.crt"),
         "--tls-cert=" + Ca("worker.crt"), "--tls-key=" + Ca("worker.key"),
         "--token=" + ReadFile(dir_ / "ca/tokens/worker.token"),
         "--allow-command=/usr/bin/python3",
         "--secrets-dir=" + (dir_ / "secrets").string(), "--slots=2",
         "--cpus=2", "--host=wsec", "--work-dir=" + (dir_ / "wsec").string(),
         "--checkpoint-root=" + (dir_ / "ckpt").string(),
         "--acquire-wait-ms=1000", "--grace-s=5"},
        (dir_ / "worker.log").string()));
  }

  void TearDown() override {
    // A trial left waiting at the gate goes on (and ends on its closed
    // report pipe) instead of waiting out its timeout.
    if (!dir_.empty()) WriteFile(dir_ / "gate", "");
    worker_.Kill(SIGKILL);
    scheduler_.Kill(SIGKILL);
    for (auto& p : probes_) p->Kill(SIGKILL);
    network_.reset();  // the namespaces, after the processes in them
    if (!dir_.empty() && !HasFailure() && !std::getenv("DIAL_KEEP_E2E_DIR")) {
      fs::remove_all(dir_);
    }
  }

  std::string Ns(const std::string& role) const { return network_->Ns(role); }
  std::string Ca(const std::string& file) const {
    return (dir_ / "ca" / file).string();
  }
  std::string Token(const std::string& name) const {
    return (dir_ / "ca/tokens" / (name + ".token")).string();
  }
  // The dev CA's user certificate with `name`'s token (none if empty).
  Creds User(const std::string& name) const {
    return {true, Ca("ca.crt"), Ca("user.crt"), Ca("user.key"),
            name.empty() ? "" : Token(name)};
  }
  Creds Worker() const {
    return {true, Ca("ca.crt"), Ca("worker.crt"), Ca("worker.key"),
            Token("worker")};
  }

  // Runs e2e_probe_client in namespace `host` (usr or atk) with `creds`.
  Probed Probe(const std::string& host, const Creds& creds,
               const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        ip_, "netns", "exec", Ns(host), PROBE_BIN, "--target=" + target_};
    if (creds.tls) argv.push_back("--tls_ca=" + creds.ca);
    if (!creds.cert.empty()) {
      argv.push_back("--tls_cert=" + creds.cert);
      argv.push_back("--tls_key=" + creds.key);
    }
    if (!creds.token_file.empty()) {
      argv.push_back("--token_file=" + creds.token_file);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    probes_.push_back(std::make_unique<testing::Subprocess>());
    testing::Subprocess& p = *probes_.back();
    Probed probed;
    if (!p.Start(argv, (dir_ / "probes.log").string())) return probed;
    const auto deadline = std::chrono::steady_clock::now() + kProbeTimeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      auto line = p.ReadLine(left);
      if (!line) break;
      absl::StrAppend(&probed.output, *line, "\n");
      absl::string_view rest = *line;
      if (absl::ConsumePrefix(&rest, "JSON ")) {
        probed.json.emplace_back(rest);
      } else if (absl::ConsumePrefix(&rest, "RESULT ")) {
        std::vector<std::string> f =
            absl::StrSplit(rest, absl::MaxSplits(' ', 2));
        probed.code = std::stoi(f[0]);
        probed.code_name = f.size() > 1 ? f[1] : "";
        probed.message = f.size() > 2 ? f[2] : "";
      }
    }
    p.Kill(SIGKILL);
    probes_.pop_back();
    // A transcript, for a failure's post-mortem.
    std::ofstream(dir_ / "transcript.log", std::ios::app)
        << host << ": " << absl::StrJoin(args, " ") << "\n  -> "
        << probed.code_name << " " << probed.message << "\n";
    return probed;
  }

  template <typename Message>
  static Message Parse(const std::string& json) {
    Message m;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &m).ok())
        << json;
    return m;
  }

  // Polls (bounded) until the scheduler answers alice over the network
  // (the links may take a moment to carry traffic).
  void WaitReachable() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    Probed p;
    while (std::chrono::steady_clock::now() < deadline) {
      p = Probe("usr", User("alice"),
                {"--action=get-study", "--study=none", "--call_timeout_s=2"});
      if (p.code_name != "UNAVAILABLE" && p.code_name != "DEADLINE_EXCEEDED" &&
          p.code >= 0) {
        return;
      }
    }
    FAIL() << "the scheduler never answered alice over the test network: " << p
           << "\nscheduler log:\n"
           << Tail(dir_ / "scheduler.log");
  }

  std::string ip_, net_, scheduler_ip_, target_, secret_;
  fs::path dir_;
  std::unique_ptr<testing::TestNetwork> network_;
  testing::Subprocess scheduler_;
  testing::Subprocess worker_;
  std::vector<std::unique_ptr<testing::Subprocess>> probes_;
};

// A refusal of a caller acting on a study it does not own: denied, or
// (where the scheduler hides foreign studies) not found.
const auto kDenied = AnyOf(Eq("PERMISSION_DENIED"), Eq("NOT_FOUND"));

TEST_F(NetnsSecurityTest, AnAttackerOnTheNetworkIsRefusedEverything) {
  ASSERT_NO_FATAL_FAILURE(WaitReachable());
  const std::string pid = std::to_string(getpid());
  const std::string study = "alice-" + pid;
  const fs::path gate = dir_ / "gate";

  // Alice's worker-run study. Its trials need the worker's secret, which
  // they check by its hash: the spec holds only the secret's name.
  Ran hash = RunCommand(
      {"/usr/bin/python3", "-c",
       "import hashlib,sys; print(hashlib.sha256(sys.argv[1].encode())"
       ".hexdigest())",
       secret_});
  ASSERT_TRUE(hash.ok()) << hash.output;
  WriteFile(dir_ / "alice.yaml",
            absl::StrCat("name: ", study, R"(
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
searcher: {random: {seed: 3}}
budget: {max_trials: 3, max_parallel_trials: 1, max_failures_per_trial: 0}
trial:
  command:
    argv: [/usr/bin/python3, )",
                         DIAL_SOURCE_DIR, R"(/tests/e2e/secret_trial.py]
    env: {STEPS: ")",
                         kSteps, R"(", GATE_FILE: ")", gate.string(),
                         R"(", SECRET_SHA256: ")",
                         absl::StripAsciiWhitespace(hash.output), R"("}
    secret_env: {DIAL_TEST_SECRET: e2e_api_key}
)"));
  Probed created = Probe(
      "usr", User("alice"),
      {"--action=create-study", "--spec=" + (dir_ / "alice.yaml").string()});
  ASSERT_EQ(created.code_name, "OK") << created;

  // The admin sees which worker runs trial N, and its attempt (what a
  // stolen log line would tell an attacker).
  Probed running =
      Probe("usr", User("admin"),
            {"--action=wait-running", "--study=" + study, "--timeout_s=90"});
  ASSERT_EQ(running.code_name, "OK") << running << "\nworker log:\n"
                                     << Tail(dir_ / "worker.log");
  const auto listed = Parse<v1::ListTrialsResponse>(running.Json());
  ASSERT_GE(listed.trials_size(), 1);
  const v1::Trial victim = listed.trials(0);
  const std::string trial = std::to_string(victim.number());
  ASSERT_FALSE(victim.worker_id().empty());
  const std::string worker_id = victim.worker_id();
  const std::string attempt = std::to_string(victim.attempt());

  // --- The transport: no TLS, no client certificate, a foreign CA's. ---
  const std::vector<std::string> get = {"--action=get-study",
                                        "--study=" + study};
  {
    Creds plaintext = User("alice");
    plaintext.tls = false;
    plaintext.cert.clear();
    Probed p = Probe("atk", plaintext, get);
    EXPECT_EQ(p.code_name, "UNAVAILABLE") << "plaintext: " << p;
    Creds no_cert = User("alice");
    no_cert.cert.clear();
    p = Probe("atk", no_cert, get);
    EXPECT_EQ(p.code_name, "UNAVAILABLE") << "TLS without a client cert: " << p;
    Creds foreign = User("alice");
    foreign.cert = (dir_ / "evil-ca/user.crt").string();
    foreign.key = (dir_ / "evil-ca/user.key").string();
    p = Probe("atk", foreign, get);
    EXPECT_EQ(p.code_name, "UNAVAILABLE")
        << "a client certificate from another CA: " << p;
  }

  // --- Tokens: none, a made-up one. ---
  {
    Probed p = Probe("atk", User(""), get);
    EXPECT_EQ(p.code_name, "UNAUTHENTICATED") << "no token: " << p;
    p = Probe("atk", User(""),
              {"--action=register-acquire", "--call_timeout_s=5"});
    EXPECT_EQ(p.code_name, "UNAUTHENTICATED")
        << "worker calls, no token: " << p;
    EXPECT_THAT(p.output, Not(HasSubstr("ACQUIRE 0 ")));
    WriteFile(dir_ / "made-up.token", std::string(64, 'a'));
    Creds made_up = User("");
    made_up.token_file = (dir_ / "made-up.token").string();
    p = Probe("atk", made_up, get);
    EXPECT_EQ(p.code_name, "UNAUTHENTICATED") << "a made-up token: " << p;
  }

  // --- Bob (a user) on alice's study. ---
  const Creds bob = User("bob");
  for (const std::string action : {"get-study", "list-trials", "update-study",
                                   "stop-study", "delete-study"}) {
    Probed p = Probe("atk", bob, {"--action=" + action, "--study=" + study});
    EXPECT_THAT(p.code_name, kDenied) << "bob " << action << ": " << p;
  }
  {
    Probed p =
        Probe("atk", bob,
              {"--action=get-trial", "--study=" + study, "--trial=" + trial});
    EXPECT_THAT(p.code_name, kDenied) << "bob get-trial: " << p;
    p = Probe("atk", bob,
              {"--action=complete-trial", "--study=" + study,
               "--trial=" + trial, "--loss=-1e9"});
    EXPECT_THAT(p.code_name, kDenied) << "bob complete-trial -1e9: " << p;
    p = Probe("atk", bob,
              {"--action=report-intermediate", "--study=" + study,
               "--trial=" + trial, "--step=3", "--loss=-1e9"});
    EXPECT_THAT(p.code_name, kDenied) << "bob report-intermediate: " << p;
  }
  // A viewer reads but does not write; a worker's token (stolen from a
  // worker node) neither reads studies nor creates them, so it cannot make
  // workers run anything.
  {
    Probed p = Probe("atk", User("viewer"),
                     {"--action=stop-study", "--study=" + study});
    EXPECT_EQ(p.code_name, "PERMISSION_DENIED") << "viewer stop-study: " << p;
    p = Probe("atk", User("viewer"),
              {"--action=complete-trial", "--study=" + study,
               "--trial=" + trial, "--loss=-1e9"});
    EXPECT_EQ(p.code_name, "PERMISSION_DENIED") << "viewer complete: " << p;
    // (A study it may not read is NOT_FOUND to it, as to any user.)
    p = Probe("atk", Worker(), get);
    EXPECT_EQ(p.code_name, "NOT_FOUND") << "worker get-study: " << p;
    WriteFile(dir_ / "worker-made.yaml", absl::StrCat("name: wk-", pid, R"yaml(
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: 1}
trial: {command: {argv: [/usr/bin/python3, -c, "print(1)"]}}
)yaml"));
    p = Probe("atk", Worker(),
              {"--action=create-study",
               "--spec=" + (dir_ / "worker-made.yaml").string()});
    EXPECT_EQ(p.code_name, "PERMISSION_DENIED") << "worker create: " << p;
  }

  // Ask/tell writes never land on a worker-run trial, even its owner's.
  {
    Probed p = Probe("usr", User("alice"),
                     {"--action=complete-trial", "--study=" + study,
                      "--trial=" + trial, "--loss=-1e9"});
    EXPECT_NE(p.code_name, "OK") << "alice completes a worker-run trial: " << p;
    p = Probe("usr", User("alice"),
              {"--action=report-intermediate", "--study=" + study,
               "--trial=" + trial, "--step=3"});
    EXPECT_NE(p.code_name, "OK")
        << "alice reports on a worker-run trial: " << p;
  }

  // --- WorkerService with a user's token. ---
  {
    Probed p =
        Probe("atk", bob, {"--action=register-acquire", "--call_timeout_s=5"});
    EXPECT_EQ(p.code_name, "PERMISSION_DENIED") << "bob as a worker: " << p;
    EXPECT_THAT(p.output, HasSubstr("REGISTER 7 PERMISSION_DENIED"));
    EXPECT_THAT(p.output, HasSubstr("ACQUIRE 7 PERMISSION_DENIED"));
  }

  // --- The running attempt without its lease token: with bob's token,
  // and with the worker's own certificate and token. ---
  const std::vector<std::string> fence = {
      "--study=" + study, "--trial=" + trial, "--worker_id=" + worker_id,
      "--attempt=" + attempt};
  auto with = [&](std::vector<std::string> args,
                  const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  for (const Creds& creds : {bob, Worker()}) {
    const std::string who = creds.token_file == Token("bob") ? "bob" : "worker";
    Probed p = Probe("atk", creds,
                     with(fence, {"--action=report-progress",
                                  "--step=1000000000000", "--loss=-1e9"}));
    EXPECT_NE(p.code_name, "OK") << who << ", step 10^12, no lease: " << p;
    if (who == "bob") {
      EXPECT_EQ(p.code_name, "PERMISSION_DENIED") << p;
    }
    p = Probe("atk", creds,
              with(fence, {"--action=report-progress", "--step=1000000000000",
                           "--lease_token=" + std::string(32, '0')}));
    EXPECT_NE(p.code_name, "OK") << who << ", a guessed lease: " << p;
    p = Probe("atk", creds,
              with(fence, {"--action=finish-trial", "--requeue"}));
    EXPECT_NE(p.code_name, "OK") << who << ", requeue without lease: " << p;
    p = Probe("atk", creds, with(fence, {"--action=finish-trial"}));
    EXPECT_NE(p.code_name, "OK") << who << ", finish without lease: " << p;
  }

  // --- Checkpoint ids that leave the trial's directory, on bob's own
  // ask/tell trial (so only the id can be the reason). ---
  {
    const std::string bobs = "bob-" + pid;
    WriteFile(dir_ / "bob.yaml", absl::StrCat("name: ", bobs, R"(
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: 1}
)"));
    Probed p = Probe(
        "atk", bob,
        {"--action=create-study", "--spec=" + (dir_ / "bob.yaml").string()});
    ASSERT_EQ(p.code_name, "OK") << p;
    p = Probe("atk", bob, {"--action=suggest", "--study=" + bobs});
    ASSERT_EQ(p.code_name, "OK") << p;
    const auto suggested = Parse<v1::SuggestTrialsResponse>(p.Json());
    ASSERT_EQ(suggested.trials_size(), 1) << p;
    const std::string own = std::to_string(suggested.trials(0).number());
    // Each at a step of its own, so that only the id can be the reason.
    int step = 10;
    for (const std::string& id :
         {std::string("../../../../etc/shadow"), std::string("/etc/shadow"),
          absl::StrCat(bobs, "/", own, "/../../../", study, "/", trial, "/1"),
          absl::StrCat(bobs, "/", own, "/1/../../../../etc/shadow"),
          absl::StrCat(study, "/", trial, "/1")}) {
      p = Probe(
          "atk", bob,
          {"--action=report-intermediate", "--study=" + bobs, "--trial=" + own,
           absl::StrCat("--step=", step++), "--checkpoint=" + id});
      EXPECT_THAT(p.code_name,
                  AnyOf(Eq("INVALID_ARGUMENT"), Eq("PERMISSION_DENIED")))
          << "checkpoint id " << id << ": " << p;
      EXPECT_THAT(p.message, HasSubstr("checkpoint")) << p;
    }
    // The next report without an id is fine: the ids were the reason.
    p = Probe("atk", bob,
              {"--action=report-intermediate", "--study=" + bobs,
               "--trial=" + own, absl::StrCat("--step=", step)});
    EXPECT_EQ(p.code_name, "OK") << p;
  }

  // --- Backups: bob may not; an admin (a stolen admin token) only into a
  // new file inside --backup-dir. ---
  {
    const fs::path outside = dir_ / "x";
    const fs::path existing = dir_ / "backups/existing.db";
    const fs::path victim_file = dir_ / "victim";
    WriteFile(existing, "keep me");
    WriteFile(victim_file, "keep me too");
    fs::create_symlink(victim_file, dir_ / "backups/link.db");
    Probed p = Probe("atk", bob, {"--action=backup", "--path=x.db"});
    EXPECT_EQ(p.code_name, "PERMISSION_DENIED") << "bob backs up: " << p;
    const Creds admin = User("admin");
    for (const std::string& path : std::vector<std::string>{
             "/tmp/x", outside.string(), "../x", "existing.db", "link.db"}) {
      p = Probe("atk", admin, {"--action=backup", "--path=" + path});
      EXPECT_NE(p.code_name, "OK") << "backup to " << path << ": " << p;
    }
    EXPECT_FALSE(fs::exists(outside));
    EXPECT_EQ(ReadFile(existing), "keep me");
    EXPECT_EQ(ReadFile(victim_file), "keep me too");
    // A new name inside the directory works: the refusals were the paths.
    p = Probe("usr", admin, {"--action=backup", "--path=ok-" + pid + ".db"});
    EXPECT_EQ(p.code_name, "OK") << p;
    EXPECT_TRUE(fs::exists(dir_ / "backups" / ("ok-" + pid + ".db")));
  }

  // --- A command the worker does not allow. ---
  {
    const std::string shell = "bob-sh-" + pid;
    WriteFile(dir_ / "bob-sh.yaml", absl::StrCat("name: ", shell, R"(
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: 1, max_failures_per_trial: 0}
trial: {command: {argv: [sh, -c, "id; env"]}}
)"));
    Probed p = Probe(
        "atk", bob,
        {"--action=create-study", "--spec=" + (dir_ / "bob-sh.yaml").string()});
    ASSERT_EQ(p.code_name, "OK") << p;
    // The worker says at registration which commands it runs, so the
    // scheduler never offers it this one: the study waits, saying why
    // (third review, finding 8: a refused command burned 200 attempts).
    std::string waiting;
    for (int i = 0;
         i < 200 && waiting.find("--allow-command") == std::string::npos; ++i) {
      p = Probe("atk", bob, {"--action=get-study", "--study=" + shell});
      ASSERT_EQ(p.code_name, "OK") << p;
      waiting = Parse<v1::GetStudyResponse>(p.Json()).study().waiting();
    }
    EXPECT_THAT(waiting, HasSubstr("its --allow-command does not match sh"));
    p = Probe("atk", bob,
              {"--action=get-trial", "--study=" + shell, "--trial=0"});
    ASSERT_EQ(p.code_name, "OK") << p;
    const auto t = Parse<v1::GetTrialResponse>(p.Json()).trial();
    EXPECT_EQ(t.state(), v1::PENDING) << p;
    EXPECT_EQ(t.attempt(), 0) << "offered to a worker that refuses it";
    EXPECT_EQ(t.failures(), 0);
  }

  // --- The secret: the spec holds its name only; no answer shows it. ---
  {
    for (const std::string who : {"alice", "viewer", "admin"}) {
      Probed p = Probe("usr", User(who), get);
      EXPECT_EQ(p.code_name, "OK") << who << " reads the study: " << p;
      EXPECT_THAT(p.output, HasSubstr("e2e_api_key")) << p;
      EXPECT_THAT(p.output, Not(HasSubstr(secret_)))
          << "the secret in GetStudy for " << who;
    }
    Probed p = Probe("usr", User("alice"),
                     {"--action=list-trials", "--study=" + study});
    EXPECT_EQ(p.code_name, "OK") << p;
    EXPECT_THAT(p.output, Not(HasSubstr(secret_)));
    // GetTrial hides worker ids and attempts from non-admins.
    p = Probe("usr", User("alice"),
              {"--action=get-trial", "--study=" + study, "--trial=" + trial});
    ASSERT_EQ(p.code_name, "OK") << p;
    EXPECT_THAT(p.output, Not(HasSubstr(secret_)));
    const auto t = Parse<v1::GetTrialResponse>(p.Json()).trial();
    EXPECT_EQ(t.worker_id(), "") << "GetTrial shows alice the worker id";
    EXPECT_EQ(t.attempt(), 0) << "GetTrial shows alice the attempt";
  }

  // --- Alice's study, attacked all along, completes untouched. ---
  WriteFile(gate, "");
  Probed done =
      Probe("usr", User("alice"),
            {"--action=wait-done", "--study=" + study, "--timeout_s=120"});
  ASSERT_EQ(done.code_name, "OK") << done << "\nworker log:\n"
                                  << Tail(dir_ / "worker.log");
  const auto final_study = Parse<v1::GetStudyResponse>(done.Json()).study();
  EXPECT_EQ(final_study.state(), v1::STUDY_COMPLETED);
  EXPECT_EQ(final_study.spec().budget().max_trials(), 3);
  EXPECT_EQ(final_study.owner(), "alice");
  Probed all =
      Probe("usr", User("admin"), {"--action=list-trials", "--study=" + study});
  ASSERT_EQ(all.code_name, "OK") << all;
  const auto trials = Parse<v1::ListTrialsResponse>(all.Json());
  ASSERT_EQ(trials.trials_size(), 3) << all;
  for (const v1::Trial& t : trials.trials()) {
    EXPECT_EQ(t.state(), v1::COMPLETED)
        << "trial " << t.number() << ": " << t.error();
    EXPECT_EQ(t.last_step(), kSteps) << "trial " << t.number();
    EXPECT_GT(t.objective_value(), 0) << "trial " << t.number();
    if (t.number() == victim.number()) {
      EXPECT_EQ(t.attempt(), victim.attempt()) << "the victim was requeued";
      EXPECT_EQ(t.worker_id(), victim.worker_id());
    }
  }
  EXPECT_THAT(Tail(dir_ / "worker.log", 1 << 20), Not(HasSubstr(secret_)));
  EXPECT_THAT(Tail(dir_ / "scheduler.log", 1 << 20), Not(HasSubstr(secret_)));
}

// A scheduler refuses to listen beyond loopback without tokens, and in
// plaintext without --insecure-allow-remote: it exits at once, naming the
// flag, and never serves.
TEST_F(NetnsSecurityTest, ARemoteListenNeedsTokensAndTls) {
  const std::string port = std::to_string(kPort + 1);
  struct Case {
    std::string listen;
    std::vector<std::string> flags;
    std::string names;  // the flag the refusal must name
  };
  const std::vector<Case> cases = {
      {scheduler_ip_ + ":" + port, {}, "--auth-tokens"},
      {"0.0.0.0:" + port, {}, "--auth-tokens"},
      {"[::]:" + port, {}, "--auth-tokens"},
      {scheduler_ip_ + ":" + port,
       {"--auth-tokens=" + Ca("auth-tokens")},
       "--insecure-allow-remote"},
      {"0.0.0.0:" + port,
       {"--auth-tokens=" + Ca("auth-tokens")},
       "--insecure-allow-remote"},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::vector<std::string> argv = {
        ip_,
        "netns",
        "exec",
        Ns("sch"),
        DIAL_SCHEDULER_BIN,
        "--db=" + (dir_ / absl::StrCat("refused-", n++, ".db")).string(),
        "--checkpoint-root=" + (dir_ / "ckpt-refused").string(),
        "--listen=" + c.listen};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    Ran ran = RunCommand(argv, std::chrono::seconds(20));
    EXPECT_NE(ran.status, 0) << "dial-scheduler served " << c.listen << " "
                             << absl::StrJoin(c.flags, " ") << "\n"
                             << ran.output;
    EXPECT_THAT(ran.output, HasSubstr(c.names)) << c.listen;
    EXPECT_THAT(ran.output, Not(HasSubstr("listening on"))) << c.listen;
  }
}

}  // namespace
}  // namespace dial
