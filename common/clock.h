// Time source, injected so tests control time. Implementations are
// thread-safe.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dial {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// A clock that moves only when told to; for tests. Not thread-safe.
class FakeClock : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

}  // namespace dial
