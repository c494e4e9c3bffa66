#include "searchers/trial_scheduler.h"

namespace dial::searchers {

v1::Decision FifoScheduler::OnReport(const v1::Trial& trial, int64_t step,
                                     const Metrics& metrics) {
  v1::Decision decision;
  decision.set_action(v1::Decision::CONTINUE);
  return decision;
}

absl::StatusOr<std::unique_ptr<TrialScheduler>> CreateTrialScheduler(
    const v1::StudySpec& spec) {
  switch (spec.scheduler().kind_case()) {
    case v1::SchedulerSpec::kFifo:
    case v1::SchedulerSpec::KIND_NOT_SET:
      return std::make_unique<FifoScheduler>();
    case v1::SchedulerSpec::kMedian:
      return absl::UnimplementedError(
          "scheduler.median is not implemented yet; use fifo");
    case v1::SchedulerSpec::kAsha:
      return absl::UnimplementedError(
          "scheduler.asha is not implemented yet; use fifo");
    case v1::SchedulerSpec::kHyperband:
      return absl::UnimplementedError(
          "scheduler.hyperband is not implemented yet; use fifo");
    case v1::SchedulerSpec::kPbt:
      return absl::UnimplementedError(
          "scheduler.pbt is not implemented yet; use fifo");
  }
  return absl::InvalidArgumentError("scheduler: unknown kind");
}

}  // namespace dial::searchers
