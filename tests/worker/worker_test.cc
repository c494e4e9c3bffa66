// Worker against a fake scheduler: registration and lease renewal,
// registering again after NOT_FOUND, reports buffered through an outage and
// replayed in order, the outage limit, and fencing. Trials are real child
// processes (/bin/sh speaking the trial protocol on fds 3 and 4); time moves
// only through FakeTime, and the tests wait on the fake's state with
// bounded real-time waits, never on sleeps.
#include "worker/worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tests/worker/fake_time.h"

namespace dial::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Every call the worker made, as the fake scheduler saw it.
struct Calls {
  int registers = 0;
  v1::RegisterWorkerRequest last_register;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::vector<v1::AcquireTrialRequest> acquires;
  std::vector<int64_t> report_attempts;  // the step of every Report call
  std::vector<v1::ReportProgressRequest> reports;  // every Report call
  std::vector<int64_t> delivered;  // steps answered OK, in order
  std::vector<v1::FinishTrialRequest> finishes;
  std::vector<size_t> delivered_at_finish;  // delivered.size() at each

  bool HeartbeatFrom(const std::string& id) const {
    for (const auto& h : heartbeats) {
      if (h.worker_id() == id) return true;
    }
    return false;
  }
  bool AcquireFrom(const std::string& id) const {
    for (const auto& a : acquires) {
      if (a.worker_id() == id) return true;
    }
    return false;
  }
};

// A scripted scheduler: registration hands out w1, w2, ...; heartbeats
// grant `lease`; Acquire long-polls (real time, up to wait_ms) for an
// offered trial; reports are acknowledged with CONTINUE unless scripted to
// fail. Thread-safe.
class FakeScheduler : public SchedulerClient {
 public:
  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::RegisterWorkerRequest& request) override {
    absl::MutexLock lock(&mu_);
    v1::RegisterWorkerResponse response;
    response.set_worker_id(absl::StrCat("w", ++calls_.registers));
    calls_.last_register = request;
    return response;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    absl::MutexLock lock(&mu_);
    calls_.heartbeats.push_back(request);
    if (not_found_heartbeats_ > 0) {
      --not_found_heartbeats_;
      return absl::NotFoundError("unknown worker");
    }
    v1::HeartbeatResponse response;
    response.set_lease_ms(absl::ToInt64Milliseconds(lease_));
    return response;
  }

  absl::StatusOr<v1::AcquireTrialResponse> Acquire(
      const v1::AcquireTrialRequest& request) override {
    absl::MutexLock lock(&mu_);
    calls_.acquires.push_back(request);
    auto ready = [this] {
      mu_.AssertHeld();
      return !offers_.empty() || closed_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready),
                         absl::Milliseconds(request.wait_ms()));
    v1::AcquireTrialResponse response;
    if (!offers_.empty()) {
      response = offers_.front();
      offers_.pop_front();
    }
    return response;
  }

  absl::StatusOr<v1::ReportProgressResponse> Report(
      const v1::ReportProgressRequest& request) override {
    absl::MutexLock lock(&mu_);
    calls_.report_attempts.push_back(request.step());
    calls_.reports.push_back(request);
    if (request.step() == reject_step_) {
      return absl::InvalidArgumentError(
          "metrics: metric names must be 1-128 characters");
    }
    if (unavailable_reports_ > 0) {
      --unavailable_reports_;
      return absl::UnavailableError("scheduler down");
    }
    if (cancelled_reports_ > 0) {
      --cancelled_reports_;
      return absl::CancelledError("Cancelled");  // a server shutting down
    }
    if (request.step() == fence_step_) {
      return absl::FailedPreconditionError("attempt 1 is stale");
    }
    calls_.delivered.push_back(request.step());
    v1::ReportProgressResponse response;
    response.mutable_decision()->set_action(v1::Decision::CONTINUE);
    return response;
  }

  absl::Status Finish(const v1::FinishTrialRequest& request) override {
    absl::MutexLock lock(&mu_);
    calls_.finishes.push_back(request);
    calls_.delivered_at_finish.push_back(calls_.delivered.size());
    return absl::OkStatus();
  }

  // Scripting.
  void Offer(const v1::AcquireTrialResponse& trial) {
    absl::MutexLock lock(&mu_);
    offers_.push_back(trial);
  }
  void AnswerReportsUnavailable(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_reports_ = n;
  }
  void AnswerReportsCancelled(int n) {
    absl::MutexLock lock(&mu_);
    cancelled_reports_ = n;
  }
  void FenceAtStep(int64_t step) {
    absl::MutexLock lock(&mu_);
    fence_step_ = step;
  }
  // Reports of `step` are refused as malformed (INVALID_ARGUMENT).
  void RejectAtStep(int64_t step) {
    absl::MutexLock lock(&mu_);
    reject_step_ = step;
  }
  void AnswerHeartbeatsNotFound(int n) {
    absl::MutexLock lock(&mu_);
    not_found_heartbeats_ = n;
  }
  void SetLease(absl::Duration lease) {
    absl::MutexLock lock(&mu_);
    lease_ = lease;
  }
  // Acquire answers at once from now on.
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  // Waits up to `timeout` of real time for `done(calls)`.
  bool WaitUntil(std::function<bool(const Calls&)> done,
                 absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto ready = [&] {
      mu_.AssertHeld();
      return done(calls_);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }
  Calls Snapshot() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  Calls calls_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::AcquireTrialResponse> offers_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int unavailable_reports_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_reports_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fence_step_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t reject_step_ ABSL_GUARDED_BY(mu_) = -1;
  int not_found_heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  // Heartbeats every hour (a quarter of it) unless a test says otherwise,
  // so their sleeps are told apart from backoff sleeps.
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::Hours(4);
};

// Trial 7 of study "s", attempt 1: `/bin/sh -c script`.
v1::AcquireTrialResponse ShellTrial(const std::string& script) {
  v1::AcquireTrialResponse a;
  a.mutable_trial()->set_study("s");
  a.mutable_trial()->set_number(7);
  a.set_attempt(1);
  auto* command = a.mutable_run()->mutable_command();
  command->add_argv("/bin/sh");
  command->add_argv("-c");
  command->add_argv(script);
  return a;
}

// Shell that reports steps 1..n (metric loss = step), reading a decision
// after each; exits 3 if the decision pipe closes first.
std::string ReportSteps(int n) {
  return absl::StrCat(
      "s=1; while [ $s -le ", n,
      " ]; do printf '{\"step\":%d,\"metrics\":{\"loss\":%d}}\\n' $s $s >&3; "
      "read -r d <&4 || exit 3; s=$((s+1)); done");
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // As dial-worker's main: a trial that ends closes its decision pipe.
    signal(SIGPIPE, SIG_IGN);
    std::string tmpl = (fs::temp_directory_path() / "dial-worker-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    if (worker_ != nullptr) StopWorker();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  WorkerOptions Options() {
    WorkerOptions o;
    o.client = &scheduler_;
    o.clock = &time_;
    o.sleeper = &time_;
    o.slots = 1;
    o.cpus = 1;
    o.host = "test-host";
    o.work_dir = dir_.string();
    o.checkpoint_root = (dir_ / "checkpoints").string();
    o.acquire_wait = absl::Seconds(60);
    o.grace = absl::Seconds(5);
    o.policy.allowed_commands = {"/bin/sh"};
    return o;
  }

  void StartWorker(const WorkerOptions& options) {
    worker_ = std::make_unique<Worker>(options);
    thread_ = std::thread([this] {
      run_status_ = worker_->Run();
      run_done_.Notify();
    });
  }

  // Shuts the worker down and waits for Run to return. While trials end,
  // the worker keeps heartbeating on (fake) time: time is moved on until
  // it is done.
  void StopWorker() {
    worker_->Shutdown();
    scheduler_.Close();
    for (int i = 0; i < 400; ++i) {
      if (run_done_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
        break;
      }
      time_.Advance(absl::Hours(1));
    }
    EXPECT_TRUE(run_done_.HasBeenNotified()) << "Worker::Run did not return";
    thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_;
    worker_.reset();
  }

  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }

  fs::path dir_;
  FakeScheduler scheduler_;
  testing::FakeTime time_;
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
  absl::Notification run_done_;
  absl::Status run_status_;
};

TEST_F(WorkerTest, RegistersAndRenewsItsLeaseEveryQuarterLease) {
  scheduler_.SetLease(absl::Seconds(4));
  // Reports once, then waits for decisions until it is told to go.
  scheduler_.Offer(ShellTrial(absl::StrCat(ReportSteps(1), "; read -r d <&4")));
  StartWorker(Options());

  ASSERT_TRUE(scheduler_.WaitUntil([](const Calls& c) {
    return c.heartbeats.size() == 1 && c.delivered.size() == 1;
  }));
  // The next heartbeat waits a quarter of the lease, on the injected time.
  ASSERT_TRUE(time_.AwaitSleep(absl::Seconds(1)));
  Calls calls = scheduler_.Snapshot();
  EXPECT_EQ(calls.registers, 1);
  // It says which commands it runs (the scheduler offers it no other).
  const v1::CommandPolicy& commands =
      calls.last_register.resources().commands();
  EXPECT_FALSE(commands.any());
  ASSERT_EQ(commands.allowed_size(), 1);
  EXPECT_EQ(commands.allowed(0), "/bin/sh");
  EXPECT_EQ(calls.heartbeats[0].worker_id(), "w1");
  ASSERT_FALSE(calls.acquires.empty());
  EXPECT_EQ(calls.acquires[0].worker_id(), "w1");

  time_.Advance(absl::Milliseconds(999));
  EXPECT_EQ(scheduler_.Snapshot().heartbeats.size(), 1u) << "renewed early";
  time_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.heartbeats.size() == 2; }));
  ASSERT_TRUE(time_.AwaitSleep(absl::Seconds(1)));
  calls = scheduler_.Snapshot();
  EXPECT_EQ(calls.registers, 1);
  const v1::HeartbeatRequest& renewal = calls.heartbeats[1];
  EXPECT_EQ(renewal.worker_id(), "w1");
  // The lease covers the running trial.
  ASSERT_EQ(renewal.running_size(), 1);
  EXPECT_EQ(renewal.running(0).study(), "s");
  EXPECT_EQ(renewal.running(0).trial(), 7);
  EXPECT_EQ(renewal.running(0).attempt(), 1);

  // Shutting down asks the trial to end (SIGTERM) and hands it back.
  StopWorker();
  calls = scheduler_.Snapshot();
  ASSERT_EQ(calls.finishes.size(), 1u);
  EXPECT_TRUE(calls.finishes[0].requeue());
  EXPECT_EQ(calls.finishes[0].worker_id(), "w1");
}

TEST_F(WorkerTest, RegistersAgainAfterNotFoundAndKillsTheOldIdsTrials) {
  scheduler_.SetLease(absl::Seconds(4));
  const std::string pid_file = Path("pid");
  const std::string marker = Path("survived");
  scheduler_.Offer(
      ShellTrial(absl::StrCat("echo $$ > ", pid_file, "; ", ReportSteps(1),
                              "; read -r d <&4; ", "echo yes > ", marker)));
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.delivered.size() == 1; }));
  ASSERT_TRUE(time_.AwaitSleep(absl::Seconds(1)));
  pid_t pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);

  scheduler_.AnswerHeartbeatsNotFound(1);
  time_.Advance(absl::Seconds(1));
  // The slot comes back for work under the new id only once the old id's
  // trial has been killed and reaped.
  ASSERT_TRUE(scheduler_.WaitUntil([](const Calls& c) {
    return c.HeartbeatFrom("w2") && c.AcquireFrom("w2");
  }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_EQ(calls.registers, 2);
  EXPECT_THAT(calls.finishes, IsEmpty()) << "a lost trial was finished";
  EXPECT_FALSE(Alive(pid));
  EXPECT_FALSE(fs::exists(marker)) << "the trial was not killed";
}

TEST_F(WorkerTest, BuffersReportsWhileTheSchedulerIsUnavailable) {
  // The first two Report calls fail: step 1, then step 1 again when step 2
  // comes. Step 3's call finds the scheduler back and replays in order.
  scheduler_.AnswerReportsUnavailable(2);
  WorkerOptions options = Options();
  options.report_buffer = 1;  // step 2 waits in the spill file
  scheduler_.Offer(ShellTrial(ReportSteps(3)));
  StartWorker(options);

  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, ElementsAre(1, 1, 1, 2, 3));
  EXPECT_THAT(calls.delivered, ElementsAre(1, 2, 3));
  const v1::FinishTrialRequest& finish = calls.finishes[0];
  EXPECT_EQ(finish.error(), "");
  EXPECT_FALSE(finish.requeue());
  EXPECT_EQ(finish.final_metrics().at("loss"), 3.0);
}

// A scheduler whose server shuts down (a standby taking the lease, as in
// FailoverE2eTest) cancels the calls in flight: the report is sent again,
// not taken as a rejection that fails the trial.
TEST_F(WorkerTest, AReportCancelledByASchedulerShuttingDownIsSentAgain) {
  scheduler_.AnswerReportsCancelled(1);
  scheduler_.Offer(ShellTrial(ReportSteps(3)));
  StartWorker(Options());

  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.delivered, ElementsAre(1, 2, 3));
  EXPECT_EQ(calls.finishes[0].error(), "");
  EXPECT_EQ(calls.finishes[0].final_metrics().at("loss"), 3.0);
}

TEST_F(WorkerTest, ReplaysBufferedReportsWithBackoffAfterTheTrialEnds) {
  // Down for both of the trial's reports and the first two retries after
  // it exits.
  scheduler_.AnswerReportsUnavailable(4);
  scheduler_.Offer(ShellTrial(ReportSteps(2)));
  StartWorker(Options());

  ASSERT_TRUE(time_.AwaitSleep(absl::Milliseconds(200)));
  EXPECT_THAT(scheduler_.Snapshot().report_attempts, ElementsAre(1, 1, 1));
  time_.Advance(absl::Milliseconds(200));
  ASSERT_TRUE(time_.AwaitSleep(absl::Milliseconds(400)));
  Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(calls.delivered, IsEmpty());
  EXPECT_THAT(calls.finishes, IsEmpty()) << "finished before its reports";

  time_.Advance(absl::Milliseconds(400));
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, ElementsAre(1, 1, 1, 1, 1, 2));
  EXPECT_THAT(calls.delivered, ElementsAre(1, 2));
  EXPECT_THAT(calls.delivered_at_finish, ElementsAre(2));
  EXPECT_EQ(calls.finishes[0].error(), "");
  EXPECT_EQ(calls.finishes[0].final_metrics().at("loss"), 2.0);
}

TEST_F(WorkerTest, GivesUpOnBufferedReportsAfterTheOutageLimit) {
  scheduler_.AnswerReportsUnavailable(1000);
  WorkerOptions options = Options();
  options.outage_limit = absl::Seconds(1);
  scheduler_.Offer(ShellTrial(ReportSteps(1)));
  StartWorker(options);

  ASSERT_TRUE(time_.AwaitSleep(absl::Milliseconds(200)));
  // Past the limit on the injected clock: the next failure is the last.
  time_.Advance(absl::Seconds(2));
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.acquires.size() >= 2; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, ElementsAre(1, 1, 1));
  EXPECT_THAT(calls.delivered, IsEmpty());
  // Its outcome is unknown to the scheduler, which requeues it when the
  // lease runs out; finishing it would skip the lost reports.
  EXPECT_THAT(calls.finishes, IsEmpty());
  EXPECT_THAT(time_.Requested(),
              ::testing::Not(::testing::Contains(absl::Milliseconds(400))));
}

TEST_F(WorkerTest, AFencedReportKillsTheTrialWhichIsNotFinished) {
  scheduler_.FenceAtStep(2);
  const std::string pid_file = Path("pid");
  const std::string marker = Path("survived");
  // After step 2 it waits for a decision that never comes (a decision
  // would let it leave the marker); only a kill ends it soon.
  scheduler_.Offer(ShellTrial(absl::StrCat(
      "echo $$ > ", pid_file, "; ", ReportSteps(2), "; echo yes > ", marker)));
  StartWorker(Options());

  // Without the kill the worker would wait 30 s for the trial to exit.
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.acquires.size() >= 2; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, ElementsAre(1, 2));
  EXPECT_THAT(calls.delivered, ElementsAre(1));
  EXPECT_THAT(calls.finishes, IsEmpty()) << "a fenced attempt was finished";
  EXPECT_EQ(calls.acquires[1].worker_id(), "w1");
  pid_t pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(Alive(pid));
  EXPECT_FALSE(fs::exists(marker)) << "the trial was not killed";
}

// Finding 1: `argv: [sh, -c, "id; env"]` ran on any worker. A command no
// --allow-command glob matches is not started; the attempt fails (a
// counted failure) with an error that names the flag.
TEST_F(WorkerTest, ACommandTheWorkerDoesNotAllowFailsWithoutRunning) {
  const std::string marker = Path("ran");
  scheduler_.Offer(ShellTrial(absl::StrCat("echo yes > ", marker)));
  WorkerOptions options = Options();
  options.policy.allowed_commands = {"/usr/bin/*"};
  StartWorker(options);
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const v1::FinishTrialRequest finish = scheduler_.Snapshot().finishes[0];
  EXPECT_FALSE(finish.requeue());
  EXPECT_THAT(finish.error(), HasSubstr("'/bin/sh' is not allowed"));
  EXPECT_THAT(finish.error(), HasSubstr("--allow-command"));
  // A refusal by policy, not a failure of the trial (finding 1).
  EXPECT_TRUE(finish.refused());
  EXPECT_FALSE(fs::exists(marker)) << "the refused command ran";
}

// Finding 1: the trial saw the worker's whole environment. It now sees the
// --pass-env variables, its spec's env, its secrets and Dial's variables.
TEST_F(WorkerTest, TrialsSeeOnlyPassedVariablesSecretsAndTheirOwn) {
  fs::create_directories(dir_ / "secrets");
  std::ofstream(dir_ / "secrets" / "api-key") << "s3cret\n";
  const std::string env_file = Path("env");
  v1::AcquireTrialResponse trial =
      ShellTrial(absl::StrCat("env > ", env_file, "; ", ReportSteps(1)));
  auto* command = trial.mutable_run()->mutable_command();
  (*command->mutable_env())["FROM_SPEC"] = "spec";
  (*command->mutable_secret_env())["API_KEY"] = "api-key";
  (*command->mutable_secret_env())["HF"] = "HF_TOKEN";
  scheduler_.Offer(trial);
  WorkerOptions options = Options();
  options.policy.secrets_dir = (dir_ / "secrets").string();
  options.policy.secrets_from_env = true;
  options.environment =
      std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"},
                                         {"HOME", "/home/worker"},
                                         {"WORKER_ONLY", "leaked"},
                                         {"DIAL_TOKEN", "worker-token"},
                                         {"HF_TOKEN", "hf-secret"}};
  StartWorker(options);
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  EXPECT_EQ(scheduler_.Snapshot().finishes[0].error(), "");
  std::ifstream in(env_file);
  std::set<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.insert(line);
  EXPECT_THAT(lines, ::testing::IsSupersetOf(
                         {"PATH=/usr/bin:/bin", "HOME=/home/worker",
                          "FROM_SPEC=spec", "API_KEY=s3cret", "HF=hf-secret",
                          "DIAL_STUDY=s", "DIAL_TRIAL=7"}));
  for (const auto& line : lines) {
    EXPECT_THAT(line, Not(HasSubstr("WORKER_ONLY")));
    EXPECT_THAT(line, Not(HasSubstr("worker-token")));
    EXPECT_THAT(line, Not(HasSubstr("HF_TOKEN")));
  }
}

// Security round two, C1: a worker that allows only a bash script ran
// the study's BASH_ENV (a command substitution) before the script, as the
// worker's user. Such variables are refused before anything runs.
TEST_F(WorkerTest, AStudyCannotSetAStartUpVariableOfTheAllowedProgram) {
  const std::string marker = Path("pwned");
  const std::string script = Path("train.sh");
  std::ofstream(script) << ReportSteps(1) << "\n";
  const std::vector<std::string> variables = {"BASH_ENV", "LD_PRELOAD",
                                              "PYTHONSTARTUP"};
  for (size_t i = 0; i < variables.size(); ++i) {
    v1::AcquireTrialResponse trial = ShellTrial("");
    trial.mutable_trial()->set_number(static_cast<int64_t>(10 + i));
    auto* command = trial.mutable_run()->mutable_command();
    command->clear_argv();
    command->add_argv("/bin/bash");
    command->add_argv(script);
    (*command->mutable_env())[variables[i]] =
        absl::StrCat("$(touch ", marker, ")");
    scheduler_.Offer(trial);
  }
  WorkerOptions options = Options();
  options.policy.allowed_commands = {"/bin/bash"};
  StartWorker(options);
  ASSERT_TRUE(scheduler_.WaitUntil(
      [&](const Calls& c) { return c.finishes.size() == variables.size(); }));
  const Calls calls = scheduler_.Snapshot();
  for (size_t i = 0; i < variables.size(); ++i) {
    const v1::FinishTrialRequest& finish = calls.finishes[i];
    EXPECT_FALSE(finish.requeue());
    EXPECT_THAT(finish.error(),
                HasSubstr(absl::StrCat("trial.command.env.", variables[i])));
    EXPECT_THAT(finish.error(), HasSubstr("--allow-env="));
    EXPECT_TRUE(finish.refused());
  }
  EXPECT_FALSE(fs::exists(marker)) << "the study's start-up code ran";
}

TEST_F(WorkerTest, AMissingSecretFailsTheTrialWithoutRunningIt) {
  const std::string marker = Path("ran");
  v1::AcquireTrialResponse trial =
      ShellTrial(absl::StrCat("echo yes > ", marker));
  (*trial.mutable_run()->mutable_command()->mutable_secret_env())["KEY"] =
      "absent";
  scheduler_.Offer(trial);
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const v1::FinishTrialRequest finish = scheduler_.Snapshot().finishes[0];
  EXPECT_FALSE(finish.requeue());
  EXPECT_THAT(finish.error(),
              HasSubstr("secret 'absent' is not on this worker"));
  EXPECT_FALSE(finish.refused()) << "a missing secret is a counted failure";
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(WorkerTest, ARestoreCheckpointOutsideTheTrialIsRefused) {
  const std::string marker = Path("ran");
  v1::AcquireTrialResponse trial =
      ShellTrial(absl::StrCat("echo yes > ", marker));
  trial.set_restore_checkpoint("../../../../etc/shadow");
  scheduler_.Offer(trial);
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const v1::FinishTrialRequest finish = scheduler_.Snapshot().finishes[0];
  EXPECT_THAT(finish.error(),
              HasSubstr("restore checkpoint '../../../../etc/shadow' refused"));
  EXPECT_FALSE(fs::exists(marker));
}

// Finding 6a: a report the scheduler rejects made the trial retry forever
// (its attempt was dropped as if fenced, never finished, requeued by the
// scheduler, and so on). Now it fails the attempt once, with the reason.
TEST_F(WorkerTest, ARejectedReportFailsTheAttemptWithTheSchedulersReason) {
  scheduler_.RejectAtStep(1);
  const std::string pid_file = Path("pid");
  scheduler_.Offer(
      ShellTrial(absl::StrCat("echo $$ > ", pid_file, "; ", ReportSteps(2))));
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, ElementsAre(1)) << "retried";
  EXPECT_THAT(calls.delivered, IsEmpty());
  const v1::FinishTrialRequest& finish = calls.finishes[0];
  EXPECT_FALSE(finish.requeue());
  EXPECT_THAT(finish.error(),
              HasSubstr("the scheduler rejected the report of step 1"));
  EXPECT_THAT(finish.error(), HasSubstr("metric names must be 1-128"));
  pid_t pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(Alive(pid));
}

// Issue 37, item 8: a trial that reports the absolute path of the
// checkpoint it wrote in its DIAL_CHECKPOINT_DIR failed every attempt
// ("is not inside this trial's checkpoint directory"). The worker now
// sends the id relative to the root; a path outside the trial's directory
// is still sent as it is, for the scheduler to refuse.
TEST_F(WorkerTest, AnAbsoluteCheckpointPathInTheTrialsDirectoryIsSentAsItsId) {
  scheduler_.Offer(ShellTrial(R"sh(mkdir -p "$DIAL_CHECKPOINT_DIR/step-1"
c="$DIAL_CHECKPOINT_DIR/step-1"
echo "{\"step\":1,\"metrics\":{\"loss\":1},\"checkpoint\":\"$c\"}" >&3
read -r d <&4
c="$DIAL_CHECKPOINT_DIR/../8/x"
echo "{\"step\":2,\"metrics\":{\"loss\":1},\"checkpoint\":\"$c\"}" >&3
read -r d <&4)sh"));
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const Calls calls = scheduler_.Snapshot();
  ASSERT_EQ(calls.reports.size(), 2u);
  EXPECT_EQ(calls.reports[0].checkpoint(), "s/7/step-1");
  EXPECT_EQ(calls.reports[1].checkpoint(), Path("checkpoints") + "/s/7/../8/x");
}

// Finding 6b: a step of 1e300 was cast to int64. It is a protocol error.
TEST_F(WorkerTest, AStepPast2To53IsAProtocolError) {
  scheduler_.Offer(
      ShellTrial("echo '{\"step\":1e300,\"metrics\":{\"loss\":1}}' >&3; "
                 "read -r d <&4"));
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_THAT(calls.report_attempts, IsEmpty());
  EXPECT_THAT(calls.finishes[0].error(),
              HasSubstr("trial protocol error: report: \"step\" must be at "
                        "most 2^53"));
}

// Finding 6e: a line over 1 MiB held the slot for 30 s and ended as
// "killed by signal 9". It now fails the attempt at once, saying why (the
// wait below is shorter than those 30 s).
TEST_F(WorkerTest, ALineOver1MiBFailsTheAttemptAtOnce) {
  scheduler_.Offer(
      ShellTrial("head -c 1100000 /dev/zero | tr '\\0' x >&3; exec sleep 600"));
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 1; },
      absl::Seconds(20)));
  const std::string error = scheduler_.Snapshot().finishes[0].error();
  EXPECT_THAT(error, HasSubstr("longer than 1048576 bytes (1 MiB)"));
  EXPECT_THAT(error, Not(HasSubstr("killed by signal")));
}

// Finding 6c: a double-forked grandchild outlived its trial, and one that
// held fd 3 kept the slot busy indefinitely. The trial finishes when its
// main process exits, the daemon is killed, and the slot takes the next
// trial.
TEST_F(WorkerTest, ADaemonHoldingTheReportPipeNeitherOutlivesNorHoldsTheSlot) {
  const std::string daemon = Path("daemon");
  scheduler_.Offer(ShellTrial(
      absl::StrCat("( setsid sh -c 'echo $$ > ", daemon, ".tmp; mv ", daemon,
                   ".tmp ", daemon, "; exec sleep 600' & ); while [ ! -s ",
                   daemon, " ]; do :; done; ", ReportSteps(1), "; exit 0")));
  v1::AcquireTrialResponse next = ShellTrial(ReportSteps(2));
  next.mutable_trial()->set_number(8);
  scheduler_.Offer(next);
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.finishes.size() == 2; }));
  const Calls calls = scheduler_.Snapshot();
  EXPECT_EQ(calls.finishes[0].trial(), 7);
  EXPECT_EQ(calls.finishes[0].error(), "");
  EXPECT_EQ(calls.finishes[0].final_metrics().at("loss"), 1.0);
  EXPECT_EQ(calls.finishes[1].trial(), 8);
  EXPECT_EQ(calls.finishes[1].error(), "");
  pid_t pid = 0;
  std::ifstream(daemon) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(Alive(pid)) << "the daemon outlived its trial";
}

// The scheduler fences attempts by lease token: every report, finish and
// heartbeat entry of an attempt carries the one it was acquired with.
TEST_F(WorkerTest, EveryCallOfAnAttemptCarriesItsLeaseToken) {
  scheduler_.SetLease(absl::Seconds(4));
  v1::AcquireTrialResponse trial = ShellTrial(
      absl::StrCat(ReportSteps(1), "; read -r d <&4; ", ReportSteps(1)));
  trial.set_lease_token("lease-7-1");
  scheduler_.Offer(trial);
  StartWorker(Options());
  ASSERT_TRUE(scheduler_.WaitUntil([](const Calls& c) {
    return c.heartbeats.size() == 1 && c.delivered.size() == 1;
  }));
  ASSERT_TRUE(time_.AwaitSleep(absl::Seconds(1)));
  time_.Advance(absl::Seconds(1));
  ASSERT_TRUE(scheduler_.WaitUntil(
      [](const Calls& c) { return c.heartbeats.size() == 2; }));
  StopWorker();
  const Calls calls = scheduler_.Snapshot();
  ASSERT_EQ(calls.heartbeats[1].running_size(), 1);
  EXPECT_EQ(calls.heartbeats[1].running(0).lease_token(), "lease-7-1");
  ASSERT_FALSE(calls.reports.empty());
  for (const auto& r : calls.reports) EXPECT_EQ(r.lease_token(), "lease-7-1");
  ASSERT_EQ(calls.finishes.size(), 1u);
  EXPECT_EQ(calls.finishes[0].lease_token(), "lease-7-1");
}

}  // namespace
}  // namespace dial::worker
