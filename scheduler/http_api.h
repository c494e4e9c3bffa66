// The JSON API on the scheduler's HTTP edge (http_server.h), under
// /api/v1, for the dashboard and for scripts (docs/http-api.md):
//   POST /api/v1/<Method>       every unary StudyService method: the
//                               request and the answer in the proto3 JSON
//                               mapping, errors as {code, status, message}
//   GET  /api/v1/WatchStudy?study=S   the watch as Server-Sent Events
//   GET  /api/v1/TrialTable?study=S   every trial as columns (the
//                               dashboard's charts and table)
//   GET  /api/v1/ExportStudy?study=S&format=csv|jsonl[&history=1]
//                               the export of `dialctl study export`,
//                               streamed a page of trials at a time
//   POST /api/v1/login {"token"}, POST /api/v1/logout, GET /api/v1/whoami
// Each call goes through the scheduler's own gRPC services on an
// in-process channel, with the caller's token (the Authorization header,
// or the session the login cookie names): the same roles, limits and
// audit as gRPC. POSTs must be application/json, which an HTML form on
// another site cannot send (with the SameSite=Strict cookie, no CSRF).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/token_table.h"
#include "http/server.h"
#include "scheduler/http_guard.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace dial::scheduler {

// Login sessions: a random id (the HttpOnly cookie) and a random key (which
// the page keeps in its origin's storage and sends in X-Dial-Session) for a
// token, kept in memory only, for 12 hours, or 2 hours unused. Cookies are
// not scoped by port, so another service on the same host (TensorBoard,
// Jupyter) receives the cookie; without the key it is worth nothing (see
// docs/security.md). One principal holds at most kMaxSessionsPerPrincipal
// (a new login ends its own oldest), so that no token can end another
// principal's sessions by logging in many times. Thread-safe.
class SessionTable {
 public:
  static constexpr absl::Duration kLifetime = absl::Hours(12);
  static constexpr absl::Duration kIdle = absl::Hours(2);
  static constexpr size_t kMaxSessions = 10000;
  static constexpr size_t kMaxSessionsPerPrincipal = 32;
  struct Created {
    std::string id, key;
  };
  // A session of `principal` for `token`. When the principal holds
  // kMaxSessionsPerPrincipal, its own oldest ends; when the table is full
  // (kMaxSessions), the oldest of the principal holding the most.
  Created Create(const std::string& token, const std::string& principal);
  // The token of session `id` when `key` is its key and it is neither
  // expired nor idle too long (it counts as used now).
  std::optional<std::string> Find(const std::string& id,
                                  const std::string& key);
  void Remove(const std::string& id);

 private:
  struct Session {
    std::string token, key, principal;
    absl::Time expires, idle_expires;
  };
  // Ends the oldest session of `principal`.
  void RemoveOldest(const std::string& principal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex mu_;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> per_principal_ ABSL_GUARDED_BY(mu_);
};

// Counts a wrong token from `client` (http::AddressKey) on the token
// table's throttle: OK when the client need not wait (the caller answers
// 401 as usual); RESOURCE_EXHAUSTED (429), with Retry-After set on `res`,
// while it must, in which case nothing is counted. Only wrong tokens come
// here: a valid token is never refused for its client's failures.
absl::Status ThrottleFailure(const auth::TokenTable& tokens,
                             const std::string& client, http::Response& res);

struct HttpApiOptions {
  // To the scheduler's own services (grpc::Server::InProcessChannel).
  std::shared_ptr<grpc::Channel> channel;
  const auth::TokenTable* tokens = nullptr;  // null: anonymous admins
  bool secure_cookies = false;               // TLS: cookies are Secure
  // Login throttling and event streams per principal; null: neither. Not
  // owned.
  HttpGuard* guard = nullptr;
};

class HttpApi {
 public:
  // Open WatchStudy event streams (each holds a handler thread), of which
  // kAdminStreams are kept for admins, so that an admin can always watch.
  static constexpr int kMaxStreams = 32;
  static constexpr int kAdminStreams = 8;

  explicit HttpApi(HttpApiOptions options);
  ~HttpApi();  // cancels the open event streams
  void Install(http::Server& server);
  // The caller's "Bearer <token>": the Authorization header, or the
  // session its cookie names; nullopt for neither.
  std::optional<std::string> Credential(const http::Request& req);
  // Ends every open event stream (before the server stops).
  void CancelStreams();

 private:
  // Registers a watch's context; false at kMaxStreams (for a non-admin,
  // kMaxStreams - kAdminStreams) or once cancelled.
  bool AddStream(grpc::ClientContext* ctx, bool admin);
  void RemoveStream(grpc::ClientContext* ctx);

  HttpApiOptions options_;
  SessionTable sessions_;
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> streams_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dial::scheduler
