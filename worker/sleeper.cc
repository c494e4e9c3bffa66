#include "worker/sleeper.h"

namespace dial::worker {

void Sleeper::SleepFor(absl::Duration d) {
  static constexpr bool kNever = false;
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  SleepUnless(mu, absl::Condition(&kNever), d);
}

bool RealSleeper::SleepUnless(absl::Mutex& mu, const absl::Condition& wake,
                              absl::Duration d) {
  return mu.AwaitWithTimeout(wake, d);
}

}  // namespace dial::worker
