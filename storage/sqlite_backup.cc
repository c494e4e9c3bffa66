#include "storage/sqlite_backup.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "storage/sqlite_connection.h"

namespace dial::storage {
namespace {

// An errno from a file operation for the backup, with the code a caller acts
// on: fix permissions, fix the path, or retry once the disk has room.
absl::Status BackupErrno(int err, const std::string& what) {
  absl::StatusCode code = absl::StatusCode::kUnavailable;  // ENOSPC, EIO, ...
  if (err == EACCES || err == EPERM || err == EROFS) {
    code = absl::StatusCode::kPermissionDenied;
  } else if (err == ENOENT || err == ENOTDIR) {
    code = absl::StatusCode::kFailedPrecondition;
  }
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status Fsync(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return BackupErrno(errno, "cannot open " + path);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return BackupErrno(err, "cannot fsync " + path);
  return absl::OkStatus();
}

// Copies the committed snapshot of `source` into the empty file `target`
// with SQLite's backup API, through connections of its own.
absl::Status CopyDatabase(const std::string& source, const std::string& target,
                          const std::string& named) {
  sqlite3* src = nullptr;
  sqlite3* dst = nullptr;
  absl::Status status;
  int rc = sqlite3_open_v2(source.c_str(), &src, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    status = SqliteError(src, rc);
  } else {
    sqlite3_busy_timeout(src, 5000);
    rc = sqlite3_open_v2(target.c_str(), &dst, SQLITE_OPEN_READWRITE, nullptr);
    // The copy is a scratch file until the rename: no journal, and one
    // fsync by the caller instead of SQLite's.
    if (rc == SQLITE_OK) {
      rc = sqlite3_exec(dst, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF",
                        nullptr, nullptr, nullptr);
    }
    if (rc != SQLITE_OK) {
      status = SqliteError(dst, rc);
    } else if (sqlite3_backup* backup =
                   sqlite3_backup_init(dst, "main", src, "main")) {
      // One step: the whole copy reads one snapshot, and in WAL mode the
      // scheduler's writes go on meanwhile.
      sqlite3_backup_step(backup, -1);
      rc = sqlite3_backup_finish(backup);
      if (rc != SQLITE_OK) status = SqliteError(dst, rc);
    } else {
      status = SqliteError(dst, sqlite3_errcode(dst));
    }
  }
  sqlite3_close(dst);
  sqlite3_close(src);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("backup to ", named, " failed: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> BackupDatabase(const std::string& live_path,
                                       const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "path: must be absolute (a path on the scheduler's machine), got '",
        path, "'"));
  }
  const fs::path target = fs::path(path).lexically_normal();
  if (!target.has_filename() || target.filename() == "." ||
      target.filename() == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("path: '", path, "' names a directory, not a file"));
  }
  const fs::path dir = target.parent_path();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("path: directory ", dir.string(),
                     " does not exist on the scheduler's machine"));
  }
  // Never the live database, nor the files SQLite keeps next to it, under
  // any name (symbolic or hard links included).
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(target, ec);
  const fs::path live = fs::weakly_canonical(live_path, ec);
  struct stat target_st;
  const bool target_exists = ::stat(target.c_str(), &target_st) == 0;
  for (const char* suffix : {"", "-wal", "-shm", "-lock", "-journal"}) {
    const std::string file = live.string() + suffix;
    struct stat file_st;
    if (resolved == fs::path(file) ||
        (target_exists && ::stat(file.c_str(), &file_st) == 0 &&
         file_st.st_dev == target_st.st_dev &&
         file_st.st_ino == target_st.st_ino)) {
      return absl::InvalidArgumentError(
          absl::StrCat("path: ", path, " is the live database",
                       *suffix ? absl::StrCat("'s ", suffix + 1, " file") : "",
                       file == path ? "" : absl::StrCat(" (", file, ")"),
                       "; back up to another file"));
    }
  }
  if (::lstat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "path: ", path, " is a directory; name the backup file in it"));
    }
    return absl::AlreadyExistsError(absl::StrCat(
        path, " exists; a backup never replaces a file, name a new one"));
  }

  std::string temp =
      (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    return BackupErrno(errno,
                       absl::StrCat("cannot create a file in ", dir.string()));
  }
  ::close(fd);
  absl::Status status = CopyDatabase(live_path, temp, target.string());
  if (status.ok()) status = Fsync(temp, O_RDONLY);
  // RENAME_NOREPLACE: a file that appeared at `target` meanwhile is kept.
  if (status.ok() && ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD,
                                 target.c_str(), RENAME_NOREPLACE) != 0) {
    status = errno == EEXIST
                 ? absl::AlreadyExistsError(absl::StrCat(
                       path, " exists; a backup never replaces a file"))
                 : BackupErrno(errno, absl::StrCat("cannot rename ", temp,
                                                   " to ", target.string()));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  // The rename itself is durable once the directory is.
  DIAL_RETURN_IF_ERROR(Fsync(dir.string(), O_RDONLY | O_DIRECTORY));
  if (::stat(target.c_str(), &st) != 0) {
    return BackupErrno(errno, "cannot stat " + target.string());
  }
  return static_cast<int64_t>(st.st_size);
}

}  // namespace dial::storage
