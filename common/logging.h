// Logging setup for the binaries: spdlog to stderr, so stdout stays for
// machine-readable output. Call once from main, before threads start.
// Every message has its control characters escaped (common/text.h): one
// event is one line, whatever text from a request it quotes.
#pragma once

#include <memory>

#include "absl/strings/string_view.h"

namespace spdlog {
class formatter;
}

namespace dial {

// level: trace, debug, info, warn, error, off. Unknown levels mean info.
void InitLogging(absl::string_view program, absl::string_view level);

// The formatter InitLogging gives its logger (for tests and other sinks).
std::unique_ptr<spdlog::formatter> SafeLogFormatter();

}  // namespace dial
