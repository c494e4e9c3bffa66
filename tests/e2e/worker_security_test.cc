// Security round two, with the real binaries: what a hostile trial can
// reach on its worker (tests/e2e/thief_trial.py reports what it found).
// The worker's token must not be readable from the environment of any
// process above the trial, nor (with --run-as) from its token file; a
// trial run as another user is bounded in processes (--trial-max-pids).
// Needs root for --run-as; those tests skip themselves without it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

constexpr char kToken[] = "worker-token-not-for-trials";

class WorkerSecurityE2eTest : public WorkerE2eTest {
 protected:
  // Runs one thief trial (with `forks` fork attempts) and returns its
  // step-1 metrics.
  std::map<std::string, double> RunThief(const std::string& study,
                                         const std::string& token_file,
                                         int forks) {
    auto spec = ParseStudySpec(
        absl::StrCat("name: ", study, R"(
objective: {metric: env_token, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: 1, max_parallel_trials: 1, max_failures_per_trial: 0}
trial:
  command:
    argv: [/usr/bin/python3, )",
                     DIAL_SOURCE_DIR, R"(/tests/e2e/thief_trial.py]
    env: {TOKEN_FILE: ")",
                     token_file, R"(", FORKS: ")", forks, R"("}
)"));
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return {};
    EXPECT_TRUE(client_->CreateStudy(*spec).ok());
    WaitForEnd(study);
    auto trial = client_->GetTrial(study, 0);
    EXPECT_TRUE(trial.ok()) << trial.status();
    if (!trial.ok()) return {};
    EXPECT_EQ(trial->state(), v1::COMPLETED) << trial->error();
    std::map<std::string, double> metrics;
    for (const auto& [name, value] : trial->final_metrics()) {
      metrics[name] = value;
    }
    return metrics;
  }
};

// H1: with the token in DIAL_TOKEN (as the k8s, systemd and Slurm files
// set it), a trial of the worker's own user read /proc/<worker>/environ
// and reported the token. The worker now wipes it from its environment.
TEST_F(WorkerSecurityE2eTest, TheTokenIsNotInTheWorkersEnvironment) {
  StartWorker("wa", 1, {}, {{"DIAL_TOKEN", kToken}});
  auto metrics = RunThief("env-thief", "", 0);
  ASSERT_EQ(metrics.count("env_token"), 1u);
  EXPECT_EQ(metrics["env_token"], 0) << "a trial read the worker's token";
}

// H1 and the fork loop of finding 11: with --token-file and --run-as, a
// trial runs as another user, cannot read the token file, and cannot
// start more than --trial-max-pids processes.
TEST_F(WorkerSecurityE2eTest,
       ARunAsTrialCannotReadTheTokenFileOrForkWithoutBound) {
  if (geteuid() != 0) GTEST_SKIP() << "--run-as needs root";
  const passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no user 'nobody'";
  const std::string token_file = (dir_ / "worker.token").string();
  std::ofstream(token_file) << kToken << "\n";
  chmod(token_file.c_str(), 0600);
  // Readable by anyone on the way to the trial's script and checkpoints.
  chmod(dir_.c_str(), 0755);
  StartWorker(
      "wa", 1,
      {"--token-file=" + token_file, "--run-as=nobody", "--trial-max-pids=32"});
  auto metrics = RunThief("file-thief", token_file, 200);
  ASSERT_EQ(metrics.count("uid"), 1u);
  EXPECT_EQ(metrics["uid"], nobody->pw_uid);
  EXPECT_EQ(metrics["file_token"], 0) << "a trial read the token file";
  EXPECT_EQ(metrics["env_token"], 0);
  EXPECT_GT(metrics["forked"], 0);
  EXPECT_LT(metrics["forked"], 32) << "--trial-max-pids did not hold";
}

}  // namespace
}  // namespace dial
