#include "common/beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dial {
namespace {

absl::Status Error(int error, const std::string& root, const std::string& rel) {
  const std::string where = absl::StrCat(root, "/", rel);
  if (error == ELOOP || error == EXDEV || error == ENOTDIR) {
    return absl::PermissionDeniedError(absl::StrCat(
        where,
        ": refused: a symbolic link (or a non-directory) on the way; "
        "checkpoint trees may not hold links"));
  }
  if (error == ENOENT) {
    return absl::NotFoundError(absl::StrCat(where, " not found"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot open ", where, ": ", std::strerror(error)));
}

// openat(O_NOFOLLOW) component by component, for kernels before 5.6.
int WalkNoFollow(int dir, const std::string& rel, int flags, mode_t mode) {
  std::vector<std::string> parts = absl::StrSplit(rel, '/', absl::SkipEmpty());
  int current = dup(dir);
  for (size_t i = 0; current >= 0 && i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const int next =
        last ? openat(current, parts[i].c_str(), flags, mode)
             : openat(current, parts[i].c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int saved = errno;
    close(current);
    errno = saved;
    current = next;
  }
  return current;
}

int OpenAtBeneath(int dir, const std::string& rel, int flags, mode_t mode) {
  flags |= O_CLOEXEC | O_NOFOLLOW;
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const long fd = syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof(how));
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  return WalkNoFollow(dir, rel, flags, mode);
}

}  // namespace

absl::StatusOr<std::string> RelativeBeneath(const std::string& root,
                                            const std::string& path) {
  std::string rel = path;
  if (absl::StartsWith(path, "/")) {
    std::string prefix = root;
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    if (path == prefix) return std::string(".");
    if (!absl::StartsWith(path, prefix + "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is not inside ", root));
    }
    rel = path.substr(prefix.size() + 1);
  }
  if (rel.empty() || rel.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a path inside ", root));
  }
  for (absl::string_view part : absl::StrSplit(rel, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' has a '.' or '..' component"));
    }
  }
  return rel;
}

absl::StatusOr<ScopedFd> OpenBeneath(const std::string& root,
                                     const std::string& path, int flags,
                                     mode_t mode) {
  auto rel = RelativeBeneath(root, path);
  if (!rel.ok()) return rel.status();
  ScopedFd dir(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", root, ": ", std::strerror(errno)));
  }
  if (*rel == ".") return dir;
  ScopedFd fd(OpenAtBeneath(dir.get(), *rel, flags, mode));
  if (!fd.valid()) return Error(errno, root, *rel);
  return fd;
}

absl::Status MakeDirsBeneath(const std::string& root, const std::string& path) {
  auto rel = RelativeBeneath(root, path);
  if (!rel.ok()) return rel.status();
  if (*rel == ".") return absl::OkStatus();
  std::string sofar;
  for (absl::string_view part : absl::StrSplit(*rel, '/', absl::SkipEmpty())) {
    const std::string parent = sofar.empty() ? "." : sofar;
    sofar = sofar.empty() ? std::string(part) : absl::StrCat(sofar, "/", part);
    auto dir = OpenBeneath(root, parent == "." ? root : parent,
                           O_RDONLY | O_DIRECTORY);
    if (!dir.ok()) return dir.status();
    if (mkdirat(dir->get(), std::string(part).c_str(), 0755) != 0 &&
        errno != EEXIST) {
      return Error(errno, root, sofar);
    }
  }
  // Whatever existed must be a directory reached without links.
  auto last = OpenBeneath(root, sofar, O_RDONLY | O_DIRECTORY);
  return last.ok() ? absl::OkStatus() : last.status();
}

absl::Status CheckNoLinksBeneath(const std::string& root,
                                 const std::string& path) {
  auto fd = OpenBeneath(root, path, O_PATH);
  if (!fd.ok()) return fd.status();
  // O_PATH | O_NOFOLLOW opens a link in the last place instead of failing.
  struct stat st {};
  if (fstat(fd->get(), &st) != 0 || S_ISLNK(st.st_mode)) {
    return Error(ELOOP, root, *RelativeBeneath(root, path));
  }
  return absl::OkStatus();
}

}  // namespace dial
