// Backups: copies of the database made while the scheduler goes on
// serving (BackupDatabase), one at a time, each on a thread of its own (a
// copy takes as long as the database is large, and the store's backup
// needs neither the core's lock nor the store's). Copies go only to new
// files in one directory. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/principal.h"
#include "storage/study_store.h"

namespace dial::scheduler {

class Backups {
 public:
  // (path, bytes) of a finished copy.
  using Result = absl::StatusOr<std::pair<std::string, int64_t>>;
  // Records a finished (or failed) backup in the audit log.
  using AuditFn =
      std::function<void(const auth::Principal& who, const std::string&)>;
  // `dir` empty refuses every backup.
  Backups(storage::StudyStore* store, std::string dir, AuditFn audit)
      : store_(store), dir_(std::move(dir)), audit_(std::move(audit)) {}
  ~Backups();  // Stop()

  // Admin only. `name` is a file name in the directory that must not exist
  // yet (INVALID_ARGUMENT for anything else, ALREADY_EXISTS if it does);
  // ABORTED while another backup runs, UNAVAILABLE after Stop. `done` is
  // called once, without any lock: at once for a refusal, else on the
  // backup's thread, with the copy's absolute path and size.
  void Start(const std::string& name, const auth::Principal& who,
             std::function<void(Result)> done);
  // Refuses new backups and waits for the one running.
  void Stop();

 private:
  storage::StudyStore* const store_;
  const std::string dir_;
  const AuditFn audit_;
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The latest backup's thread; joined by the next backup or Stop.
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::scheduler
