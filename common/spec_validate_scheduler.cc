// The trial scheduler's rules of docs/spec.md (early stopping, PBT, the
// rank check).
#include "common/spec_validate_scheduler.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dial {
namespace {

// Rungs of ASHA and brackets of Hyperband (min_steps x factor^k below
// max_steps).
constexpr int kMaxRungs = 1000;

absl::Status Invalid(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// The rungs of ASHA or Hyperband at `where`.
absl::Status CheckRungs(const std::string& where, int64_t min_steps,
                        int64_t max_steps, double eta) {
  if (min_steps < 1) return Invalid(where + ".min_steps", "must be >= 1");
  if (max_steps <= min_steps) {
    return Invalid(
        where + ".max_steps",
        absl::StrCat("must be greater than min_steps (", min_steps, ")"));
  }
  if (!(eta > 1)) {
    return Invalid(where + ".reduction_factor",
                   "must be greater than 1 (typically 3)");
  }
  if (!std::isfinite(eta)) {
    return Invalid(where + ".reduction_factor", "must be finite");
  }
  // As the trial schedulers count them, in doubles: a factor just above
  // 1 would otherwise make millions of rungs (or, rounding, never end).
  int rungs = 0;
  for (double r = static_cast<double>(min_steps);
       r < static_cast<double>(max_steps) && rungs <= kMaxRungs; r *= eta) {
    ++rungs;
  }
  if (rungs > kMaxRungs) {
    return Invalid(where + ".reduction_factor",
                   absl::StrCat("makes more than ", kMaxRungs,
                                " rungs from min_steps to max_steps; use a "
                                "larger factor (typically 3)"));
  }
  return absl::OkStatus();
}

}  // namespace

// The trial scheduler (early stopping, PBT).
absl::Status ValidateScheduler(const v1::StudySpec& spec) {
  const auto& sched = spec.scheduler();
  if (sched.has_asha()) {
    DIAL_RETURN_IF_ERROR(CheckRungs("scheduler.asha", sched.asha().min_steps(),
                                    sched.asha().max_steps(),
                                    sched.asha().reduction_factor()));
  }
  if (sched.has_hyperband()) {
    DIAL_RETURN_IF_ERROR(CheckRungs(
        "scheduler.hyperband", sched.hyperband().min_steps(),
        sched.hyperband().max_steps(), sched.hyperband().reduction_factor()));
  }
  if (sched.has_curve()) {
    const auto& c = sched.curve();
    if (c.max_steps() < 2) {
      return Invalid("scheduler.curve.max_steps",
                     "must be >= 2: the step every trial's curve ends at");
    }
    if (c.grace_steps() < 0 || c.grace_steps() >= c.max_steps()) {
      return Invalid(
          "scheduler.curve.grace_steps",
          absl::StrCat("must be in [0, max_steps) = [0, ", c.max_steps(), ")"));
    }
    if (!(c.optimism() >= 0 && c.optimism() <= 0.5)) {
      return Invalid("scheduler.curve.optimism",
                     "must be in (0, 0.5] (0: the default, 0.1)");
    }
    if (c.min_curves() < 0 || c.min_curves() > 1000) {
      return Invalid("scheduler.curve.min_curves",
                     "must be in [1, 1000] (0: the default, 3)");
    }
    if (spec.objectives_size() > 1) {
      return Invalid("scheduler.curve",
                     "extrapolates one objective; with several objectives "
                     "use asha or hyperband");
    }
  }
  if (sched.has_median() && sched.median().grace_steps() < 0) {
    return Invalid("scheduler.median.grace_steps", "must be >= 0");
  }
  if (spec.objectives_size() > 1 && sched.has_median()) {
    return Invalid("scheduler.median",
                   "compares one objective's median; with several "
                   "objectives use asha or hyperband, which rank a rung by "
                   "non-dominated sorting");
  }
  if (spec.objectives_size() > 1 && sched.has_hyperband() &&
      sched.hyperband().synchronous()) {
    return Invalid("scheduler.hyperband.synchronous",
                   "ranks by one objective; with several objectives use the "
                   "asynchronous variant");
  }
  if (spec.objectives_size() > 1 && sched.has_pbt()) {
    return Invalid("scheduler.pbt",
                   "exploits by one objective; give one objective");
  }
  if (sched.has_pbt()) {
    if (sched.pbt().perturbation_interval() < 1) {
      return Invalid("scheduler.pbt.perturbation_interval", "must be >= 1");
    }
    if (!(sched.pbt().quantile() > 0 && sched.pbt().quantile() <= 0.5)) {
      return Invalid("scheduler.pbt.quantile", "must be in (0, 0.5]");
    }
    if (!(sched.pbt().resample_probability() >= 0 &&
          sched.pbt().resample_probability() <= 1)) {
      return Invalid("scheduler.pbt.resample_probability", "must be in [0, 1]");
    }
  }
  if (sched.has_rank_check()) {
    const auto& check = sched.rank_check();
    if (check.min_trials() < 0 || check.min_trials() > 200) {
      return Invalid("scheduler.rank_check.min_trials",
                     "must be in [2, 200] (0: the default, 8)");
    }
    if (check.min_trials() == 1) {
      return Invalid("scheduler.rank_check.min_trials",
                     "must be in [2, 200]: one trial ranks nothing");
    }
    if (!(check.min_correlation() > 0 && check.min_correlation() <= 1) &&
        check.min_correlation() != 0) {
      return Invalid("scheduler.rank_check.min_correlation",
                     "must be in (0, 1] (0: the default, 0.7)");
    }
    const char* why = nullptr;
    if (sched.has_fifo() ||
        sched.kind_case() == v1::SchedulerSpec::KIND_NOT_SET) {
      why = "guards a stopping scheduler; fifo stops no trial";
    } else if (sched.has_pbt()) {
      why = "guards a stopping scheduler; pbt stops no trial";
    } else if (sched.has_hyperband() && sched.hyperband().synchronous()) {
      why =
          "cannot overrule synchronous hyperband, whose rounds wait for "
          "every paused trial; use the asynchronous variant";
    } else if (spec.objectives_size() > 1) {
      why = "ranks by one objective; with several objectives leave it out";
    }
    if (why) return Invalid("scheduler.rank_check", why);
  }
  return absl::OkStatus();
}

}  // namespace dial
