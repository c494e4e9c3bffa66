#include "auth/failure_throttle.h"

#include <algorithm>
#include <iterator>

namespace dial::auth {

absl::Duration FailureThrottle::Wait(const std::string& client,
                                     absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(client);
  if (it == failures_.end()) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), it->second.retry_at - now);
}

void FailureThrottle::Failed(const std::string& client, absl::Time now) {
  absl::MutexLock lock(&mu_);
  // Bounded memory: clients whose last wait is long over are forgotten.
  if (failures_.size() > 100000) {
    for (auto it = failures_.begin(); it != failures_.end();) {
      it = it->second.retry_at + options_.max_wait < now ? failures_.erase(it)
                                                         : std::next(it);
    }
  }
  Failures& f = failures_[client];
  if (f.retry_at > now) return;  // refused, not counted
  ++f.count;
  const int over = f.count - options_.free_failures;
  if (over <= 0) return;
  absl::Duration wait = options_.first_wait;
  for (int i = 1; i < over && wait < options_.max_wait; ++i) wait *= 2;
  f.retry_at = now + std::min(wait, options_.max_wait);
}

}  // namespace dial::auth
