#include "worker/trial_users.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
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

// `fd`, just opened on the directory `dir`, or the error its open left in
// errno.
absl::StatusOr<ScopedFd> DirOrError(ScopedFd fd, const std::string& dir) {
  if (fd.valid()) return fd;
  if (errno == ELOOP || errno == ENOTDIR) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is a symbolic link or not a directory; refusing to use it"));
  }
  return Errno("cannot open", dir);
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
  return DirOrError(std::move(fd), dir);
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

bool PlainEntry(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Opens the entry `name` of `parent_fd` as a directory without following
// a link; creates it (mode `mode`) first when missing.
absl::StatusOr<ScopedFd> OpenDirAt(int parent_fd, const std::string& name,
                                   const std::string& path, mode_t mode) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  ScopedFd fd(openat(parent_fd, name.c_str(), kFlags));
  if (!fd.valid() && errno == ENOENT) {
    if (mkdirat(parent_fd, name.c_str(), mode) != 0 && errno != EEXIST) {
      return Errno("cannot create", path);
    }
    fd.reset(openat(parent_fd, name.c_str(), kFlags));
  }
  if (!fd.valid()) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is a symbolic link or not a directory; refusing to use it"));
    }
    return Errno("cannot open", path);
  }
  return fd;
}

// The names in the directory `dir_fd`, but "." and "..".
absl::StatusOr<std::vector<std::string>> ListDir(int dir_fd,
                                                 const std::string& path) {
  const int copy = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return Errno("cannot read", path);
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    close(copy);
    return Errno("cannot read", path);
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

// Empties the directory `dir_fd` (of device `dev`), depth first, never
// through a link.
absl::Status RemoveBelow(int dir_fd, dev_t dev, const std::string& path,
                         int depth) {
  if (depth > kMaxDepth) {
    return absl::UnavailableError(
        absl::StrCat(path, ": nested deeper than ", kMaxDepth, " directories"));
  }
  auto names = ListDir(dir_fd, path);
  if (!names.ok()) return names.status();
  absl::Status status;
  for (const std::string& name : *names) {
    const std::string sub_path = path + "/" + name;
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      status = Errno("cannot stat", sub_path);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev) {
        status = absl::UnavailableError(
            absl::StrCat(sub_path, " is a mount point; not removed"));
        continue;
      }
      ScopedFd sub(openat(dir_fd, name.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.valid()) {
        absl::Status below = RemoveBelow(sub.get(), dev, sub_path, depth + 1);
        if (!below.ok()) status = below;
      }
      if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 &&
          errno != ENOENT) {
        if (errno == ENOTDIR) {
          (void)unlinkat(dir_fd, name.c_str(), 0);  // swapped for a link
        } else if (status.ok()) {
          status = Errno("cannot remove", sub_path);
        }
      }
    } else if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      status = Errno("cannot remove", sub_path);
    }
  }
  return status;
}

// The directory at `base` then `names` (all but the last) and the last.
absl::StatusOr<ScopedFd> OpenParentOf(const std::string& base,
                                      const std::vector<std::string>& names) {
  return OpenDirBeneath(
      base, std::vector<std::string>(names.begin(), names.end() - 1));
}

std::string JoinPath(const std::string& base,
                     const std::vector<std::string>& names) {
  std::string out = base;
  for (const auto& n : names) absl::StrAppend(&out, "/", n);
  return out;
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

namespace {

// HandOverTree's walk of the open directory `fd`.
absl::Status HandOverFd(const ScopedFd* fd, const std::string& dir, uid_t uid,
                        gid_t gid, std::optional<uid_t> only_from) {
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return Errno("cannot stat", dir);
  if (only_from && st.st_uid != *only_from) return absl::OkStatus();
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

}  // namespace

absl::Status HandOverTree(const std::string& dir, uid_t uid, gid_t gid) {
  auto fd = OpenDirNoFollow(dir, 0700);
  if (!fd.ok()) return fd.status();
  return HandOverFd(&*fd, dir, uid, gid, std::nullopt);
}

absl::Status HandOverTreeAt(int parent_fd, const std::string& name,
                            const std::string& path, uid_t uid, gid_t gid,
                            std::optional<uid_t> only_from) {
  if (!PlainEntry(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", name, "' is not a plain name"));
  }
  auto fd = OpenDirAt(parent_fd, name, path, 0700);
  if (!fd.ok()) return fd.status();
  return HandOverFd(&*fd, path, uid, gid, only_from);
}

absl::Status RemoveTreeAt(int parent_fd, const std::string& name,
                          const std::string& path) {
  if (!PlainEntry(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", name, "' is not a plain name"));
  }
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("cannot stat", path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(parent_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return Errno("cannot remove", path);
    }
    return absl::OkStatus();
  }
  ScopedFd fd(openat(parent_fd, name.c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Errno("cannot open", path);
  // Root's alone first: whatever is left if removing fails reaches no one.
  if (fchown(fd.get(), 0, 0) != 0 || fchmod(fd.get(), 0700) != 0) {
    return Errno("cannot change the owner of", path);
  }
  absl::Status below = RemoveBelow(fd.get(), st.st_dev, path, 0);
  if (!below.ok()) return below;
  if (unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return Errno("cannot remove", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedFd> OpenDirBeneath(const std::string& base,
                                        const std::vector<std::string>& names) {
  auto opened =
      DirOrError(ScopedFd(open(base.c_str(), O_RDONLY | O_DIRECTORY |
                                                 O_NOFOLLOW | O_CLOEXEC)),
                 base);
  if (!opened.ok()) return opened.status();
  ScopedFd fd = std::move(*opened);
  std::string path = base;
  for (const std::string& name : names) {
    path += "/" + name;
    if (!PlainEntry(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": '", name, "' is not a plain name"));
    }
    auto next = OpenDirAt(fd.get(), name, path, 0711);
    if (!next.ok()) return next.status();
    struct stat st;
    if (fstat(next->get(), &st) != 0) return Errno("cannot stat", path);
    if ((st.st_uid != 0 && fchown(next->get(), 0, 0) != 0) ||
        ((st.st_mode & 07777) != 0711 && fchmod(next->get(), 0711) != 0)) {
      return Errno("cannot make root's", path);
    }
    fd = std::move(*next);
  }
  return fd;
}

absl::Status MakeTraverseOnly(const std::string& dir, bool own) {
  auto fd = OpenDirNoFollow(dir, 0711);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return Errno("cannot stat", dir);
  if ((st.st_mode & (S_ISVTX | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir,
        " is sticky or writable by others (a shared directory such as "
        "/tmp); give the worker a directory of its own, e.g. ",
        dir == "/" ? "" : dir, "/dial"));
  }
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
  const std::filesystem::path path(dir);
  return GiveBeneath(path.parent_path().string(), {path.filename().string()});
}

absl::Status UserLease::GiveBeneath(const std::string& base,
                                    const std::vector<std::string>& names) {
  if (names.empty()) {
    return absl::InvalidArgumentError("nothing to give below " + base);
  }
  given_.push_back({base, names, false});
  absl::MutexLock lock(&users_->dirs_mu_);
  auto parent = OpenParentOf(base, names);
  if (!parent.ok()) return parent.status();
  return HandOverTreeAt(parent->get(), names.back(), JoinPath(base, names),
                        uid_, uid_);
}

absl::Status UserLease::GiveScratch(const std::string& base,
                                    const std::string& name) {
  given_.push_back({base, {name}, true});
  absl::MutexLock lock(&users_->dirs_mu_);
  auto parent = OpenDirBeneath(base, {});
  if (!parent.ok()) return parent.status();
  const std::string path = base + "/" + name;
  absl::Status removed = RemoveTreeAt(parent->get(), name, path);
  if (!removed.ok()) {
    // Root's and 0700 by now: out of everyone's reach. Set aside.
    spdlog::warn("{}; renaming it aside", removed.ToString());
    static std::atomic<uint64_t> aside{0};
    const std::string stale =
        absl::StrCat(name, ".stale-", getpid(), "-", aside.fetch_add(1));
    if (renameat(parent->get(), name.c_str(), parent->get(), stale.c_str()) !=
        0) {
      return Errno("cannot remove or rename", path);
    }
  }
  return HandOverTreeAt(parent->get(), name, path, uid_, uid_);
}

void UserLease::Release() {
  if (released_) return;
  released_ = true;
  if (!KillUserProcesses(uid_)) {
    // Not drawn again while any process runs as it (Acquire looks).
    spdlog::warn("uid {}: processes still run as it after SIGKILL", uid_);
  }
  {
    absl::MutexLock lock(&users_->dirs_mu_);
    for (const Given& given : given_) {
      const std::string path = JoinPath(given.base, given.names);
      auto parent = OpenParentOf(given.base, given.names);
      absl::Status back = parent.status();
      if (parent.ok()) {
        back = given.scratch
                   ? RemoveTreeAt(parent->get(), given.names.back(), path)
                   : HandOverTreeAt(parent->get(), given.names.back(), path, 0,
                                    0, uid_);
      }
      if (!back.ok()) spdlog::warn("uid {}: {}", uid_, back.ToString());
    }
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
