#include "scheduler/backups.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace dial::scheduler {

Backups::~Backups() { Stop(); }

void Backups::Stop() {
  std::thread last;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    last = std::move(thread_);
  }
  if (last.joinable()) last.join();
}

void Backups::Start(const std::string& name, const auth::Principal& who,
                    std::function<void(Result)> done) {
  if (!who.is_admin()) {
    return done(absl::PermissionDeniedError(
        absl::StrCat(auth::RoleName(who.role), " '", who.name,
                     "' may not back up the database (admins may)")));
  }
  if (dir_.empty()) {
    return done(absl::FailedPreconditionError(
        "backups are off: start the scheduler with --backup-dir=DIR"));
  }
  const bool plain_name =
      !name.empty() && name.size() <= 255 && name[0] != '.' &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '_';
      });
  if (!plain_name) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "path: '", name.substr(0, 256),
        "' must be a file name in the scheduler's --backup-dir (letters, "
        "digits, '.', '-', '_'; not starting with '.')")));
  }
  const std::string path = absl::StrCat(dir_, "/", name);
  absl::Status refused;
  std::thread previous;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("the scheduler is shutting down");
    } else if (running_) {
      refused = absl::AbortedError(
          "another backup is in progress; retry when it has finished");
    } else {
      running_ = true;
      previous = std::move(thread_);  // finished: joined below
      thread_ = std::thread([this, path, who, done = std::move(done)] {
        absl::StatusOr<int64_t> bytes = store_->Backup(path);
        if (bytes.ok()) {
          spdlog::info("database backed up to {} ({} bytes)", path, *bytes);
        } else if (!absl::IsInvalidArgument(bytes.status()) &&
                   !absl::IsAlreadyExists(bytes.status())) {
          spdlog::warn("backup to {} failed: {}", path,
                       bytes.status().ToString());
        }
        audit_(who, bytes.ok()
                        ? absl::StrCat(path, " (", *bytes, " bytes)")
                        : absl::StrCat(path, ": ", bytes.status().ToString()));
        {
          absl::MutexLock lock(&mu_);
          running_ = false;
        }
        if (!bytes.ok()) return done(bytes.status());
        done(std::make_pair(path, *bytes));
      });
    }
  }
  if (previous.joinable()) previous.join();
  if (!refused.ok()) done(refused);
}

}  // namespace dial::scheduler
