// Sharing one scheduler, end to end with real workers (issue 34): labelled
// workers and study selectors (no trial runs on a worker that does not
// match; a study no worker matches waits and says why, in GetStudy and in
// dialctl), and an owner's max_slots quota from --quotas.
#include <set>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A study of `trials` command trials (slow_trial.py: `steps` reports
// 0.05 s apart) with `extra` spec lines.
v1::StudySpec SlowStudy(const std::string& name, int trials, int parallel,
                        int steps, const std::string& resources = "") {
  auto spec = ParseStudySpec(absl::StrCat(
      "name: ", name,
      "\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "budget: {max_trials: ",
      trials, ", max_parallel_trials: ", parallel,
      "}\n"
      "trial: {command: {argv: [/usr/bin/python3, " DIAL_SOURCE_DIR
      "/tests/e2e/slow_trial.py], env: {STEPS: \"",
      steps, "\"}}", resources.empty() ? "" : ", resources: " + resources,
      "}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST_F(WorkerE2eTest, TrialsRunOnlyOnWorkersTheirSelectorMatches) {
  StartWorker("eu1", 2, {"--label=zone=eu", "--label=tier=gold"});
  StartWorker("us1", 2, {"--label", "zone=us"});
  ASSERT_TRUE(
      client_
          ->CreateStudy(SlowStudy("in-eu", 6, 3, 5, "{selector: {zone: [eu]}}"))
          .ok());
  ASSERT_TRUE(client_
                  ->CreateStudy(SlowStudy("a100", 2, 1, 5,
                                          "{selector: {gpu.model: [A100]}}"))
                  .ok());
  // Both workers register with their labels and their host.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto w = client_->ListWorkers();
        return w.ok() && w->workers_size() == 2;
      },
      std::chrono::seconds(30)));
  auto workers = client_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const v1::Worker& w : workers->workers()) {
    EXPECT_EQ(w.resources().labels().at("host"), w.host());
    EXPECT_EQ(w.resources().labels().at("zone"),
              w.host() == "eu1" ? "eu" : "us");
  }
  WaitForEnd("in-eu");
  auto trials = client_->ListAllTrials("in-eu", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 6u);
  for (const v1::Trial& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
    EXPECT_THAT(t.worker_id(), StartsWith("eu1-")) << t.number();
  }
  // No worker has an A100: the study waits, and says so.
  auto a100 = client_->GetStudy("a100");
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->state(), v1::STUDY_ACTIVE);
  EXPECT_EQ(a100->trial_counts().count("RUNNING"), 0u);
  EXPECT_EQ(a100->waiting(), "waiting: no worker matches gpu.model in [A100]");
  const std::string shown = Dialctl("study get a100");
  EXPECT_THAT(shown,
              HasSubstr("waiting: no worker matches gpu.model in [A100]"));
  EXPECT_THAT(shown, HasSubstr("selector:    gpu.model in [A100]"));
  EXPECT_THAT(shown, HasSubstr("priority:    0"));
}

class QuotaE2eTest : public WorkerE2eTest {
 protected:
  std::vector<std::string> SchedulerFlags() const override {
    const fs::path quotas = dir_ / "quotas";
    std::ofstream(quotas) << "# every owner\ndefault max_slots=2\n";
    return {"--quotas=" + quotas.string()};
  }
};

TEST_F(QuotaE2eTest, AnOwnerWithMaxSlotsTwoNeverRunsMoreThanTwoTrials) {
  StartWorker("big", 4);
  ASSERT_TRUE(client_->CreateStudy(SlowStudy("q", 8, 4, 10)).ok());
  std::set<int64_t> running;
  size_t most = 0;
  bool said_why = false;
  WaitForEnd("q", [&](const v1::StudyEvent& e) {
    if (!e.has_trial()) return;
    if (e.trial().state() == v1::RUNNING) {
      running.insert(e.trial().number());
    } else {
      running.erase(e.trial().number());
    }
    most = std::max(most, running.size());
    if (running.size() == 2 && !said_why) {
      auto q = client_->GetStudy("q");
      said_why = q.ok() && q->waiting() ==
                               "waiting: its owner runs 2 trials, its quota's "
                               "max_slots";
    }
  });
  EXPECT_EQ(most, 2u);
  auto trials = client_->ListAllTrials("q", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 8u);
  for (const v1::Trial& t : *trials) {
    EXPECT_EQ(t.state(), v1::COMPLETED) << t.error();
  }
  // While two ran, with PENDING trials and free slots, GetStudy said why.
  EXPECT_TRUE(said_why);
}

}  // namespace
}  // namespace dial
