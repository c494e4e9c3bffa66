// HttpGuard: the HTTP edge's checks that come before any handler, kept
// apart from the HTTP server library so that they can be unit-tested and
// carried to another server: the Host header against DNS rebinding, the
// Origin of state-changing requests against cross-site requests (in
// no-token mode any web page could otherwise drive the API), control bytes
// in paths, and event streams per principal (failed tokens are throttled
// by auth::FailureThrottle, on the token table). Thread-safe: one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dial::scheduler {

struct HttpGuardOptions {
  // Host names (no port) the HTTP edge answers to besides IP literals and
  // "localhost" (--http-allowed-hosts). A name no browser could have been
  // pointed at by DNS rebinding is one the operator chose.
  std::vector<std::string> allowed_hosts;
  // Event streams (SSE) one principal may hold at once.
  int max_streams_per_principal = 4;
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

  // Takes one of `principal`'s event stream slots; false when it holds
  // max_streams_per_principal already. Give it back with EndStream.
  bool BeginStream(const std::string& principal);
  void EndStream(const std::string& principal);

 private:
  bool HostAllowed(const std::string& host) const;

  const HttpGuardOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::scheduler
