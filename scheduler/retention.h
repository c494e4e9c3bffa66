// CheckpointRetention: which checkpoints of a study's trials it keeps:
// each trial's latest and its best `keep_best` (by the objective), its
// restore point (what its next attempt loads), plus any that a pending PBT
// exploit still has to copy. The built-in trainer's checkpoints
// (<study>/<trial>/<step>) and the paths command trials and ask/tell
// clients report inside their trial's directory alike; a path several
// steps name is kept while any kept step names it. It only decides; the core
// deletes what it returns once the write that made them obsolete is
// durable, and keeps the store's checkpoint index (with each checkpoint's
// score) so that a restarted scheduler restores this state. Not thread-safe:
// the core's lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dial/v1/study.pb.h"
#include "scheduler/outbox.h"
#include "storage/study_store.h"

namespace dial::scheduler {

class CheckpointRetention {
 public:
  // Notes `trial`'s checkpoint `id` at `step` with its score (higher is
  // better), now its restore point; returns what of `study`'s checkpoints
  // it no longer keeps.
  std::vector<DoomedCheckpoint> Record(const v1::Study& study, int64_t trial,
                                       int64_t step, double score,
                                       const std::string& id);
  // Keeps checkpoint `id` until `trial` (which copies it) releases it.
  void Pin(const std::string& study, const std::string& id, int64_t trial);
  // Releases `trial`'s pins (it reported again: its copy is done); returns
  // the ids no longer kept.
  std::vector<DoomedCheckpoint> Release(const v1::Study& study, int64_t trial);
  // After a restart: takes over what the store's checkpoint index holds of
  // `study` (`records`, by trial and step) and re-pins the source of every
  // exploit whose trial has not reported since (`trials`, as loaded), and
  // keeps each trial's restore point (its `checkpoint_step`) whatever the
  // index says is newer; returns the ids the policy no longer keeps.
  std::vector<DoomedCheckpoint> Restore(
      const v1::Study& study,
      const std::vector<storage::CheckpointRecord>& records,
      const std::map<int64_t, v1::Trial>& trials);
  void Forget(const std::string& study) { studies_.erase(study); }
  void Clear() { studies_.clear(); }

 private:
  struct Entry {
    double score = 0;
    std::string id;
  };
  struct PerStudy {
    // trial -> checkpoint step -> its score and id.
    std::map<int64_t, std::map<int64_t, Entry>> scores;
    // checkpoint id -> trials whose exploit copies it.
    std::map<std::string, std::set<int64_t>> pins;
    // trial -> the step of its restore point.
    std::map<int64_t, int64_t> restore;
  };
  // What `trial`'s checkpoints the policy no longer keeps (forgotten here).
  std::vector<DoomedCheckpoint> Retain(const v1::Study& study, PerStudy& state,
                                       int64_t trial);

  std::map<std::string, PerStudy> studies_;
};

}  // namespace dial::scheduler
