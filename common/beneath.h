// Opening files inside a directory tree that others can write to (a
// checkpoint root that trials write), without following symbolic links:
// a trial that plants `ln -s / <its dir>/r` must not make a daemon read,
// write, rename or delete anything outside the tree. Every component
// below `root` is resolved with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), or, on kernels without openat2, by a walk of
// openat(O_NOFOLLOW) calls; `root` itself is the operator's and may be
// reached through links. Thread-safe: plain functions.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/process.h"

namespace dial {

// `path` relative to `root`: `path` is either relative (taken as is) or
// absolute and lexically inside `root`. INVALID_ARGUMENT when it is
// outside, empty, or has a "." or ".." component.
absl::StatusOr<std::string> RelativeBeneath(const std::string& root,
                                            const std::string& path);

// Opens `path` (see RelativeBeneath) below `root` with `flags` (O_CLOEXEC
// and O_NOFOLLOW are added) and `mode` for O_CREAT. Errors name the path:
// PERMISSION_DENIED when a component is a symbolic link or leaves the
// tree; NOT_FOUND when something is missing; UNAVAILABLE for other I/O
// errors.
absl::StatusOr<ScopedFd> OpenBeneath(const std::string& root,
                                     const std::string& path, int flags,
                                     mode_t mode = 0);

// Creates the directories of `path` below `root` that are missing (mode
// 0755), refusing to pass through a symbolic link, as OpenBeneath.
absl::Status MakeDirsBeneath(const std::string& root, const std::string& path);

// OK when `path` and every directory between it and `root` exist and none
// is a symbolic link (the last component may be a file or a directory).
// The codes of OpenBeneath.
absl::Status CheckNoLinksBeneath(const std::string& root,
                                 const std::string& path);

}  // namespace dial
