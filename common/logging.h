// Logging setup for the binaries: spdlog to stderr, so stdout stays for
// machine-readable output. Call once from main, before threads start.
#pragma once

#include "absl/strings/string_view.h"

namespace dial {

// level: trace, debug, info, warn, error, off. Unknown levels mean info.
void InitLogging(absl::string_view program, absl::string_view level);

}  // namespace dial
