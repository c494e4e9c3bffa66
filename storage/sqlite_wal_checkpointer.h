// WalCheckpointer: copies the write-ahead log of an SQLite database back
// into the database file (an SQLite "WAL checkpoint"; nothing to do with
// trial checkpoints) on a thread and a connection of its own, so that the
// copy and its two fsyncs never run inside a group commit holding the
// store's lock. It replaces SQLite's automatic checkpoints on the writer
// connection it watches. Thread-safe (one mutex, a leaf).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/sqlite_connection.h"

namespace dial::storage {

struct WalCheckpointerOptions {
  std::string path;  // the database file
  // The log holds at least this many pages after a commit: copy it back
  // (SQLite's own default for automatic checkpoints).
  int pages = 1000;
};

class WalCheckpointer {
 public:
  // Opens its connection and starts its thread. UNAVAILABLE if the database
  // cannot be opened.
  static absl::StatusOr<std::unique_ptr<WalCheckpointer>> Create(
      const WalCheckpointerOptions& options);
  // Stops the thread (a running checkpoint finishes first).
  ~WalCheckpointer();

  // Counts the log's pages after each commit on `writer` (SQLite's WAL hook,
  // which also turns the writer's automatic checkpoints off). The writer
  // must outlive this object or drop the hook first.
  void Watch(SqliteConnection& writer);
  // After a commit (once it is synced): asks for a checkpoint if the log has
  // grown past the threshold.
  void AfterCommit();

 private:
  WalCheckpointer(std::unique_ptr<SqliteConnection> conn, int pages)
      : conn_(std::move(conn)), pages_(pages) {}
  void Loop();

  // Used by the thread only (and the constructor and destructor).
  const std::unique_ptr<SqliteConnection> conn_;
  const int pages_;
  std::atomic<int> wal_pages_{0};  // in the log after the last commit
  absl::Mutex mu_;
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dial::storage
