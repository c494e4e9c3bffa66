#include "scheduler/study_registry.h"

#include "absl/strings/str_cat.h"

namespace dial::scheduler {

absl::StatusOr<StudyEntry*> StudyRegistry::Find(const std::string& name) const {
  if (name.empty()) return absl::InvalidArgumentError("study: is required");
  if (reload_needed_) {
    return absl::UnavailableError(
        "the scheduler is reloading its state after a failed database "
        "commit; retry");
  }
  auto it = studies_.find(name);
  if (it == studies_.end()) {
    return absl::NotFoundError(absl::StrCat("study '", name, "' not found"));
  }
  return it->second.get();
}

std::shared_ptr<StudyEntry> StudyRegistry::Shared(
    const std::string& name) const {
  auto it = studies_.find(name);
  return it == studies_.end() ? nullptr : it->second;
}

void StudyRegistry::Add(std::shared_ptr<StudyEntry> entry) {
  const std::string name = entry->name();
  studies_[name] = std::move(entry);
}

void StudyRegistry::Remove(const std::string& name) {
  auto it = studies_.find(name);
  if (it == studies_.end()) return;
  it->second->Drop(/*stale=*/false);
  studies_.erase(it);
}

void StudyRegistry::DropAll() {
  for (auto& [name, entry] : studies_) {
    entry->Drop(/*stale=*/true);  // queued work for them does nothing
  }
  studies_.clear();
}

absl::Status StudyRegistry::Gone(const StudyEntry& entry) {
  if (entry.stale()) {
    return absl::UnavailableError("the scheduler reloaded its state; retry");
  }
  if (entry.deleted()) return absl::NotFoundError("the study was deleted");
  return absl::OkStatus();
}

}  // namespace dial::scheduler
