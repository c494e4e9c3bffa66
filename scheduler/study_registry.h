// StudyRegistry: the studies the core holds, by name. Dropped entries are
// marked so that work queued for them (on the suggestion thread) leaves
// them alone. Not thread-safe: the core's lock guards it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "scheduler/study_entry.h"

namespace dial::scheduler {

class StudyRegistry {
 public:
  using Map = std::map<std::string, std::shared_ptr<StudyEntry>>;

  // INVALID_ARGUMENT for an empty name, UNAVAILABLE while a reload is
  // pending, NOT_FOUND for an unknown study.
  absl::StatusOr<StudyEntry*> Find(const std::string& name) const;
  // The entry, shared with queued work; null if absent.
  std::shared_ptr<StudyEntry> Shared(const std::string& name) const;
  bool Contains(const std::string& name) const {
    return studies_.count(name) > 0;
  }
  const Map& all() const { return studies_; }

  void Add(std::shared_ptr<StudyEntry> entry);
  // Drops a deleted study.
  void Remove(const std::string& name);
  // Drops every study (memory ran ahead of the store: see the core's
  // reload).
  void DropAll();
  // A reload failed: calls fail UNAVAILABLE until one succeeds.
  void set_reload_needed(bool needed) { reload_needed_ = needed; }
  bool reload_needed() const { return reload_needed_; }

  // Why queued work must leave `entry` alone: NOT_FOUND once the study was
  // deleted, UNAVAILABLE once a reload replaced it; else OK.
  static absl::Status Gone(const StudyEntry& entry);

 private:
  Map studies_;
  bool reload_needed_ = false;
};

}  // namespace dial::scheduler
