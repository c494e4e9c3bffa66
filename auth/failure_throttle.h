// FailureThrottle: failed credentials per client, with growing waits, so
// that a client sending wrong tokens (at a login, in an `Authorization:
// Bearer` header, in gRPC metadata) is told to back off: during its wait a
// wrong credential is answered 429 / RESOURCE_EXHAUSTED instead of 401,
// and not counted. A client is whatever key the edge names
// (http::AddressKey: an IPv4 address or an IPv6 /64). Only credentials
// that fail are ever refused: a valid token is accepted whatever its
// client's failures, so someone behind the same proxy or NAT cannot lock
// its holder out (docs/security.md). What keeps tokens from being guessed
// is their size (256 random bits), not this. A client's failures are
// forgotten `forget_after` its last one; the table holds at most
// `max_clients`, and failures of new clients beyond that share one
// account. Thread-safe: one mutex, never held for more than a bounded
// sweep.
#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dial::auth {

struct FailureThrottleOptions {
  // Failures a client may make before it has to wait, and the first and
  // the longest wait (doubling with each failure counted after).
  int free_failures = 5;
  absl::Duration first_wait = absl::Seconds(1);
  absl::Duration max_wait = absl::Minutes(5);
  // A client with no failure for this long starts afresh.
  absl::Duration forget_after = absl::Minutes(15);
  // Clients tracked at once; the rest share one account (kOverflow).
  size_t max_clients = 100000;
};

class FailureThrottle {
 public:
  // The account of new clients once the table is full.
  static constexpr char kOverflow[] = "*";

  explicit FailureThrottle(FailureThrottleOptions options = {})
      : options_(options) {}

  // How long `client` must wait (from `now`) before a failed credential of
  // its is counted again; zero: now. A credential that fails while this
  // is not zero is refused as throttled (429, RESOURCE_EXHAUSTED) and not
  // counted, so hammering does not restart the wait.
  absl::Duration Wait(const std::string& client, absl::Time now) const;
  // Counts a failure of `client` (when Wait is zero).
  void Failed(const std::string& client, absl::Time now);

 private:
  struct Failures {
    int count = 0;
    absl::Time retry_at = absl::InfinitePast();
    absl::Time last = absl::InfinitePast();  // its last counted failure
  };
  // The entry `client`'s failures go to (its own, or kOverflow's).
  const Failures* Find(const std::string& client) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Forgotten(const Failures& f, absl::Time now) const {
    return f.retry_at <= now && now - f.last > options_.forget_after;
  }

  const FailureThrottleOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Failures> failures_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace dial::auth
