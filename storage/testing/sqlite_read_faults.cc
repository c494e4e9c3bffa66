#include "storage/testing/sqlite_read_faults.h"

#include <sqlite3.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

namespace dial::storage::testing {
namespace {

// Plain functions stand in for the system calls, so the state is global.
std::atomic<bool> g_failing{false};
sqlite3_syscall_ptr g_pread, g_pread64, g_read;

using PreadFn = ssize_t (*)(int, void*, size_t, off_t);
using ReadFn = ssize_t (*)(int, void*, size_t);

ssize_t FailingPread(int fd, void* buf, size_t n, off_t off) {
  if (g_failing) return errno = ETIMEDOUT, -1;
  return reinterpret_cast<PreadFn>(g_pread)(fd, buf, n, off);
}
ssize_t FailingPread64(int fd, void* buf, size_t n, off_t off) {
  if (g_failing) return errno = ETIMEDOUT, -1;
  return reinterpret_cast<PreadFn>(g_pread64)(fd, buf, n, off);
}
ssize_t FailingRead(int fd, void* buf, size_t n) {
  if (g_failing) return errno = ETIMEDOUT, -1;
  return reinterpret_cast<ReadFn>(g_read)(fd, buf, n);
}

}  // namespace

SqliteReadFaults::SqliteReadFaults() {
  sqlite3_vfs* vfs = sqlite3_vfs_find(nullptr);
  g_pread = vfs->xGetSystemCall(vfs, "pread");
  g_pread64 = vfs->xGetSystemCall(vfs, "pread64");
  g_read = vfs->xGetSystemCall(vfs, "read");
  vfs->xSetSystemCall(vfs, "pread",
                      reinterpret_cast<sqlite3_syscall_ptr>(FailingPread));
  vfs->xSetSystemCall(vfs, "pread64",
                      reinterpret_cast<sqlite3_syscall_ptr>(FailingPread64));
  vfs->xSetSystemCall(vfs, "read",
                      reinterpret_cast<sqlite3_syscall_ptr>(FailingRead));
}

SqliteReadFaults::~SqliteReadFaults() {
  g_failing = false;
  sqlite3_vfs* vfs = sqlite3_vfs_find(nullptr);
  vfs->xSetSystemCall(vfs, nullptr, nullptr);  // every call back to default
}

void SqliteReadFaults::Fail(bool fail) { g_failing = fail; }

}  // namespace dial::storage::testing
