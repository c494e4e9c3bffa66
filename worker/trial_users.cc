#include "worker/trial_users.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace dial::worker {
namespace {

constexpr int kMaxDepth = 128;

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Opens `dir` as a directory without following a link; creates it (mode
// `mode`) first when missing.
absl::StatusOr<ScopedFd> OpenDirNoFollow(const std::string& dir, mode_t mode) {
  ScopedFd fd(
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid() && errno == ENOENT) {
    if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
      return Errno("cannot create", dir);
    }
    fd.reset(
        open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  if (!fd.valid()) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " is a symbolic link or not a directory; refusing to use it"));
    }
    return Errno("cannot open", dir);
  }
  return fd;
}

// Changes the owner of everything below the directory `dir_fd` (of
// device `dev`), depth first, never through a link.
absl::Status ChownBelow(int dir_fd, dev_t dev, uid_t uid, gid_t gid,
                        const std::string& path, int depth) {
  if (depth > kMaxDepth) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": nested deeper than ", kMaxDepth, " directories"));
  }
  const int copy = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return Errno("cannot read", path);
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    close(copy);
    return Errno("cannot read", path);
  }
  absl::Status status;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_dev != dev) continue;  // another file system mounted here
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) continue;
    if (fchownat(dir_fd, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      status = Errno("cannot change the owner of", path + "/" + name);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      ScopedFd sub(openat(dir_fd, name.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) continue;  // replaced meanwhile: not followed
      status =
          ChownBelow(sub.get(), dev, uid, gid, path + "/" + name, depth + 1);
      if (!status.ok()) break;
    }
  }
  closedir(d);
  return status;
}

bool IsZombie(const std::string& status_text) {
  const size_t at = status_text.find("\nState:");
  if (at == std::string::npos) return false;
  const size_t letter = status_text.find_first_not_of(" \t", at + 7);
  return letter != std::string::npos &&
         (status_text[letter] == 'Z' || status_text[letter] == 'X');
}

}  // namespace

absl::StatusOr<UidRange> ParseUidRange(const std::string& text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run-as-range='", text, "': ", why));
  };
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  uint32_t first = 0;
  uint32_t last = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
      !absl::SimpleAtoi(parts[1], &last)) {
    return bad("not FIRST-LAST (uids, e.g. 61000-61999)");
  }
  if (first > last) return bad("FIRST is above LAST");
  if (first == 0) return bad("the range includes root (uid 0)");
  if (first <= 65534 && last >= 65534) {
    return bad("the range includes nobody (uid 65534)");
  }
  if (last > 0x7fffffffu) return bad("uids above 2147483647 are not usable");
  return UidRange{first, last};
}

std::set<uid_t> UidsWithProcesses() {
  std::set<uid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    if (text.empty() || IsZombie(text)) continue;
    const size_t at = text.find("\nUid:");
    if (at == std::string::npos) continue;
    const size_t end = text.find('\n', at + 1);
    for (absl::string_view field :
         absl::StrSplit(text.substr(at + 5, end - at - 5),
                        absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t uid = 0;
      if (absl::SimpleAtoi(field, &uid)) out.insert(uid);
    }
  }
  closedir(proc);
  return out;
}

bool KillUserProcesses(uid_t uid, int rounds) {
  const pid_t child = fork();
  if (child == 0) {
    // Only async-signal-safe calls: a fork of a multi-threaded process.
    // The raw system call changes this thread alone, which is all there is.
    if (syscall(SYS_setresgid, uid, uid, uid) != 0 ||
        syscall(SYS_setresuid, uid, uid, uid) != 0) {
      _exit(2);
    }
    for (int i = 0; i < rounds; ++i) {
      // Every process this uid may signal but the caller; ESRCH: none.
      if (kill(-1, SIGKILL) != 0 && errno == ESRCH) _exit(0);
      sched_yield();
    }
    _exit(1);
  }
  if (child < 0) {
    spdlog::warn("cannot fork to kill the processes of uid {}: {}", uid,
                 std::strerror(errno));
  } else {
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  return UidsWithProcesses().count(uid) == 0;
}

absl::Status HandOverTree(const std::string& dir, uid_t uid, gid_t gid) {
  auto fd = OpenDirNoFollow(dir, 0700);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return Errno("cannot stat", dir);
  // Root's alone while the walk runs: no one else can change what is
  // below (the previous owner's processes are dead).
  if (fchown(fd->get(), 0, 0) != 0 || fchmod(fd->get(), 0700) != 0) {
    return Errno("cannot change the owner of", dir);
  }
  absl::Status below = ChownBelow(fd->get(), st.st_dev, uid, gid, dir, 0);
  if (!below.ok()) return below;
  if (fchown(fd->get(), uid, gid) != 0) {
    return Errno("cannot change the owner of", dir);
  }
  return absl::OkStatus();
}

absl::Status MakeTraverseOnly(const std::string& dir, bool own) {
  auto fd = OpenDirNoFollow(dir, 0711);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return Errno("cannot stat", dir);
  if (own && st.st_uid != 0 && fchown(fd->get(), 0, 0) != 0) {
    return Errno("cannot change the owner of", dir);
  }
  if ((own || st.st_uid == 0) && (st.st_mode & 07777) != 0711 &&
      fchmod(fd->get(), 0711) != 0) {
    return Errno("cannot change the mode of", dir);
  }
  return absl::OkStatus();
}

RunAs UserLease::run_as() const {
  RunAs user;
  user.uid = uid_;
  user.gid = uid_;
  user.name = std::to_string(uid_);
  return user;
}

absl::Status UserLease::Give(const std::string& dir) {
  given_.push_back(dir);
  return HandOverTree(dir, uid_, uid_);
}

void UserLease::Release() {
  if (released_) return;
  released_ = true;
  if (!KillUserProcesses(uid_)) {
    // Not drawn again while any process runs as it (Acquire looks).
    spdlog::warn("uid {}: processes still run as it after SIGKILL", uid_);
  }
  for (const std::string& dir : given_) {
    absl::Status back = HandOverTree(dir, 0, 0);
    if (!back.ok()) spdlog::warn("uid {}: {}", uid_, back.ToString());
  }
  users_->Return(uid_);
}

absl::StatusOr<std::unique_ptr<UserLease>> TrialUsers::Acquire() {
  const std::set<uid_t> busy = UidsWithProcesses();
  absl::MutexLock lock(&mu_);
  const uint64_t size = uint64_t{range_.last} - range_.first + 1;
  for (uint64_t i = 0; i < size; ++i) {
    const uid_t uid = next_;
    next_ = next_ == range_.last ? range_.first : next_ + 1;
    if (held_.count(uid) > 0 || busy.count(uid) > 0) continue;
    held_.insert(uid);
    return std::unique_ptr<UserLease>(new UserLease(this, uid));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "every uid of --run-as-range=", range_.first, "-", range_.last,
      " is in use (by an attempt or a process still running as it)"));
}

void TrialUsers::Return(uid_t uid) {
  absl::MutexLock lock(&mu_);
  held_.erase(uid);
}

}  // namespace dial::worker
