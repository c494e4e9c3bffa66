// dial-worker under a real Slurm: a one-node cluster on loopback
// (deploy/slurm/one-node-cluster.sh: munged, slurmctld and slurmd from
// Debian's packages), worker jobs submitted with the project's
// deploy/slurm/launch-workers.sh and dial-worker.sbatch, and a real
// scheduler and study. Needs root; skips, saying why, where Slurm cannot
// start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/spec.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

// Runs `command` with sh; returns its exit status and its stdout.
std::pair<int, std::string> Shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class SlurmTest : public WorkerE2eTest {
 protected:
  void SetUp() override {
    WorkerE2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cluster_ = dir_ / "slurm";
    const std::string script =
        std::string(DIAL_SOURCE_DIR) + "/deploy/slurm/one-node-cluster.sh";
    auto [status, out] = Shell(script + " start " + cluster_.string() + " 2>" +
                               (dir_ / "cluster.err").string());
    if (status != 0) {
      Shell(script + " stop " + cluster_.string());
      GTEST_SKIP() << "Slurm cannot start here (exit " << status
                   << "): " << ReadText(dir_ / "cluster.err")
                   << "docs/deploy.md records what was verified by hand";
    }
    started_ = true;
    // sbatch, scancel and scontrol (here and in the jobs) find the cluster
    // through SLURM_CONF; the jobs inherit this environment.
    // Each job's default checkpoint cache is $TMPDIR/dial-worker-JOBID.
    fs::create_directories(dir_ / "tmp");
    SetEnv("SLURM_CONF", (cluster_ / "slurm.conf").string());
    SetEnv("PATH", std::string(getenv("PATH")) + ":/usr/sbin");
    SetEnv("DIAL_SCHEDULER", address_);
    SetEnv("DIAL_WORKER", DIAL_WORKER_BIN);
    SetEnv("DIAL_GRACE_S", "10");
    SetEnv("TMPDIR", (dir_ / "tmp").string());
    fs::create_directories(dir_ / "jobs");
  }
  void TearDown() override {
    if (started_) {
      // Cancels every job, waits for them, stops the daemons.
      Shell(std::string(DIAL_SOURCE_DIR) + "/deploy/slurm/one-node-cluster.sh" +
            " stop " + cluster_.string());
      // "[/]": the pattern does not match the shell running pgrep.
      EXPECT_EQ(
          Shell("pgrep -f '[/]" + cluster_.string().substr(1) + "'").first, 1)
          << "a Slurm daemon outlived the test";
      EXPECT_EQ(
          Shell("pgrep -f '[d]ial-worker --scheduler=" + address_ + "'").first,
          1)
          << "a worker job outlived the test";
    }
    // Later tests in this binary see the environment they started with.
    for (const auto& [name, value] : saved_env_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    WorkerE2eTest::TearDown();
  }
  // `scontrol show job` field `key` of job `id`.
  static std::string JobField(const std::string& id, const std::string& key) {
    std::smatch m;
    const std::string out = Shell("scontrol show job " + id).second;
    if (std::regex_search(out, m, std::regex(key + "=(\\S+)"))) return m[1];
    return "";
  }

  void SetEnv(const std::string& name, const std::string& value) {
    const char* old = getenv(name.c_str());
    saved_env_.emplace(name,
                       old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name.c_str(), value.c_str(), 1);
  }

  fs::path cluster_;
  bool started_ = false;
  std::map<std::string, std::optional<std::string>> saved_env_;
};

TEST_F(SlurmTest, AStudyRunsOnWorkerJobsAndAPreemptedJobsTrialResumes) {
  auto spec = ParseStudySpec(R"(
name: slurm
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.01}}]
budget: {max_trials: 2, max_parallel_trials: 2}
trial: {trainer: {dataset: synthetic, steps: 8000, eval_every: 200, batch_size: 64, units: 128}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());

  // Two worker jobs (one array), one CPU each, with the project's helper.
  auto [status, array] =
      Shell(std::string(DIAL_SOURCE_DIR) +
            "/deploy/slurm/launch-workers.sh 2 --cpus-per-task=1 --chdir=" +
            (dir_ / "jobs").string() + " -- --acquire-wait-ms=1000");
  ASSERT_EQ(status, 0) << array;
  array = array.substr(0, array.find_first_of(";\n"));
  ASSERT_FALSE(array.empty());

  // Mid-trial, once a trial's restore point is at step 400 or later, the
  // job running it gets Slurm's preemption signal: TERM to its batch
  // script, as --signal=B:TERM@120 sends before a time limit.
  std::string preempted_job;
  int64_t trial_number = -1;
  int64_t preempted_at = 0;
  std::set<std::string> hosts;
  auto last = WaitForEnd("slurm", [&](const v1::StudyEvent& e) {
    if (!e.trial().worker_id().empty()) hosts.insert(e.trial().worker_id());
    if (preempted_job.empty() && e.trial().state() == v1::RUNNING &&
        e.trial().checkpoint_step() >= 400 && !e.trial().checkpoint().empty()) {
      // Worker ids are "<node>-j<array job>_<task>-<suffix>" (the job
      // script's --host), the array task as scancel names it.
      std::smatch m;
      const std::string id = e.trial().worker_id();
      ASSERT_TRUE(
          std::regex_match(id, m, std::regex("localhost-j(\\d+_\\d)-.*")))
          << id;
      preempted_job = m[1];
      trial_number = e.trial().number();
      preempted_at = e.trial().checkpoint_step();
      EXPECT_EQ(Shell("scancel --signal=TERM --batch " + preempted_job).first,
                0);
    }
  });
  EXPECT_EQ(last.kind(), v1::StudyEvent::STUDY_FINISHED);
  ASSERT_FALSE(preempted_job.empty()) << "no trial was seen running";
  EXPECT_EQ(hosts.size(), 2u) << "both jobs' workers ran trials";

  // The study completed on the jobs' workers.
  auto trials = client_->ListAllTrials("slurm", {});
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 2u);
  for (const auto& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.number() << ": " << t.error();
  }

  // The preempted job drained: its worker exited 0 after the signal, so
  // the job completed, and its node-local checkpoint cache is gone.
  EXPECT_EQ(JobField(preempted_job, "JobState"), "COMPLETED");
  EXPECT_EQ(JobField(preempted_job, "ExitCode"), "0:0");
  const std::string job_log =
      ReadText(dir_ / "jobs" / ("dial-worker-" + preempted_job + ".out"));
  EXPECT_THAT(job_log, HasSubstr("signal 15: stopping"));
  EXPECT_THAT(job_log, HasSubstr("dial-worker exited with status 0"));
  EXPECT_FALSE(fs::exists(dir_ / "tmp" / ("dial-worker-" + preempted_job)));

  // Its trial went back to the queue and resumed on the other job's worker
  // from the checkpoint it took when told to stop.
  auto trial = client_->GetTrial("slurm", trial_number);
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->attempt(), 2);
  EXPECT_EQ(trial->failures(), 0);
  std::smatch m;
  const std::string survivor_id = trial->worker_id();
  ASSERT_TRUE(
      std::regex_match(survivor_id, m, std::regex("localhost-j(\\d+_\\d)-.*")));
  const std::string survivor_job = m[1];
  EXPECT_NE(survivor_job, preempted_job);
  const std::string attempt2 =
      ReadText(dir_ / "jobs" / ("dial-worker-" + survivor_job) /
               ("slurm-" + std::to_string(trial_number) + "-a2.err"));
  ASSERT_TRUE(std::regex_search(
      attempt2, m, std::regex("resuming from checkpoint slurm/\\d+/(\\d+)")))
      << attempt2;
  EXPECT_GE(std::stoll(m[1]), preempted_at);
  const std::string resumed_step = m[1];
  // Nothing shared but the network: it came from the scheduler's store.
  EXPECT_THAT(
      ReadText(dir_ / "jobs" / ("dial-worker-" + survivor_job + ".out")),
      HasSubstr("downloaded checkpoint slurm/" + std::to_string(trial_number) +
                "/"));
  // Every evaluation once, in order: nothing lost, nothing doubled. The
  // drain adds one evaluation, at the step of the checkpoint it took.
  const int64_t resumed_from = std::stoll(resumed_step);
  std::vector<int64_t> want;
  for (int64_t s = 200; s <= 8000; s += 200) {
    want.push_back(s);
    if (resumed_from > s && resumed_from < s + 200)
      want.push_back(resumed_from);
  }
  std::vector<int64_t> got;
  for (const auto& p : trial->metric_history()) got.push_back(p.step());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace dial
