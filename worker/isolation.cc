#include "worker/isolation.h"

#include "absl/strings/str_cat.h"

namespace dial::worker {

absl::StatusOr<v1::WorkerIsolation> DescribeIsolation(
    const IsolationInputs& in) {
  if (in.uid_range && !in.run_as.empty()) {
    return absl::InvalidArgumentError(
        "--run-as and --run-as-range: give one (--run-as-range runs each "
        "attempt as a user of its own)");
  }
  if (in.uid_range && !in.root) {
    return absl::InvalidArgumentError(
        "--run-as-range: the worker must run as root to switch users");
  }
  v1::WorkerIsolation out;
  const bool users = in.uid_range && in.root;
  out.set_isolated(users && in.degraded.empty());
  out.set_method(users ? "per-attempt-user" : "none");
  if (!out.isolated()) {
    if (users) {
      out.set_reason(absl::StrCat(
          "per-attempt users, but not fully isolated on this host: ",
          in.degraded));
    } else if (!in.run_as.empty()) {
      out.set_reason(absl::StrCat(
          "every trial runs as the one user ", in.run_as,
          " (--run-as): trials can reach each other's files and processes; "
          "run the worker as root with --run-as-range=FIRST-LAST"));
    } else if (!in.root) {
      out.set_reason(
          "the worker does not run as root, so every trial runs as its "
          "user: trials can reach each other's files and processes (and "
          "the worker's)");
    } else {
      out.set_reason(
          "no --run-as-range: every trial runs as root, the worker's user; "
          "give --run-as-range=FIRST-LAST");
    }
  }
  if (in.cgroups && in.memory_controller) {
    out.add_enforced_limits("memory");
  } else {
    out.add_unenforced_limits("memory");
  }
  if (in.max_pids > 0) {
    const bool pids = in.cgroups && in.pids_controller;
    const bool nproc = users || !in.run_as.empty();
    if (pids) out.add_enforced_limits("pids");
    if (nproc) out.add_enforced_limits("nproc");
    if (!pids && !nproc) {
      if (in.max_pids_explicit && !in.allow_unenforced) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--trial-max-pids=", in.max_pids,
            " cannot be enforced here: no cgroup pids controller for trial "
            "scopes, and no user of the trials' own for RLIMIT_NPROC; run "
            "as root with --run-as-range (or --run-as), give a delegated "
            "cgroup with the pids controller (--cgroup), or start with "
            "--allow-unenforced-limits"));
      }
      out.add_unenforced_limits("pids");
    }
  }
  return out;
}

}  // namespace dial::worker
