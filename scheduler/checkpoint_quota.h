// CheckpointQuota: the bytes of checkpoints each owner's studies hold (the
// checkpoint index: what retention keeps), against one cap per owner
// (Limits::max_checkpoint_bytes_per_owner, --max-checkpoint-bytes-per-owner).
// A checkpoint that would take its owner over the cap is refused, at its
// report (shared root) or before its upload, with a message that names the
// quota. Not thread-safe: the core's lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/status.h"

namespace dial::scheduler {

class CheckpointQuota {
 public:
  explicit CheckpointQuota(int64_t limit_bytes) : limit_(limit_bytes) {}

  // OK when `owner` may hold checkpoint `id` of `study` at `bytes` (its
  // earlier size, if known, is given back first). RESOURCE_EXHAUSTED
  // naming the owner, the quota, what it holds and the checkpoint.
  absl::Status Check(const std::string& owner, const std::string& study,
                     const std::string& id, int64_t bytes) const;
  // Counts checkpoint `id` of `study` at `bytes` for `owner` (replacing
  // its earlier size).
  void Set(const std::string& owner, const std::string& study,
           const std::string& id, int64_t bytes);
  // The checkpoint is gone.
  void Remove(const std::string& study, const std::string& id);
  // Every checkpoint of `study` is gone.
  void ForgetStudy(const std::string& study);
  int64_t Used(const std::string& owner) const;
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;  // 0: none
  // (study, id) -> (owner, bytes).
  std::map<std::pair<std::string, std::string>, std::pair<std::string, int64_t>>
      sizes_;
  std::map<std::string, int64_t> used_;
};

}  // namespace dial::scheduler
