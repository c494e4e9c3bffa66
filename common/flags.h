// Command-line helpers for the binaries. Not thread-safe: call from main
// before parsing flags.
#pragma once

#include <string>
#include <vector>

namespace dial {

// Abseil flag names cannot hold '-': rewrites "--checkpoint-root=x" (and
// "-checkpoint-root") to "--checkpoint_root=x" so both spellings work.
// Expands "--flagfile=PATH" in place (one flag a line, either spelling;
// blank and '#' lines skipped; nested files too), so a Kubernetes
// ConfigMap or a systemd EnvironmentFile can hold flags as the docs spell
// them; an unreadable file is left for Abseil to report. Stops at "--".
// Points argc/argv at the result; returns its storage (keep it alive).
std::vector<std::string> DashesToUnderscores(int& argc, char**& argv);

// Where dial-train is: next to the running binary (an install), else in
// the build tree beside it (build/trainer/dial-train), else "dial-train"
// for a PATH lookup.
std::string DefaultTrainerPath();

}  // namespace dial
