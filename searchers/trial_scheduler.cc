#include "searchers/trial_scheduler.h"

#include "searchers/curve_stopping.h"
#include "searchers/early_stopping.h"
#include "searchers/pbt.h"
#include "searchers/rank_check.h"

namespace dial::searchers {

v1::Decision FifoScheduler::OnReport(const v1::Trial& trial, int64_t step,
                                     const Metrics& metrics) {
  v1::Decision decision;
  decision.set_action(v1::Decision::CONTINUE);
  return decision;
}

namespace {

absl::StatusOr<std::unique_ptr<TrialScheduler>> CreateKind(
    const v1::StudySpec& spec) {
  const auto& s = spec.scheduler();
  switch (s.kind_case()) {
    case v1::SchedulerSpec::kFifo:
    case v1::SchedulerSpec::KIND_NOT_SET:
      return std::make_unique<FifoScheduler>();
    case v1::SchedulerSpec::kMedian:
      return std::make_unique<MedianStoppingScheduler>(spec);
    case v1::SchedulerSpec::kAsha:
      return std::make_unique<AshaScheduler>(
          spec, s.asha().min_steps(), s.asha().max_steps(),
          s.asha().reduction_factor(), s.asha().promotion());
    case v1::SchedulerSpec::kHyperband:
      if (s.hyperband().synchronous()) {
        return std::make_unique<SyncHyperbandScheduler>(spec);
      }
      return std::make_unique<AsyncHyperbandScheduler>(spec);
    case v1::SchedulerSpec::kCurve:
      return std::make_unique<CurveStoppingScheduler>(spec);
    case v1::SchedulerSpec::kPbt: {
      auto pbt = PbtScheduler::Create(spec);
      if (!pbt.ok()) return pbt.status();
      return std::unique_ptr<TrialScheduler>(std::move(*pbt));
    }
  }
  return absl::InvalidArgumentError("scheduler: unknown kind");
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrialScheduler>> CreateTrialScheduler(
    const v1::StudySpec& spec) {
  auto made = CreateKind(spec);
  if (!made.ok() || !spec.scheduler().has_rank_check()) return made;
  return std::unique_ptr<TrialScheduler>(
      std::make_unique<RankCheckedScheduler>(spec, std::move(*made)));
}

}  // namespace dial::searchers
