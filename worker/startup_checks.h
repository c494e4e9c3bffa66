// What a worker checks and repairs once at start-up before it serves:
// its --host, and, with per-attempt users (--run-as-range), that the range
// is its own (no account, group or foreign process in it, enough uids for
// its slots), that its checkpoint root and work directory are root's and
// not shared like /tmp, what an earlier run of it left behind (processes
// and directories of range uids), and whether this host can give a child
// the whole per-attempt setup (docs/security.md, "What a trial can
// reach"). Thread-safe: plain functions, meant for main.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/trial_users.h"

namespace dial::worker {

// The most uids a --run-as-range may hold (each is looked up at start-up).
inline constexpr uint64_t kMaxRangeUids = 65536;

// --host: 1-255 printable ASCII characters without spaces (what the
// scheduler accepts). INVALID_ARGUMENT naming --host otherwise.
absl::Status CheckHostFlag(const std::string& host);

// INVALID_ARGUMENT naming --run-as-range when the range holds fewer uids
// than `slots` (an attempt would fail for want of one) or more than
// kMaxRangeUids, or when a uid of it has a passwd entry or a gid of it a
// group entry (a real account's files would be handed to trials).
absl::Status CheckUidRange(const UidRange& range, int slots);

// SIGKILLs every process that runs as a uid of the range (left by an
// earlier run of this worker: the range is its alone).
// FAILED_PRECONDITION naming the uids when some survive.
absl::Status KillRangeProcesses(const UidRange& range);

// Hands back to root (HandOverTree to uid 0, never through a link) every
// directory that a uid of the range owns among <root>/<study>,
// <root>/<study>/<trial> and the entries of `work_dir`: what attempts of
// an earlier run of this worker held when it died. Returns how many;
// UNAVAILABLE when a root or work directory cannot be read.
absl::StatusOr<int> ReclaimRangeDirectories(const UidRange& range,
                                            const std::string& root,
                                            const std::string& work_dir);

// FAILED_PRECONDITION naming `flag` when `dir` is a symbolic link, not a
// directory, not owned by root, or sticky or writable by others (anyone
// could swap what is below it for a link before the worker hands it over).
absl::Status CheckRootDirectory(const std::string& flag,
                                const std::string& dir);

// Spawns /bin/true as `uid` (with private_mounts, also in the private
// mount and IPC namespaces with the private /proc and tmpfs mounts, and
// `keep` bound back) and checks that it exits 0. The error says which
// step failed (e.g. no CAP_SYS_ADMIN in a container).
absl::Status ProbeChildSetup(uid_t uid, bool private_mounts,
                             const std::vector<std::string>& keep);

// Why the kernel's hard-link protection does not hold, or nullopt when
// `path` (/proc/sys/fs/protected_hardlinks) reads 1. Without it a trial
// can hard-link a file it cannot read (/etc/shadow) into its directory,
// and the worker, as root, reads and copies what trials leave there.
std::optional<std::string> HardlinkProtectionProblem(
    const std::string& path = "/proc/sys/fs/protected_hardlinks");

}  // namespace dial::worker
