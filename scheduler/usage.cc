#include "scheduler/usage.h"

#include <algorithm>
#include <map>

namespace dial::scheduler {

absl::StatusOr<v1::GetUsageResponse> SumUsage(
    const std::vector<v1::UsageRecord>& records, const std::string& by,
    const std::optional<std::string>& owner) {
  if (!by.empty() && by != "owner" && by != "study") {
    return absl::InvalidArgumentError("by: must be owner or study, not '" + by +
                                      "'");
  }
  const bool by_study = by == "study";
  std::map<std::string, v1::UsageTotal> totals;
  for (const v1::UsageRecord& r : records) {
    if (owner && r.owner() != *owner) continue;
    v1::UsageTotal& t = totals[by_study ? r.study() : r.owner()];
    t.set_key(by_study ? r.study() : r.owner());
    t.set_owner(r.owner());
    t.set_slot_seconds(t.slot_seconds() + r.slot_seconds());
    t.set_gpu_seconds(t.gpu_seconds() + r.gpu_seconds());
    t.set_cpu_seconds(t.cpu_seconds() + r.cpu_seconds());
    t.set_attempts(t.attempts() + 1);
  }
  std::vector<v1::UsageTotal> sorted;
  for (auto& [key, t] : totals) sorted.push_back(std::move(t));
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) {
                     return a.slot_seconds() > b.slot_seconds();
                   });
  v1::GetUsageResponse out;
  for (auto& t : sorted) *out.add_totals() = std::move(t);
  return out;
}

}  // namespace dial::scheduler
