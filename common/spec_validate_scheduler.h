// The trial scheduler's part of ValidateStudySpec (common/spec.h).
#pragma once

#include "absl/status/status.h"
#include "dial/v1/spec.pb.h"

namespace dial {

// scheduler: the kind's own fields, what the kind allows with several
// objectives, and the rank check.
absl::Status ValidateScheduler(const v1::StudySpec& spec);

}  // namespace dial
