// The scheduler's HTTP edge (--http-listen): today GET /metrics, the
// Prometheus text exposition of the scheduler's metrics. The same rules
// as gRPC: HTTPS with the scheduler's certificate (and client
// certificates with --tls-client-ca) when it serves TLS, a loopback
// address unless tokens and TLS are on, and `Authorization: Bearer
// <token>`; /metrics names every study, so it is for admins and viewers.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "auth/token_table.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}

namespace dial::scheduler {

struct HttpServerOptions {
  std::string listen;  // host:port; port 0 picks a free one
  const auth::TokenTable* tokens = nullptr;  // null: anonymous admins
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure_allow_remote = false;
  metrics::Registry* metrics = nullptr;  // required, not owned
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
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace dial::scheduler
