#include "scheduler/checkpoint_quota.h"

#include "absl/strings/str_cat.h"

namespace dial::scheduler {

absl::Status CheckpointQuota::Check(const std::string& owner,
                                    const std::string& study,
                                    const std::string& id,
                                    int64_t bytes) const {
  if (limit_ <= 0) return absl::OkStatus();
  int64_t used = Used(owner);
  auto it = sizes_.find({study, id});
  if (it != sizes_.end()) used -= it->second.second;
  if (used + bytes <= limit_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      kCheckpointQuotaPrefix, "'", owner, "' holds ", used, " bytes of its ",
      limit_, "-byte quota (--max-checkpoint-bytes-per-owner); checkpoint ", id,
      " (", bytes,
      " bytes) does not fit: delete finished studies or lower "
      "checkpoints.keep_best"));
}

void CheckpointQuota::Set(const std::string& owner, const std::string& study,
                          const std::string& id, int64_t bytes) {
  Remove(study, id);
  sizes_[{study, id}] = {owner, bytes};
  used_[owner] += bytes;
}

void CheckpointQuota::Remove(const std::string& study, const std::string& id) {
  auto it = sizes_.find({study, id});
  if (it == sizes_.end()) return;
  auto used = used_.find(it->second.first);
  if (used != used_.end() && (used->second -= it->second.second) <= 0) {
    used_.erase(used);
  }
  sizes_.erase(it);
}

void CheckpointQuota::ForgetStudy(const std::string& study) {
  for (auto it = sizes_.lower_bound({study, ""});
       it != sizes_.end() && it->first.first == study;) {
    auto next = std::next(it);
    Remove(it->first.first, it->first.second);
    it = next;
  }
}

int64_t CheckpointQuota::Used(const std::string& owner) const {
  auto it = used_.find(owner);
  return it == used_.end() ? 0 : it->second;
}

}  // namespace dial::scheduler
