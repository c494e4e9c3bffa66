// Status helpers shared by every component. Debian's Abseil (20220623) has no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so Dial keeps its own. Thread-safe: pure
// macros and free functions.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DIAL_STATUS_CONCAT_INNER_(a, b) a##b
#define DIAL_STATUS_CONCAT_(a, b) DIAL_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define DIAL_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status dial_status_ = (expr);        \
    if (!dial_status_.ok()) return dial_status_; \
  } while (0)

// `DIAL_ASSIGN_OR_RETURN(auto x, F())` declares x from F()'s value, or
// returns F()'s error.
#define DIAL_ASSIGN_OR_RETURN(lhs, expr)                                     \
  DIAL_ASSIGN_OR_RETURN_IMPL_(DIAL_STATUS_CONCAT_(dial_sor_, __LINE__), lhs, \
                              expr)
#define DIAL_ASSIGN_OR_RETURN_IMPL_(sor, lhs, expr) \
  auto sor = (expr);                                \
  if (!sor.ok()) return std::move(sor).status();    \
  lhs = std::move(sor).value()

namespace dial {

// The prefix of the scheduler's refusal of a checkpoint over its owner's
// quota (RESOURCE_EXHAUSTED). Unlike other RESOURCE_EXHAUSTED answers it is
// final: waiting does not free the owner's disk, so workers do not retry.
inline constexpr char kCheckpointQuotaPrefix[] = "checkpoint quota: ";

inline bool IsCheckpointQuotaRefusal(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         s.message().substr(0, sizeof(kCheckpointQuotaPrefix) - 1) ==
             kCheckpointQuotaPrefix;
}

}  // namespace dial
