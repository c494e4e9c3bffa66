// TrialUsers: a Unix user per trial attempt, drawn from a range of uids the
// operator sets aside (--run-as-range, as systemd's DynamicUser does; the
// uids need no passwd entry), so that no trial can reach another's files
// or processes whoever owns them (docs/security.md, "What a trial can
// reach"). A uid is handed out only when no attempt holds it and no
// process runs as it; when its attempt ends, every process still running
// as it is killed and the directories it was given go back to root before
// the uid can be drawn again. Also the directory hand-over itself, which
// never follows a symbolic link. Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/process.h"

namespace dial::worker {

// An inclusive range of uids, e.g. 61000-61999.
struct UidRange {
  uid_t first = 0;
  uid_t last = 0;
};

// Parses "FIRST-LAST". INVALID_ARGUMENT naming --run-as-range: not two
// numbers, FIRST > LAST, or a range that includes uid 0 or 65534
// (nobody), or is above 2^31 - 1.
absl::StatusOr<UidRange> ParseUidRange(const std::string& text);

// The uids that some process runs as (real, effective, saved or file
// system uid), from /proc; zombies, which can do nothing, are left out.
std::set<uid_t> UidsWithProcesses();

// SIGKILLs every process that runs as `uid` (from a child that becomes
// `uid` and calls kill(-1), so no pid can be reused under it), until none
// is left or `rounds` kill(-1) calls were made. The caller must be root.
// Returns whether no live process of `uid` is left.
bool KillUserProcesses(uid_t uid, int rounds = 200);

// Makes `dir` (creating it 0700 where missing) and everything below it
// belong to uid:gid, without following a symbolic link anywhere: the walk
// opens each directory with O_NOFOLLOW relative to its parent's
// descriptor, changes owners with AT_SYMLINK_NOFOLLOW, and stays on the
// file system of `dir`. `dir` itself ends mode 0700. A regular file with
// more than one link is left alone (it may be another file's inode).
// FAILED_PRECONDITION when `dir` is a symbolic link or not a directory;
// UNAVAILABLE on I/O errors.
absl::Status HandOverTree(const std::string& dir, uid_t uid, gid_t gid);

// HandOverTree for the entry `name` of the directory `parent_fd` (opened
// without following a link; `path` names it in messages). With
// `only_from`, a directory that `*only_from` no longer owns is left as it
// is (a newer attempt has it): OK.
absl::Status HandOverTreeAt(int parent_fd, const std::string& name,
                            const std::string& path, uid_t uid, gid_t gid,
                            std::optional<uid_t> only_from = std::nullopt);

// Removes the entry `name` of the directory `parent_fd` and, for a
// directory, everything below it, never through a link: each directory is
// made root's (0700) first, then opened with O_NOFOLLOW relative to its
// parent and emptied with unlinkat. A mount point below is not crossed
// (removing it fails). OK when it is missing; UNAVAILABLE naming `path`
// when something could not be removed (what is left is root's, 0700, at
// the top).
absl::Status RemoveTreeAt(int parent_fd, const std::string& name,
                          const std::string& path);

// Opens `base` (no link as its last component) and then each of `names`
// below it with openat(O_NOFOLLOW | O_DIRECTORY), creating those missing
// (root's, mode 0711). Each of `names` must be a plain name (no '/', not
// "." or ".."): INVALID_ARGUMENT otherwise. FAILED_PRECONDITION when one
// is a symbolic link or not a directory; UNAVAILABLE on I/O errors.
absl::StatusOr<ScopedFd> OpenDirBeneath(const std::string& base,
                                        const std::vector<std::string>& names);

// Makes `dir` (created where missing) a directory that other users may
// pass through but not list: mode 0711. With `own`, also owned by root
// (the worker's own directories); otherwise its owner is left as it is
// and its mode only changed when root owns it. FAILED_PRECONDITION when it
// is a symbolic link or not a directory, or when it is sticky or
// writable by others (a shared directory such as /tmp, which is never
// changed).
absl::Status MakeTraverseOnly(const std::string& dir, bool own);

class TrialUsers;

// One attempt's hold on a uid. Release (or destruction) kills what still
// runs as the uid, hands the given directories back to root and returns
// the uid. Not thread-safe.
class UserLease {
 public:
  ~UserLease() { Release(); }
  UserLease(const UserLease&) = delete;
  UserLease& operator=(const UserLease&) = delete;

  uid_t uid() const { return uid_; }
  // The user to spawn as: uid = gid = the drawn uid, no other groups.
  RunAs run_as() const;
  // HandOverTree(dir) to this uid; Release hands it back to root.
  absl::Status Give(const std::string& dir);
  // HandOverTreeAt(<base>/<names...>) to this uid, reached from `base`
  // through OpenDirBeneath (the directories between are root's, 0711), so
  // no link on the way is followed; Release hands it back to root. For
  // the trial's checkpoint directory, which its next attempt is handed.
  absl::Status GiveBeneath(const std::string& base,
                           const std::vector<std::string>& names);
  // A fresh, empty <base>/<name> of this uid (0700): whatever was there
  // (an earlier attempt's or study's) is removed first, or, where it
  // cannot be, made root's and renamed aside. Release removes it.
  absl::Status GiveScratch(const std::string& base, const std::string& name);
  // Idempotent. Call once the attempt's main process has been reaped.
  // Kills what still runs as the uid, hands back to root what this uid
  // still owns of what it was given (not what a newer attempt has been
  // handed since), removes its scratch directories.
  void Release();

 private:
  friend class TrialUsers;
  UserLease(TrialUsers* users, uid_t uid) : users_(users), uid_(uid) {}

  struct Given {
    std::string base;
    std::vector<std::string> names;  // the last is the directory given
    bool scratch = false;
  };
  TrialUsers* users_;
  const uid_t uid_;
  std::vector<Given> given_;
  bool released_ = false;
};

class TrialUsers {
 public:
  // `private_mounts`: attempts get SpawnOptions::private_proc (a private
  // /proc, /tmp, /var/tmp, /dev/shm and IPC namespace); false where the
  // start-up probe found the host cannot give them (worker/startup_checks.h).
  explicit TrialUsers(UidRange range, bool private_mounts = true)
      : range_(range), private_mounts_(private_mounts), next_(range.first) {}

  const UidRange& range() const { return range_; }
  bool private_mounts() const { return private_mounts_; }

  // A uid of the range that no lease holds and no process runs as, the
  // least recently drawn first. RESOURCE_EXHAUSTED naming --run-as-range
  // when every uid is busy.
  absl::StatusOr<std::unique_ptr<UserLease>> Acquire();

 private:
  friend class UserLease;
  void Return(uid_t uid);

  const UidRange range_;
  const bool private_mounts_;
  // Serialises hand-overs of directories, so that an old attempt's
  // hand-back and a newer attempt's hand-over of the same directory do not
  // interleave.
  absl::Mutex dirs_mu_;
  absl::Mutex mu_;
  uid_t next_ ABSL_GUARDED_BY(mu_);
  std::set<uid_t> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::worker
