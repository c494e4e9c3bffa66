#include "scheduler/event_hub.h"

#include <utility>

namespace dial::scheduler {
namespace {

void StripTrial(v1::Trial& trial) {
  trial.clear_metric_history();
  trial.clear_lease_token();
}

}  // namespace

v1::Study EventStudy(const v1::Study& study) {
  v1::Study out;
  out.set_name(study.name());
  *out.mutable_spec()->mutable_objective() = study.spec().objective();
  *out.mutable_spec()->mutable_objectives() = study.spec().objectives();
  *out.mutable_spec()->mutable_budget() = study.spec().budget();
  out.set_state(study.state());
  if (study.has_create_time()) {
    *out.mutable_create_time() = study.create_time();
  }
  if (study.has_update_time()) {
    *out.mutable_update_time() = study.update_time();
  }
  *out.mutable_trial_counts() = study.trial_counts();
  out.set_trials_created(study.trials_created());
  out.set_owner(study.owner());
  out.set_note(study.note());  // issue 37: pages follow a note live
  return out;
}

void StripForWatchers(v1::StudyEvent& event) {
  if (event.has_study()) {
    v1::StudySpec kept;
    v1::StudySpec* spec = event.mutable_study()->mutable_spec();
    if (spec->has_objective())
      kept.mutable_objective()->Swap(spec->mutable_objective());
    if (spec->has_budget()) kept.mutable_budget()->Swap(spec->mutable_budget());
    kept.mutable_objectives()->Swap(spec->mutable_objectives());
    spec->Swap(&kept);
  }
  if (event.has_trial()) StripTrial(*event.mutable_trial());
  if (event.has_best_trial()) StripTrial(*event.mutable_best_trial());
}

int64_t EventHub::Add(const std::string& study, Callback callback,
                      v1::StudyEvent first) {
  StripForWatchers(first);
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  watchers_[id] = {study,
                   std::make_shared<const Callback>(std::move(callback))};
  queue_.push_back(
      {id, std::make_shared<const v1::StudyEvent>(std::move(first))});
  return id;
}

void EventHub::Remove(int64_t id) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(id);
  // A delivery to it that has begun finishes first (its owner may be
  // about to free what the callback uses), unless this is that delivery.
  auto not_calling = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return calling_ != id || deliverer_ == std::this_thread::get_id();
  };
  mu_.Await(absl::Condition(&not_calling));
}

bool EventHub::Watched(const std::string& study) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, watcher] : watchers_) {
    if (watcher.study == study) return true;
  }
  return false;
}

void EventHub::Publish(const std::string& study, v1::StudyEvent event) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<const v1::StudyEvent> shared;
  for (const auto& [id, watcher] : watchers_) {
    if (watcher.study != study) continue;
    if (!shared) {
      StripForWatchers(event);
      shared = std::make_shared<const v1::StudyEvent>(std::move(event));
    }
    queue_.push_back({id, shared});
  }
}

void EventHub::Deliver() {
  absl::MutexLock lock(&mu_);
  if (delivering_) return;  // that thread delivers what was queued
  delivering_ = true;
  deliverer_ = std::this_thread::get_id();
  while (!queue_.empty()) {
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    auto it = watchers_.find(next.watcher);
    if (it == watchers_.end()) continue;  // removed meanwhile
    std::shared_ptr<const Callback> callback = it->second.callback;
    calling_ = next.watcher;
    mu_.Unlock();
    (*callback)(*next.event);
    mu_.Lock();
    calling_ = 0;
  }
  delivering_ = false;
  deliverer_ = std::thread::id();
}

size_t EventHub::watchers() const {
  absl::MutexLock lock(&mu_);
  return watchers_.size();
}

size_t EventHub::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace dial::scheduler
