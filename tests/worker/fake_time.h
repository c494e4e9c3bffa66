// FakeTime: a Clock and a Sleeper that share one fake time, for driving the
// worker's backoff, heartbeats and outage limits without real waiting. Time
// moves only in Advance, which wakes the sleeps that are then due; a test
// waits for the worker to go to sleep with AwaitSleep (bounded by real
// time, never a bare sleep). Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/sleeper.h"

namespace dial::worker::testing {

class FakeTime : public Clock, public Sleeper {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  bool SleepUnless(absl::Mutex& mu, const absl::Condition& wake,
                   absl::Duration d) override {
    auto sleep = std::make_shared<Sleep>();
    sleep->duration = d;
    sleep->mu = &mu;
    {
      absl::MutexLock lock(&mu_);
      requested_.push_back(d);
      if (d <= absl::ZeroDuration()) return wake.Eval();
      sleep->deadline = now_ + d;
      sleeping_.push_back(sleep);
    }
    auto woken = [&] { return sleep->fired.load() || wake.Eval(); };
    mu.Await(absl::Condition(&woken));
    const bool woke = wake.Eval();
    // Advance may still be about to nudge `mu` for this sleep; `mu` must
    // outlive that, and Advance needs it unlocked.
    mu.Unlock();
    {
      absl::MutexLock lock(&mu_);
      sleeping_.erase(std::find(sleeping_.begin(), sleeping_.end(), sleep));
      auto nudged = [&] { return sleep->nudges == 0; };
      mu_.Await(absl::Condition(&nudged));
    }
    mu.Lock();
    return woke;
  }

  // Moves time on by `d` and wakes every sleep that is then due.
  void Advance(absl::Duration d) {
    std::vector<std::shared_ptr<Sleep>> due;
    {
      absl::MutexLock lock(&mu_);
      now_ += d;
      for (auto& s : sleeping_) {
        if (!s->fired.load() && s->deadline <= now_) {
          s->fired.store(true);
          ++s->nudges;
          due.push_back(s);
        }
      }
    }
    // An absl::Mutex re-evaluates its waiters' conditions on unlock.
    for (auto& s : due) {
      s->mu->Lock();
      s->mu->Unlock();
    }
    absl::MutexLock lock(&mu_);
    for (auto& s : due) --s->nudges;
  }

  // Waits up to `timeout` of real time until a sleep of exactly `d` is
  // pending (asked for and not yet due). False on timeout.
  bool AwaitSleep(absl::Duration d,
                  absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto pending = [&] {
      for (const auto& s : sleeping_) {
        if (!s->fired.load() && s->duration == d) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&pending), timeout);
  }

  // Every sleep asked for, in order.
  std::vector<absl::Duration> Requested() const {
    absl::MutexLock lock(&mu_);
    return requested_;
  }

 private:
  struct Sleep {
    absl::Duration duration;
    absl::Time deadline;
    absl::Mutex* mu = nullptr;  // the sleeper's, to nudge
    std::atomic<bool> fired{false};
    int nudges = 0;  // Advance calls about to nudge `mu`; guarded by mu_
  };

  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1700000000);
  std::vector<std::shared_ptr<Sleep>> sleeping_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> requested_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::worker::testing
