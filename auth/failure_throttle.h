// FailureThrottle: failed credentials per client, with growing waits, so
// that guessing tokens (at a login, in an `Authorization: Bearer` header,
// in gRPC metadata) is slowed and told to back off. A client is whatever
// key the edge names (http::AddressKey: an IPv4 address or an IPv6 /64).
// Only credentials that fail are ever refused: a valid token is accepted
// whatever its client's failures, so someone behind the same proxy or NAT
// cannot lock its holder out (docs/security.md). Thread-safe: one mutex.
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
};

class FailureThrottle {
 public:
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
  };
  const FailureThrottleOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Failures> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::auth
