// The fixture of the tests that share one scheduler core among owners
// and workers (memory store, fake clock, Tick by hand): studies of given
// priorities and resources, workers with labels, acquiring, reporting.
// Not thread-safe.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/spec.h"
#include "scheduler/core.h"
#include "storage/memory_study_store.h"
#include "tests/scheduler/test_util.h"

namespace dial::scheduler {

inline auth::Principal User(const std::string& name) {
  return {name, auth::Role::kUser, false};
}
inline const auth::Principal kAdmin{"root", auth::Role::kAdmin, false};
inline const auth::Principal kWorker{"fleet", auth::Role::kWorker, false};

inline v1::StudySpec Spec(const std::string& name,
                          const std::string& extra = "", int parallel = 8) {
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
inline std::string Trial(const std::string& resources = "") {
  return "trial: {trainer: {dataset: synthetic}" +
         (resources.empty() ? "" : ", resources: " + resources) + "}\n";
}

class SharingCoreTest : public ::testing::Test {
 protected:
  void Start(const std::string& quotas_text = "",
             absl::Duration grace = absl::Seconds(30),
             absl::Duration min_run = absl::Seconds(60)) {
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
    options.preempt_grace = grace;
    options.preempt_min_run = min_run;
    options.fair_share_preempt = fair_share_preempt_;
    options.worker_lease = absl::Minutes(10);  // the clock jumps by minutes
    options.on_usage = on_usage_;
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
    for (int i = 0; i < gpus; ++i) r.add_gpus()->set_id(std::to_string(i));
    for (const auto& [k, v] : labels) (*r.mutable_labels())[k] = v;
    return RegisterWith(host, std::move(r));
  }
  // A one-slot worker with these resources (isolation, commands...).
  std::string RegisterWith(const std::string& host, v1::WorkerResources r) {
    r.set_slots(1);
    auto w = core_->RegisterWorker(host, r, kWorker);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? w->worker_id() : "";
  }
  // The study of the trial `worker` gets now ("" for none).
  std::string Acquire(const std::string& worker, int free_gpus = 0) {
    auto a = AcquireOne(worker, free_gpus);
    return a ? a->trial.study() : "";
  }
  // The assignment `worker` gets now.
  std::optional<Assignment> AcquireOne(const std::string& worker,
                                       int free_gpus = 0) {
    std::optional<Assignment> got;
    core_->AcquireTrial(
        worker, free_gpus, absl::ZeroDuration(), [] { return true; },
        [&](absl::StatusOr<std::optional<Assignment>> r) {
          EXPECT_TRUE(r.ok()) << r.status();
          if (r.ok()) got = *r;
        },
        kWorker);
    core_->WaitIdle();
    return got;
  }
  Reply<v1::Decision> Report(const std::string& worker, const Assignment& a,
                             int64_t step, bool checkpoint = true) {
    return core_->ReportProgress(
        ReportRequest(worker, a, step,
                      checkpoint ? absl::StrCat(a.trial.study(), "/",
                                                a.trial.number(), "/", step)
                                 : ""),
        kWorker);
  }
  // A low-priority trial runs on a new worker `w`, and a priority-1 study
  // has waited two seconds: the trial is marked for preemption.
  std::optional<Assignment> StarvedBehind(const std::string& w) {
    Create(Spec("low", Trial(), 1), kAdmin);
    auto low = AcquireOne(w);
    EXPECT_TRUE(low.has_value());
    Create(Spec("high", "priority: 1\n" + Trial(), 1), kAdmin);
    core_->Tick();
    clock_.Advance(absl::Seconds(2));
    core_->Tick();
    return low;
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
  std::function<void(const v1::UsageRecord&)> on_usage_;
  bool fair_share_preempt_ = false;
  std::unique_ptr<SchedulerCore> core_;
};

}  // namespace dial::scheduler
