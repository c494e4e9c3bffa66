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

}  // namespace dial
