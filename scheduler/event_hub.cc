#include "scheduler/event_hub.h"

#include <utility>

namespace dial::scheduler {

int64_t EventHub::Add(const std::string& study, Callback callback,
                      v1::StudyEvent first) {
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

}  // namespace dial::scheduler
