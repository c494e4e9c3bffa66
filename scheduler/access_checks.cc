#include "scheduler/access_checks.h"

#include "absl/strings/str_cat.h"
#include "storage/checkpoint_store.h"

namespace dial::scheduler {

absl::Status CheckCheckpointId(const std::string& id, const std::string& study,
                               int64_t trial) {
  if (id.empty()) return absl::OkStatus();
  return storage::CheckpointStore::CheckOwnId(id, study, trial);
}

absl::Status CheckAskTell(const StudyEntry& entry, int64_t trial) {
  if (!entry.worker_run()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "trial ", trial, " of study '", entry.name(),
      "' is run by the study's workers: only its worker reports on it"));
}

}  // namespace dial::scheduler
