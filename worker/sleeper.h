// Sleeper: how the worker waits between retries, heartbeats and backoff
// steps. Injected (WorkerOptions::sleeper) so that a test can drive backoff,
// heartbeat and lease logic through a fake time source instead of waiting.
// Implementations are thread-safe.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dial::worker {

class Sleeper {
 public:
  virtual ~Sleeper() = default;

  // Waits until `d` has passed on this sleeper's time or `wake` holds,
  // whichever comes first. `mu` is held on entry and on return and is
  // released while waiting (as absl::Mutex::AwaitWithTimeout does); `wake`
  // is evaluated under it. Returns whether `wake` held.
  virtual bool SleepUnless(absl::Mutex& mu, const absl::Condition& wake,
                           absl::Duration d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // Waits `d` with nothing to end the wait early.
  void SleepFor(absl::Duration d);
};

// Real time: the wait is mu.AwaitWithTimeout(wake, d).
class RealSleeper : public Sleeper {
 public:
  bool SleepUnless(absl::Mutex& mu, const absl::Condition& wake,
                   absl::Duration d) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

}  // namespace dial::worker
