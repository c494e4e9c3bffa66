// Finding 1, with the real binaries: two owners (user principals alice
// and bob, with tokens of their own) share one worker, and bob's trial
// (tests/e2e/neighbour_trial.py, "bob") tries to read, list and write the
// other's ("alice") checkpoint and work directories, read its /proc environ and
// cmdline, and signal it. With a shared --run-as user every such attack works
// (the sibling test shows it, and that the worker says it does not isolate);
// with per-attempt users (--run-as-range) none does, and --trial-max-pids holds
// through RLIMIT_NPROC without a pids controller (finding 9). Needs root.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auth/token_table.h"
#include "common/spec.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

class IsolationE2eTest : public WorkerE2eTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
    WorkerE2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Not under /tmp: under per-attempt users each trial has a /tmp of
    // its own, so the two would not meet there.
    std::string meet = "/run/dial-e2e-meet-XXXXXX";
    if (mkdtemp(meet.data()) == nullptr) {
      meet = "/var/lib/dial-e2e-meet-XXXXXX";
      ASSERT_NE(mkdtemp(meet.data()), nullptr);
    }
    meet_ = meet;
    chmod(meet_.c_str(), 01777);
    // The trial program too: the source tree may be under /tmp (a CI
    // clone), which a trial with a /tmp of its own does not see.
    program_ = meet_ / "neighbour_trial.py";
    fs::copy_file(fs::path(DIAL_SOURCE_DIR) / "tests/e2e/neighbour_trial.py",
                  program_);
    chmod(program_.c_str(), 0644);
    chmod(dir_.c_str(), 0755);
    client_ = As("root-token");  // the fixture's watches and reads
    worker_token_ = dir_ / "fleet.token";
    std::ofstream(worker_token_) << "fleet-token\n";
    chmod(worker_token_.c_str(), 0600);
  }
  std::vector<std::string> SchedulerFlags() const override {
    const fs::path tokens = dir_ / "tokens";
    std::ofstream(tokens) << "admin root " << auth::Sha256Hex("root-token")
                          << "\nuser alice " << auth::Sha256Hex("alice-token")
                          << "\nuser bob " << auth::Sha256Hex("bob-token")
                          << "\nworker fleet " << auth::Sha256Hex("fleet-token")
                          << "\n";
    return {"--auth-tokens=" + tokens.string()};
  }
  // A worker of the fleet principal, with `extra` flags.
  testing::Subprocess& StartFleetWorker(const std::string& host, int slots,
                                        std::vector<std::string> extra) {
    extra.push_back("--token-file=" + worker_token_.string());
    return StartWorker(host, slots, extra);
  }

  void CreateTrial(const std::string& study, const std::string& role,
                   int forks) {
    auto spec = ParseStudySpec(
        absl::StrCat("name: ", study, R"(
objective: {metric: done, goal: MAXIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: 1, max_parallel_trials: 1, max_failures_per_trial: 0}
trial:
  command:
    argv: [/usr/bin/python3, )",
                     program_.string(), R"(]
    env: {ROLE: ")",
                     role, R"(", RENDEZVOUS: ")", meet_.string(),
                     R"(", WORK_ROOT: ")", (dir_ / "wa").string(),
                     R"(", VICTIM_LOG: alice-0-a1.out, FORKS: ")", forks, R"("}
)"));
    ASSERT_TRUE(spec.ok()) << spec.status();
    // Each study is its owner's: alice's victim, bob's attacker.
    auto owner = As(role == "victim" ? "alice-token" : "bob-token");
    ASSERT_NE(owner, nullptr);
    auto created = owner->CreateStudy(*spec);
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_EQ(created->owner(), role == "victim" ? "alice" : "bob");
  }

  // Runs alice's victim and bob's attacker side by side on one two-slot
  // worker; returns bob's metrics, checks alice's.
  std::map<std::string, double> Attack(int forks, double* tampered) {
    CreateTrial("alice", "victim", 0);
    CreateTrial("bob", "attacker", forks);
    WaitForEnd("bob");
    WaitForEnd("alice");
    std::map<std::string, double> out;
    auto bob = client_->GetTrial("bob", 0);
    EXPECT_TRUE(bob.ok()) << bob.status();
    auto alice = client_->GetTrial("alice", 0);
    EXPECT_TRUE(alice.ok()) << alice.status();
    if (!bob.ok() || !alice.ok()) return out;
    EXPECT_EQ(bob->state(), v1::COMPLETED) << bob->error();
    EXPECT_EQ(alice->state(), v1::COMPLETED) << alice->error();
    for (const auto& [name, value] : bob->final_metrics()) {
      out[name] = value;
      // In the XML report (--gtest_output=xml): what the attack reached.
      RecordProperty("bob." + name, std::to_string(value));
    }
    *tampered = alice->final_metrics().count("tampered")
                    ? alice->final_metrics().at("tampered")
                    : -1;
    return out;
  }

  v1::WorkerIsolation Isolation() {
    v1::WorkerIsolation isolation;
    EXPECT_TRUE(WaitUntil(
        [&] {
          auto workers = client_->ListWorkers();
          if (!workers.ok() || workers->workers_size() == 0) return false;
          isolation = workers->workers(0).resources().isolation();
          return true;
        },
        std::chrono::seconds(30)));
    return isolation;
  }

  void TearDown() override {
    WorkerE2eTest::TearDown();
    std::error_code ignored;
    if (!meet_.empty()) fs::remove_all(meet_, ignored);
  }

  fs::path meet_;
  fs::path program_;  // neighbour_trial.py, where every trial can read it
  fs::path worker_token_;
};

// The attack of finding 1, as it worked: every trial runs as `nobody`,
// so bob reads and writes alice's checkpoint directory, reads her
// environment and can kill her. The worker says it does not isolate.
TEST_F(IsolationE2eTest, ASharedRunAsUserLetsOneOwnersTrialReachAnothers) {
  StartFleetWorker("wa", 2, {"--run-as=nobody", "--trial-max-pids=64"});
  const v1::WorkerIsolation isolation = Isolation();
  EXPECT_FALSE(isolation.isolated());
  EXPECT_EQ(isolation.method(), "none");
  EXPECT_THAT(isolation.reason(), HasSubstr("--run-as"));
  double tampered = -1;
  auto bob = Attack(0, &tampered);
  ASSERT_EQ(bob["found"], 1);
  EXPECT_EQ(bob["read_ckpt"], 1);
  EXPECT_EQ(bob["list_ckpt"], 1);
  EXPECT_EQ(bob["write_ckpt"], 1);
  EXPECT_EQ(bob["environ"], 1);
  EXPECT_EQ(bob["cmdline"], 1);
  EXPECT_EQ(bob["signal"], 1);
  EXPECT_EQ(tampered, 1);
  EXPECT_THAT(ReadText(dir_ / "wa.log"), HasSubstr("isolation: none"));
}

// The same attack against per-attempt users: nothing of alice's is in
// bob's reach, and bob's fork loop stops at --trial-max-pids.
TEST_F(IsolationE2eTest, PerAttemptUsersKeepOneOwnersTrialFromAnothers) {
  StartFleetWorker(
      "wa", 2,
      {"--run-as-range=61000-61099", "--trial-max-pids=32", "--cgroup=off"});
  const v1::WorkerIsolation isolation = Isolation();
  EXPECT_TRUE(isolation.isolated());
  EXPECT_EQ(isolation.method(), "per-attempt-user");
  EXPECT_THAT(std::vector<std::string>(isolation.enforced_limits().begin(),
                                       isolation.enforced_limits().end()),
              ::testing::Contains("nproc"));
  double tampered = -1;
  auto bob = Attack(200, &tampered);
  ASSERT_EQ(bob["found"], 1);
  for (const char* probe : {"read_ckpt", "list_ckpt", "write_ckpt", "read_work",
                            "list_work", "write_work", "environ", "cmdline",
                            "signal", "list_work_root", "read_log"}) {
    EXPECT_EQ(bob[probe], 0) << "bob's trial could " << probe;
  }
  EXPECT_EQ(tampered, 0);
  EXPECT_GT(bob["forked"], 0);
  EXPECT_LT(bob["forked"], 32) << "--trial-max-pids did not hold";
  // At rest the directories are root's (the uids went back to the pool).
  struct stat st;
  ASSERT_EQ(lstat((dir_ / "ckpt" / "alice" / "0").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_THAT(ReadText(dir_ / "wa.log"),
              HasSubstr("isolation: per-attempt users"));
}

// Finding 9: an explicit --trial-max-pids that nothing here can enforce
// (no pids controller, no user of the trials' own) stops the worker at
// start-up, naming the flag that would let it start anyway.
TEST_F(IsolationE2eTest, AnUnenforceablePidLimitStopsTheWorker) {
  auto& worker =
      StartFleetWorker("wa", 1, {"--trial-max-pids=32", "--cgroup=off"});
  int status = 0;
  ASSERT_TRUE(WaitUntil(
      [&] { return waitpid(worker.pid(), &status, WNOHANG) == worker.pid(); },
      std::chrono::seconds(30)))
      << "the worker started with a limit it cannot enforce";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  EXPECT_THAT(ReadText(dir_ / "wa.log"),
              HasSubstr("--trial-max-pids=32 cannot be enforced"));
  EXPECT_THAT(ReadText(dir_ / "wa.log"),
              HasSubstr("--allow-unenforced-limits"));
}

// A study that requires isolation waits, saying why, while only a worker
// that cannot isolate is there (the scheduler never offers it), and runs
// once an isolating worker comes.
TEST_F(IsolationE2eTest, ARequiredIsolationWaitsForAnIsolatingWorker) {
  StartFleetWorker("shared", 1, {"--run-as=nobody"});
  auto spec = ParseStudySpec(R"(
name: private
objective: {metric: done, goal: MAXIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: 1, max_failures_per_trial: 0}
trial:
  resources: {require_isolation: true}
  command:
    argv: [/usr/bin/python3, -c, 'import json, os; os.write(int(os.environ["DIAL_REPORT_FD"]), (json.dumps({"step": 1, "metrics": {"done": os.getuid()}}) + "\n").encode())']
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto alice = As("alice-token");
  ASSERT_TRUE(alice->CreateStudy(*spec).ok());
  std::string waiting;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto study = alice->GetStudy("private");
        waiting = study.ok() ? study->waiting() : "";
        return waiting.find("cannot isolate") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << waiting;
  // Read as the admin: attempt details are redacted for users.
  auto pending = client_->GetTrial("private", 0);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->state(), v1::PENDING);
  EXPECT_EQ(pending->attempt(), 0) << "offered to the shared worker";
  StartFleetWorker("isolating", 1, {"--run-as-range=61100-61109"});
  WaitForEnd("private");
  auto done = client_->GetTrial("private", 0);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->error();
  EXPECT_GE(done->final_metrics().at("done"), 61100);
  EXPECT_LE(done->final_metrics().at("done"), 61109);
  EXPECT_EQ(done->attempt(), 1);
}

}  // namespace
}  // namespace dial
