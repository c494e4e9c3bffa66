// Usage totals: what worker trials' attempts used, summed by owner or by
// study from their usage records (docs/scheduling.md#usage).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/service.pb.h"

namespace dial::scheduler {

// `records` summed by `by` ("owner", the default when empty, or "study"),
// most slot-seconds first; only `owner`'s when given. INVALID_ARGUMENT for
// another `by`.
absl::StatusOr<v1::GetUsageResponse> SumUsage(
    const std::vector<v1::UsageRecord>& records, const std::string& by,
    const std::optional<std::string>& owner);

}  // namespace dial::scheduler
