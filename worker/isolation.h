// What a worker can promise about the walls between its trials, decided
// once at start-up from its flags and what the host gives it: whether each
// attempt runs as a Unix user of its own (--run-as-range, as root), and
// which per-trial limits hold (cgroup memory and pids controllers,
// RLIMIT_NPROC under a user of the trial's own). The worker logs it and
// sends it in its registration (WorkerResources.isolation), so ListWorkers
// shows it and the scheduler can keep require_isolation studies off a
// worker that cannot isolate. Thread-safe: a plain function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "dial/v1/study.pb.h"

namespace dial::worker {

struct IsolationInputs {
  bool root = false;       // the worker runs as root (euid 0)
  bool uid_range = false;  // --run-as-range was given
  std::string run_as;      // --run-as user name; empty: none
  bool cgroups = false;    // per-trial cgroup scopes are made
  bool memory_controller = false;
  bool pids_controller = false;
  int64_t max_pids = 0;            // --trial-max-pids; 0: no limit
  bool max_pids_explicit = false;  // given on the command line
  bool allow_unenforced = false;   // --allow-unenforced-limits
  // Why per-attempt users do not isolate fully on this host (the start-up
  // probe of the child's setup failed, hard-link protection is off);
  // empty: nothing. Makes isolated false with this as the reason.
  std::string degraded;
};

// The isolation to announce. Limit names: "memory" (trial.resources.
// memory_mb, through the cgroup memory controller), "pids" (pids.max of
// the trial's cgroup), "nproc" (RLIMIT_NPROC: exact per trial under a
// per-attempt user, per worker under --run-as). --trial-max-pids that
// nothing enforces is listed unenforced as "pids". FAILED_PRECONDITION,
// naming the flags, when --trial-max-pids was given explicitly, nothing
// can enforce it, and allow_unenforced is false; INVALID_ARGUMENT for
// --run-as with --run-as-range, or --run-as-range without root.
absl::StatusOr<v1::WorkerIsolation> DescribeIsolation(
    const IsolationInputs& in);

}  // namespace dial::worker
