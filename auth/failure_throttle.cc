#include "auth/failure_throttle.h"

#include <algorithm>
#include <iterator>

namespace dial::auth {

const FailureThrottle::Failures* FailureThrottle::Find(
    const std::string& client) const {
  auto it = failures_.find(client);
  if (it != failures_.end()) return &it->second;
  if (failures_.size() < options_.max_clients) return nullptr;
  auto overflow = failures_.find(kOverflow);
  return overflow == failures_.end() ? nullptr : &overflow->second;
}

absl::Duration FailureThrottle::Wait(const std::string& client,
                                     absl::Time now) const {
  absl::MutexLock lock(&mu_);
  const Failures* f = Find(client);
  if (f == nullptr) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), f->retry_at - now);
}

void FailureThrottle::Failed(const std::string& client, absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::string key = client;
  if (!failures_.count(client) && failures_.size() >= options_.max_clients) {
    // Full: forget the clients whose failures are old, at most once a
    // minute (a sweep is linear); a new client that still finds no room
    // shares the overflow account.
    if (now - last_sweep_ > absl::Minutes(1)) {
      last_sweep_ = now;
      for (auto it = failures_.begin(); it != failures_.end();) {
        it = Forgotten(it->second, now) ? failures_.erase(it) : std::next(it);
      }
    }
    if (failures_.size() >= options_.max_clients) key = kOverflow;
  }
  Failures& f = failures_[key];
  if (f.retry_at > now) return;  // refused, not counted
  if (Forgotten(f, now)) f = Failures();
  ++f.count;
  f.last = now;
  const int over = f.count - options_.free_failures;
  if (over <= 0) return;
  absl::Duration wait = options_.first_wait;
  for (int i = 1; i < over && wait < options_.max_wait; ++i) wait *= 2;
  f.retry_at = now + std::min(wait, options_.max_wait);
}

}  // namespace dial::auth
