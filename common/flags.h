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

// Where dial-train is: next to the running binary (an install), else in
// the build tree beside it (build/trainer/dial-train), else "dial-train"
// for a PATH lookup.
std::string DefaultTrainerPath();

}  // namespace dial
