// Reliability end to end with the real binaries: workers outlive a
// scheduler restart and replay what they reported meanwhile; a partitioned
// worker is fenced and kills its trial; a hung trial is killed and retried.
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "common/spec.h"
#include "storage/checkpoint_store.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

// "attempt step" lines the slow trial wrote to its trace file.
std::vector<std::pair<int, int>> Trace(const fs::path& path) {
  std::vector<std::pair<int, int>> lines;
  std::ifstream in(path);
  int attempt, step;
  while (in >> attempt >> step) lines.push_back({attempt, step});
  return lines;
}

std::string SlowStudy(const std::string& name, const fs::path& trace,
                      const std::string& extra_env, const std::string& trial,
                      int max_failures) {
  return "name: " + name + R"(
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.01, max: 0.4}}]
budget: {max_trials: 1, max_failures_per_trial: )" +
         std::to_string(max_failures) + R"(}
trial:
  command:
    argv: [/usr/bin/python3, )" DIAL_SOURCE_DIR R"(/tests/e2e/slow_trial.py]
    env: {TRACE_FILE: ")" +
         trace.string() + "\", " + extra_env + R"(}
)" + trial;
}

void ExpectEveryStepOnce(const v1::Trial& t, int steps) {
  ASSERT_EQ(t.metric_history_size(), steps);
  for (int i = 0; i < steps; ++i) EXPECT_EQ(t.metric_history(i).step(), i + 1);
}

TEST_F(WorkerE2eTest, WorkersTrainThroughASchedulerRestartAndReplayReports) {
  StartWorker("wa");
  const fs::path trace = dir_ / "trace";
  auto spec = ParseStudySpec(
      SlowStudy("outage", trace, "STEPS: \"60\", STEP_SLEEP: \"0.05\"", "", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto t = client_->GetTrial("outage", 0);
        return t.ok() && t->last_step() >= 5;
      },
      std::chrono::seconds(60)));
  scheduler_.Kill(SIGKILL);
  // The trial keeps training while the scheduler is down.
  const size_t seen = Trace(trace).size();
  ASSERT_TRUE(WaitUntil([&] { return Trace(trace).size() >= seen + 10; },
                        std::chrono::seconds(30)));
  RestartScheduler();
  auto last = WaitForEnd("outage");
  EXPECT_EQ(last.kind(), v1::StudyEvent::STUDY_FINISHED);
  auto t = client_->GetTrial("outage", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state(), v1::COMPLETED) << t->error();
  EXPECT_EQ(t->attempt(), 1);  // reattached, never requeued
  // The reports made during the outage arrived, each exactly once.
  ExpectEveryStepOnce(*t, 60);
  for (const auto& [attempt, step] : Trace(trace)) EXPECT_EQ(attempt, 1);
}

TEST_F(WorkerE2eTest, APartitionedWorkerIsFencedAndKillsItsTrial) {
  std::map<std::string, testing::Subprocess*> workers = {
      {"wa", &StartWorker("wa")}, {"wb", &StartWorker("wb")}};
  const fs::path trace = dir_ / "trace";
  auto spec = ParseStudySpec(
      SlowStudy("split", trace, "STEPS: \"80\", STEP_SLEEP: \"0.05\"", "", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  std::string first;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto t = client_->GetTrial("split", 0);
        if (!t.ok() || t->last_step() < 5) return false;
        first = t->worker_id().substr(0, 2);
        return true;
      },
      std::chrono::seconds(60)));
  // Freeze the worker (not its trial): its lease runs out and the trial
  // moves to the other worker as attempt 2.
  ::kill(workers.at(first)->pid(), SIGSTOP);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto t = client_->GetTrial("split", 0);
        return t.ok() && t->attempt() == 2;
      },
      std::chrono::seconds(30)));
  ::kill(workers.at(first)->pid(), SIGCONT);
  auto last = WaitForEnd("split");
  EXPECT_EQ(last.kind(), v1::StudyEvent::STUDY_FINISHED);
  auto t = client_->GetTrial("split", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state(), v1::COMPLETED) << t->error();
  EXPECT_EQ(t->attempt(), 2);
  EXPECT_NE(t->worker_id().substr(0, 2), first);
  // The history only moves forward: attempt 2 replayed steps 1..k (already
  // on record, ignored) and went on; the fenced attempt added nothing.
  ExpectEveryStepOnce(*t, 80);
  // The frozen attempt was killed: it made at most one more step (the one
  // it was reporting when its worker froze) after attempt 2 began.
  int first_max = 0;
  for (const auto& [attempt, step] : Trace(trace)) {
    if (attempt == 1) first_max = std::max(first_max, step);
  }
  EXPECT_LT(first_max, 80);
  std::ifstream log(dir_ / (first + ".log"));
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_THAT(text, HasSubstr("killing"));
}

TEST_F(WorkerE2eTest, AHungTrialIsKilledAndRetriedThenFailsWithItsReason) {
  StartWorker("wa");
  const fs::path trace = dir_ / "trace";
  // Attempt 1 hangs; the retry completes.
  auto retried = ParseStudySpec(
      SlowStudy("hung", trace, "STEPS: \"5\", HANG_ON_ATTEMPT: \"1\"",
                "  timeout_s: 2\n", 1));
  ASSERT_TRUE(retried.ok()) << retried.status();
  ASSERT_TRUE(client_->CreateStudy(*retried).ok());
  WaitForEnd("hung");
  auto t = client_->GetTrial("hung", 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state(), v1::COMPLETED) << t->error();
  EXPECT_EQ(t->attempt(), 2);
  EXPECT_EQ(t->failures(), 1);
  ExpectEveryStepOnce(*t, 5);

  // Without retries left, the trial fails and says why.
  auto failing = ParseStudySpec(
      SlowStudy("hung-again", dir_ / "trace2",
                "STEPS: \"5\", HANG_ON_ATTEMPT: \"1\"", "  timeout_s: 2\n", 0));
  ASSERT_TRUE(failing.ok()) << failing.status();
  ASSERT_TRUE(client_->CreateStudy(*failing).ok());
  WaitForEnd("hung-again");
  auto f = client_->GetTrial("hung-again", 0);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->state(), v1::FAILED);
  EXPECT_THAT(f->error(), HasSubstr("no report for 2 s (trial.timeout_s)"));
  EXPECT_THAT(Dialctl("trials get hung-again 0"), HasSubstr("trial.timeout_s"));
}

}  // namespace
}  // namespace dial

namespace dial {
namespace {

// dial-train under a file-size limit (what a full disk looks like to a
// writer): the checkpoint after the limit fails the run with a clear
// error, and the one before it is intact and still the latest.
TEST(StorageFaultTest, ACheckpointThatCannotBeWrittenFailsAndKeepsThePrevious) {
  DIAL_SKIP_WITHOUT_TRAINER();
  const fs::path root =
      fs::temp_directory_path() / ("dial-full-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string train =
      std::string(DIAL_TRAIN_BIN) +
      " --dataset=synthetic --checkpoint-root=" + root.string() +
      " --study=full --trial=0 --knobs='{\"eval_every\": 50, "
      "\"batch_size\": 32, \"units\": 256}'";
  ASSERT_EQ(std::system((train + " --steps=50 > /dev/null 2>&1").c_str()), 0);
  // 16 KiB per file: the weights (~300 KB) no longer fit. SIGXFSZ is
  // ignored, so the write fails with EFBIG instead of killing the process.
  const std::string limited = "bash -c \"trap '' XFSZ; ulimit -f 16; exec " +
                              train + " --steps=100 --restore=full/0/50\" 2>&1";
  FILE* pipe = popen(limited.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;)
    out.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
  EXPECT_THAT(out, HasSubstr("File too large")) << out;
  auto store = storage::FileCheckpointStore::Create({root.string()});
  ASSERT_TRUE(store.ok());
  auto steps = (*store)->ListSteps("full", 0);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, std::vector<int64_t>{50});
  EXPECT_TRUE((*store)->Verify("full/0/50").ok());
  // Nothing half-written is left next to it.
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(root / "full" / "0")) {
    entries.push_back(e.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"50"});
  fs::remove_all(root);
}

}  // namespace
}  // namespace dial
