// SqliteReadFaults: makes SQLite's reads of its files fail while Fail(true)
// is in force, through the system calls its unix VFS lets tests replace
// (pread, pread64, read). They fail with ETIMEDOUT, a network filesystem's
// error, rather than EIO, which SQLite reports as a damaged file. Installed
// for the whole process while the object lives (one at a time); the
// defaults are back when it goes. Fail() is thread-safe; construction and
// destruction must not race with SQLite calls.
#pragma once

namespace dial::storage::testing {

class SqliteReadFaults {
 public:
  SqliteReadFaults();
  ~SqliteReadFaults();
  SqliteReadFaults(const SqliteReadFaults&) = delete;
  SqliteReadFaults& operator=(const SqliteReadFaults&) = delete;

  void Fail(bool fail);
};

}  // namespace dial::storage::testing
