// Command-line helpers for the binaries. Not thread-safe: call from main
// before parsing flags.
#pragma once

#include <string>
#include <vector>

namespace dial {

// Abseil flag names cannot hold '-': rewrites "--checkpoint-root=x" (and
// "-checkpoint-root") to "--checkpoint_root=x" so both spellings work.
// Stops at "--". Returns storage for the rewritten argv; keep it alive.
std::vector<std::string> DashesToUnderscores(int argc, char** argv);

}  // namespace dial
