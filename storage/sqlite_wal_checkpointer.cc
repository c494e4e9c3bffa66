#include "storage/sqlite_wal_checkpointer.h"

#include <sqlite3.h>

#include "common/status.h"

namespace dial::storage {

absl::StatusOr<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Create(
    const WalCheckpointerOptions& options) {
  DIAL_ASSIGN_OR_RETURN(
      std::unique_ptr<SqliteConnection> conn,
      SqliteConnection::Open(options.path,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX));
  // Checkpoints sync the log and the database file either way.
  conn->Exec("PRAGMA synchronous=NORMAL").IgnoreError();
  std::unique_ptr<WalCheckpointer> checkpointer(
      new WalCheckpointer(std::move(conn), options.pages));
  checkpointer->thread_ = std::thread([c = checkpointer.get()] { c->Loop(); });
  return checkpointer;
}

WalCheckpointer::~WalCheckpointer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void WalCheckpointer::Watch(SqliteConnection& writer) {
  sqlite3_wal_hook(
      writer.handle(),
      [](void* self, sqlite3*, const char*, int pages) {
        static_cast<WalCheckpointer*>(self)->wal_pages_.store(pages);
        return SQLITE_OK;
      },
      this);
}

void WalCheckpointer::AfterCommit() {
  if (wal_pages_.load() < pages_) return;
  absl::MutexLock lock(&mu_);
  wanted_ = true;
}

void WalCheckpointer::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WalCheckpointer* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return c->wanted_ || c->stop_;
          },
          this));
      if (stop_) return;
      wanted_ = false;
    }
    // PASSIVE: copies what no reader needs, never blocks the writer. A
    // failure (say a full disk) leaves the log to the next try.
    sqlite3_wal_checkpoint_v2(conn_->handle(), nullptr,
                              SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  }
}

}  // namespace dial::storage
