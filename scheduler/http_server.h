// The scheduler's HTTP edge (--http-listen): GET /metrics, the
// Prometheus text exposition of the scheduler's metrics; the JSON API
// under /api/v1 (http_api.h); the dashboard's files at /. The same rules
// as gRPC: HTTPS with the scheduler's certificate (and client
// certificates with --tls-client-ca) when it serves TLS, a loopback
// address unless tokens and TLS are on, and `Authorization: Bearer
// <token>` (or the dashboard's login cookie); /metrics names every study,
// so it is for admins and viewers. Every request is read within the
// limits of http::Limits (http/server.h): the head, the body, the time to
// read each, connections per client address.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auth/token_table.h"
#include "common/metrics.h"
#include "http/server.h"
#include "scheduler/http_api.h"
#include "scheduler/http_guard.h"

namespace grpc {
class Channel;
}

namespace dial::scheduler {

struct HttpServerOptions {
  std::string listen;  // host:port; port 0 picks a free one
  const auth::TokenTable* tokens = nullptr;  // null: anonymous admins
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure_allow_remote = false;
  metrics::Registry* metrics = nullptr;  // required, not owned
  // The JSON API (http_api.h) over this channel to the scheduler's own
  // services (SchedulerServer::InProcessChannel); null: /metrics only.
  std::shared_ptr<grpc::Channel> channel;
  // The dashboard's built files (index.html and assets/), served at /;
  // empty: no dashboard.
  std::string dashboard_dir;
  // Host names besides IP literals and localhost that requests may name in
  // Host (--http-allowed-hosts; http_guard.h).
  std::vector<std::string> allowed_hosts;
  // Bounds on what a request may take (http/server.h).
  http::Limits limits;
  // The largest body of a request with no valid token or session (a
  // login is a few hundred bytes): 413 before it is read.
  size_t max_unauthenticated_body_bytes = 16 << 10;
};

class HttpServer {
 public:
  // INVALID_ARGUMENT for an address CheckListenAddress refuses or half a
  // TLS setup; UNAVAILABLE if it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options);
  ~HttpServer();  // stops serving
  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<HttpGuard> guard_;
  std::unique_ptr<HttpApi> api_;
  std::unique_ptr<http::Server> server_;
  int port_ = 0;
};

}  // namespace dial::scheduler
