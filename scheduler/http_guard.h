// HttpGuard: the HTTP edge's checks that come before any handler, kept
// apart from the HTTP server library so that they can be unit-tested and
// carried to another server: the Host header against DNS rebinding, the
// Origin of state-changing requests against cross-site requests (in
// no-token mode any web page could otherwise drive the API), control bytes
// in paths, login attempts per client address (growing waits after a few
// failures) and event streams per principal. Thread-safe: one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace dial::scheduler {

struct HttpGuardOptions {
  // Host names (no port) the HTTP edge answers to besides IP literals and
  // "localhost" (--http-allowed-hosts). A name no browser could have been
  // pointed at by DNS rebinding is one the operator chose.
  std::vector<std::string> allowed_hosts;
  // Failed logins from one address before it has to wait, and the first
  // and the longest wait (doubling in between).
  int free_login_failures = 5;
  absl::Duration first_login_wait = absl::Seconds(1);
  absl::Duration max_login_wait = absl::Minutes(5);
  // Event streams (SSE) one principal may hold at once.
  int max_streams_per_principal = 4;
  const Clock* clock = nullptr;  // null: real time
};

// What a request looks like to the guard.
struct HttpRequestHead {
  std::string method;
  std::string path;
  std::optional<std::string> host;            // the Host header
  std::optional<std::string> origin;          // the Origin header
  std::optional<std::string> sec_fetch_site;  // the Sec-Fetch-Site header
};

// A refusal: the HTTP status and a message naming the header and reason.
struct HttpRefusal {
  int status = 400;
  std::string message;
};

class HttpGuard {
 public:
  explicit HttpGuard(HttpGuardOptions options);

  // nullopt when the request may go on. 400 for a path with a control
  // byte or no Host; 421 for a Host this edge does not answer to; 403 for
  // a state-changing request (not GET, HEAD or OPTIONS) from another
  // origin.
  std::optional<HttpRefusal> Check(const HttpRequestHead& head) const;

  // How long `address` must wait before its next login attempt (zero: it
  // may try now).
  absl::Duration LoginWait(const std::string& address);
  void LoginFailed(const std::string& address);
  void LoginSucceeded(const std::string& address);

  // Takes one of `principal`'s event stream slots; false when it holds
  // max_streams_per_principal already. Give it back with EndStream.
  bool BeginStream(const std::string& principal);
  void EndStream(const std::string& principal);

 private:
  struct Failures {
    int count = 0;
    absl::Time retry_at = absl::InfinitePast();
  };
  absl::Time Now() const;
  bool HostAllowed(const std::string& host) const;

  const HttpGuardOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Failures> failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::scheduler
