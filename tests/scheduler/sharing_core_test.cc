// Sharing one scheduler, through SchedulerCore's worker side (memory
// store, fake clock): worker labels and study selectors, why a study
// waits, priorities (who may set them, and that they go first), quotas and
// fair share between owners at dispatch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {
namespace {

using ::testing::HasSubstr;

auth::Principal User(const std::string& name) {
  return {name, auth::Role::kUser, false};
}
const auth::Principal kAdmin{"root", auth::Role::kAdmin, false};
const auth::Principal kWorker{"fleet", auth::Role::kWorker, false};

v1::StudySpec Spec(const std::string& name, const std::string& extra = "",
                   int parallel = 8) {
  auto spec = ParseStudySpec(
      absl::StrCat("name: ", name,
                   "\nobjective: {metric: acc, goal: MAXIMIZE}\n"
                   "search_space: [{name: lr, float: {min: 0.001, max: 0.1}}]\n"
                   "budget: {max_trials: 100, max_parallel_trials: ",
                   parallel, "}\n", extra));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}
// A worker-run study's trial section, with `resources` inside it.
std::string Trial(const std::string& resources = "") {
  return "trial: {trainer: {dataset: synthetic}" +
         (resources.empty() ? "" : ", resources: " + resources) + "}\n";
}

class SharingCoreTest : public ::testing::Test {
 protected:
  void Start(const std::string& quotas_text = "") {
    if (!quotas_text.empty()) {
      std::ofstream(quotas_path_) << quotas_text;
      auto quotas = Quotas::Load(quotas_path_.string());
      ASSERT_TRUE(quotas.ok()) << quotas.status();
      quotas_ = std::move(*quotas);
    }
    SchedulerCoreOptions options;
    options.store = store_.get();
    options.clock = &clock_;
    options.tick = absl::ZeroDuration();
    options.quotas = quotas_.get();
    auto core = SchedulerCore::Create(options);
    ASSERT_TRUE(core.ok());
    core_ = std::move(*core);
  }
  ~SharingCoreTest() override { std::filesystem::remove(quotas_path_); }

  void Create(const v1::StudySpec& spec, const auth::Principal& who) {
    auto created = core_->CreateStudy(spec, who);
    ASSERT_TRUE(created.ok()) << created.status();
    core_->WaitIdle();
  }
  std::string Register(const std::string& host,
                       std::map<std::string, std::string> labels = {},
                       int gpus = 0) {
    v1::WorkerResources r;
    r.set_slots(1);
    for (int i = 0; i < gpus; ++i) r.add_gpus()->set_id(std::to_string(i));
    for (const auto& [k, v] : labels) (*r.mutable_labels())[k] = v;
    auto w = core_->RegisterWorker(host, r, kWorker);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? w->worker_id() : "";
  }
  // The study of the trial `worker` gets now ("" for none).
  std::string Acquire(const std::string& worker, int free_gpus = 0) {
    std::string study;
    core_->AcquireTrial(
        worker, free_gpus, absl::ZeroDuration(), [] { return true; },
        [&](absl::StatusOr<std::optional<Assignment>> r) {
          EXPECT_TRUE(r.ok()) << r.status();
          if (r.ok() && r->has_value()) study = (*r)->trial.study();
        },
        kWorker);
    core_->WaitIdle();  // its top-up
    return study;
  }
  std::string Waiting(const std::string& study) {
    auto s = core_->GetStudy(study);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->waiting() : "";
  }

  const std::filesystem::path quotas_path_ =
      std::filesystem::temp_directory_path() /
      absl::StrCat("dial-sharing-quotas-", ::getpid());
  FakeClock clock_;
  std::unique_ptr<storage::MemoryStudyStore> store_ =
      storage::MemoryStudyStore::Create();
  std::unique_ptr<Quotas> quotas_;
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(SharingCoreTest, ATrialRunsOnlyOnAWorkerItsSelectorMatches) {
  Start();
  Create(Spec("eu", Trial("{selector: {zone: [eu]}}")), kAdmin);
  const std::string us = Register("us1", {{"zone", "us"}});
  const std::string eu = Register("eu1", {{"zone", "eu"}});
  EXPECT_EQ(Acquire(us), "");
  EXPECT_EQ(Acquire(eu), "eu");
  // Every worker has its host as a label.
  Create(Spec("pinned", Trial("{selector: {host: [us1]}}")), kAdmin);
  EXPECT_EQ(Acquire(eu), "eu");
  EXPECT_EQ(Acquire(us), "pinned");
}

TEST_F(SharingCoreTest, AStudyNoWorkerMatchesSaysWhyItWaits) {
  Start();
  Create(Spec("a100", Trial("{selector: {gpu.model: [A100, H100]}}")), kAdmin);
  EXPECT_EQ(Waiting("a100"), "waiting: no worker is registered");
  Register("t4", {{"gpu.model", "T4"}});
  EXPECT_EQ(Waiting("a100"),
            "waiting: no worker matches gpu.model in [A100, H100]");
  auto listed = core_->ListStudies(auth::Anonymous());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->studies.size(), 1u);
  EXPECT_EQ(listed->studies[0].waiting(), Waiting("a100"));
  Register("h100", {{"gpu.model", "H100"}});
  EXPECT_EQ(Waiting("a100"), "");
  Create(Spec("big", Trial("{gpus: 4}")), kAdmin);
  EXPECT_EQ(Waiting("big"), "waiting: no matching worker has 4 GPUs");
}

TEST_F(SharingCoreTest, BadLabelsAndSelectorsAreRefusedNamingTheField) {
  Start();
  v1::WorkerResources r;
  r.set_slots(1);
  (*r.mutable_labels())["bad key"] = "x";
  auto refused = core_->RegisterWorker("h", r, kWorker);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("resources.labels.bad key"));
  for (const auto& [selector, field] :
       std::vector<std::pair<std::string, std::string>>{
           {"{selector: {zone: []}}", "trial.resources.selector.zone"},
           {"{selector: {zone: [1]}}", "trial.resources.selector.zone[0]"},
           {"{selector: {\"-x\": [a]}}", "trial.resources.selector.-x"},
       }) {
    auto created = core_->CreateStudy(Spec("s", Trial(selector)), kAdmin);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument)
        << selector;
    EXPECT_THAT(std::string(created.status().message()), HasSubstr(field));
  }
  auto out_of_range = core_->CreateStudy(Spec("s", "priority: 101\n"), kAdmin);
  EXPECT_THAT(std::string(out_of_range.status().message()),
              HasSubstr("priority: must be between -100 and 100"));
}

TEST_F(SharingCoreTest, AnOwnerSetsAtMostTheirQuotasPriority) {
  Start("ann max_priority=10\n");
  auto high = core_->CreateStudy(Spec("b", "priority: 5\n"), User("bo"));
  EXPECT_EQ(high.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(high.status().message()),
              HasSubstr("'bo' may set at most 0"));
  EXPECT_TRUE(core_->CreateStudy(Spec("b", "priority: -5\n"), User("bo")).ok());
  EXPECT_TRUE(
      core_->CreateStudy(Spec("a", "priority: 10\n"), User("ann")).ok());
  EXPECT_TRUE(core_->CreateStudy(Spec("r", "priority: 90\n"), kAdmin).ok());
  EXPECT_EQ(core_->UpdateStudy("a", StudyChange{0, 0, 11}, User("ann"))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  auto lowered = core_->UpdateStudy("a", StudyChange{0, 0, 3}, User("ann"));
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(lowered->spec().priority(), 3);
  EXPECT_EQ(core_->GetStudy("a")->spec().priority(), 3);
}

TEST_F(SharingCoreTest, HigherPriorityTrialsStartFirstAndAnUpdateReorders) {
  Start();
  Create(Spec("low", Trial()), kAdmin);
  Create(Spec("high", "priority: 5\n" + Trial()), kAdmin);
  const std::string w = Register("w");
  EXPECT_EQ(Acquire(w), "high");
  EXPECT_EQ(Acquire(w), "high");
  ASSERT_TRUE(core_->UpdateStudy("low", StudyChange{0, 0, 6}, kAdmin).ok());
  EXPECT_EQ(Acquire(w), "low");
}

TEST_F(SharingCoreTest, AnOwnerAtMaxSlotsGetsNoMoreTrials) {
  Start("default max_slots=2\n");
  Create(Spec("a", Trial()), User("ann"));
  std::vector<std::string> workers;
  for (int i = 0; i < 3; ++i)
    workers.push_back(Register("w" + std::to_string(i)));
  EXPECT_EQ(Acquire(workers[0]), "a");
  EXPECT_EQ(Acquire(workers[1]), "a");
  EXPECT_EQ(Acquire(workers[2]), "");
  EXPECT_EQ(Waiting("a"),
            "waiting: owner 'ann' runs 2 trials, its quota's max_slots");
  // Another owner is not held back by ann's quota.
  Create(Spec("b", Trial()), User("bo"));
  EXPECT_EQ(Acquire(workers[2]), "b");
}

TEST_F(SharingCoreTest, EqualOwnersShareTheWorkersAndWeightsTilt) {
  Start("ann weight=3\n");
  Create(Spec("a", Trial()), User("ann"));
  Create(Spec("b", Trial()), User("bo"));
  std::map<std::string, int> got;
  for (int i = 0; i < 8; ++i) ++got[Acquire(Register("w" + std::to_string(i)))];
  // ann weighs 3: 6 of 8 slots to her, 2 to bo.
  EXPECT_EQ(got["a"], 6);
  EXPECT_EQ(got["b"], 2);
}

}  // namespace
}  // namespace dial::scheduler
