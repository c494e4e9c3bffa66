#include "worker/startup_checks.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/process.h"
#include "spdlog/spdlog.h"

namespace dial::worker {
namespace {

bool InRange(const UidRange& range, uid_t uid) {
  return uid >= range.first && uid <= range.last;
}

// The entries of the directory `dir_fd` that are directories (not links).
std::vector<std::string> SubDirs(int dir_fd) {
  std::vector<std::string> out;
  const int copy = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return out;
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    close(copy);
    return out;
  }
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode)) {
      out.push_back(name);
    }
  }
  closedir(d);
  return out;
}

uid_t OwnerAt(int dir_fd, const std::string& name) {
  struct stat st;
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
  return st.st_uid;
}

}  // namespace

absl::Status CheckHostFlag(const std::string& host) {
  if (host.empty() || host.size() > 255) {
    return absl::InvalidArgumentError("--host: must be 1-255 characters");
  }
  for (char c : host) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "--host: only printable ASCII characters without spaces (the "
          "scheduler refuses others)");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckUidRange(const UidRange& range, int slots) {
  const std::string flag =
      absl::StrCat("--run-as-range=", range.first, "-", range.last);
  const uint64_t size = uint64_t{range.last} - range.first + 1;
  if (size < static_cast<uint64_t>(std::max(slots, 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", size, " uid(s) for --slots=", slots,
                     "; each running attempt needs a uid of its own"));
  }
  if (size > kMaxRangeUids) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": at most ", kMaxRangeUids, " uids"));
  }
  std::vector<char> buffer(1 << 16);
  for (uint64_t id = range.first; id <= range.last; ++id) {
    passwd pw{};
    passwd* found_pw = nullptr;
    if (getpwuid_r(static_cast<uid_t>(id), &pw, buffer.data(), buffer.size(),
                   &found_pw) == 0 &&
        found_pw != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": uid ", id, " is the account '", found_pw->pw_name,
          "' (a passwd entry); the range must hold no account"));
    }
    group gr{};
    group* found_gr = nullptr;
    if (getgrgid_r(static_cast<gid_t>(id), &gr, buffer.data(), buffer.size(),
                   &found_gr) == 0 &&
        found_gr != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": gid ", id, " is the group '", found_gr->gr_name,
                       "' (a group entry); the range must hold no group"));
    }
  }
  return absl::OkStatus();
}

absl::Status KillRangeProcesses(const UidRange& range) {
  std::vector<uid_t> left;
  for (uid_t uid : UidsWithProcesses()) {
    if (!InRange(range, uid)) continue;
    spdlog::warn(
        "--run-as-range: processes of uid {} run (left by an earlier run of "
        "this worker?); killing them",
        uid);
    if (!KillUserProcesses(uid)) left.push_back(uid);
  }
  if (!left.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--run-as-range=", range.first, "-", range.last,
        ": processes of uid(s) ", absl::StrJoin(left, ", "),
        " survive SIGKILL; the range must be this worker's alone"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReclaimRangeDirectories(const UidRange& range,
                                            const std::string& root,
                                            const std::string& work_dir) {
  int reclaimed = 0;
  absl::Status first_error;
  auto reclaim = [&](int parent_fd, const std::string& name,
                     const std::string& path) {
    if (!InRange(range, OwnerAt(parent_fd, name))) return;
    absl::Status back = HandOverTreeAt(parent_fd, name, path, 0, 0);
    if (back.ok()) {
      ++reclaimed;
    } else if (first_error.ok()) {
      first_error = back;
    }
  };
  for (const std::string& base : {root, work_dir}) {
    auto fd = OpenDirBeneath(base, {});
    if (!fd.ok()) return fd.status();
    for (const std::string& name : SubDirs(fd->get())) {
      reclaim(fd->get(), name, base + "/" + name);
      if (base != root) continue;
      // <root>/<study>/<trial>: the study directory is root's by now.
      ScopedFd study(openat(fd->get(), name.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!study.valid()) continue;
      for (const std::string& trial : SubDirs(study.get())) {
        reclaim(study.get(), trial, base + "/" + name + "/" + trial);
      }
    }
  }
  if (!first_error.ok()) return first_error;
  return reclaimed;
}

absl::Status CheckRootDirectory(const std::string& flag,
                                const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, "=", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, "=", dir, ": a symbolic link or not a directory"));
  }
  if (st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, "=", dir, ": owned by uid ", st.st_uid,
        ", not root; with --run-as-range it must be root's (its owner could "
        "swap a study's directory for a link before the worker hands it "
        "over): chown root ",
        dir));
  }
  if ((st.st_mode & (S_ISVTX | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, "=", dir,
        ": sticky or writable by others (a shared directory such as /tmp); "
        "give the worker a directory of its own"));
  }
  return absl::OkStatus();
}

absl::Status ProbeChildSetup(uid_t uid, bool private_mounts,
                             const std::vector<std::string>& keep) {
  SpawnOptions probe;
  probe.argv = {"/bin/true"};
  probe.search_path = false;
  probe.env = std::map<std::string, std::string>{};
  probe.stdin_fd = ChildFd::Null();
  probe.stdout_fd = ChildFd::Null();
  probe.stderr_fd = ChildFd::Null();
  probe.run_as = RunAs{uid, uid, {}, std::to_string(uid), "/"};
  probe.private_proc = private_mounts;
  probe.private_tmp_bytes = 1 << 20;
  probe.private_tmp_keep = keep;
  probe.cwd = "/";
  auto pid = Spawn(probe);
  if (!pid.ok()) return pid.status();
  auto status = WaitForExit(*pid);
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::UnavailableError(
        absl::StrCat("the probe /bin/true ended with status ", *status));
  }
  return absl::OkStatus();
}

std::optional<std::string> HardlinkProtectionProblem(const std::string& path) {
  std::ifstream in(path);
  std::string value;
  if (!(in >> value)) {
    return absl::StrCat(
        "cannot read ", path,
        ": the kernel's hard-link protection is unknown, so a trial might "
        "hard-link a file it cannot read (e.g. /etc/shadow) where the worker "
        "reads or copies it as root");
  }
  if (value != "1") {
    return absl::StrCat(
        path, " is ", value,
        ", not 1: a trial can hard-link a file it cannot read (e.g. "
        "/etc/shadow) where the worker reads or copies it as root; set "
        "fs.protected_hardlinks=1");
  }
  return std::nullopt;
}

}  // namespace dial::worker
