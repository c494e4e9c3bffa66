#include "scheduler/access_checks.h"

#include "absl/strings/str_cat.h"
#include "storage/checkpoint_store.h"

namespace dial::scheduler {

absl::Status CheckCheckpointId(const std::string& id, const std::string& study,
                               int64_t trial) {
  if (id.empty()) return absl::OkStatus();
  auto parsed = storage::CheckpointStore::ParseId(id);
  if (!parsed.ok() || parsed->study != study || parsed->trial != trial) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: '", id.substr(0, 256), "' is not a checkpoint of trial ",
        trial, " of study '", study, "' (expected '", study, "/", trial,
        "/<step>')"));
  }
  return absl::OkStatus();
}

absl::Status CheckAskTell(const StudyEntry& entry, int64_t trial) {
  if (!entry.worker_run()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "trial ", trial, " of study '", entry.name(),
      "' is run by the study's workers: only its worker reports on it"));
}

}  // namespace dial::scheduler
