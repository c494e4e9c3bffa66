// Placer: dispatch's view of the shared fleet. It reads the studies'
// startable trials and what runs (under the core's lock), keeps the
// owners' recent usage, and asks placement (a pure policy) which trial a
// worker starts and why a study waits. Not thread-safe: the core's lock
// guards it and everything it is given.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "scheduler/placement.h"
#include "scheduler/quotas.h"
#include "scheduler/study_registry.h"
#include "scheduler/worker_registry.h"

namespace dial::scheduler {

class Placer {
 public:
  struct Parts {
    const StudyRegistry* studies = nullptr;
    const WorkerRegistry* workers = nullptr;
    const Quotas* quotas = nullptr;  // null: everyone gets the default
    const Clock* clock = nullptr;
    absl::Duration half_life = absl::Hours(24 * 7);
  };
  explicit Placer(const Parts& parts) : p_(parts), usage_(parts.half_life) {}

  // The study and the PENDING trial that `worker_id`, with `free_gpus`
  // free, should start; {nullptr, nullptr} if none.
  std::pair<StudyEntry*, const v1::Trial*> Choose(const std::string& worker_id,
                                                  int32_t free_gpus);
  // Why `entry`'s trials wait (placement::WhyWaiting), for GetStudy; empty
  // when nothing but busy workers holds them back, or it has none ready.
  std::string WhyWaiting(const StudyEntry& entry) const;

  // A study's selector, from its spec.
  static placement::Selector SelectorOf(const v1::StudySpec& spec);

 private:
  const QuotaTable& Table() const;
  // Its oldest PENDING trial whose checkpoint is not still uploading.
  static const v1::Trial* Startable(const StudyEntry& entry);
  static placement::Pending PendingOf(const StudyEntry& entry,
                                      const v1::Trial& oldest);
  placement::Running RunningNow() const;
  placement::Worker WorkerOf(const v1::Worker& worker) const;

  Parts p_;
  placement::UsageMeter usage_;
  std::map<std::string, double> recent_;     // the meter's last reading
  std::shared_ptr<const QuotaTable> table_;  // held while in use
};

}  // namespace dial::scheduler
