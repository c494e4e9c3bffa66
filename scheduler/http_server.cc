#include "scheduler/http_server.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "scheduler/server.h"

namespace dial::scheduler {

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options) {
  const bool tls = !options.tls_cert.empty();
  if (tls != !options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key: give both or neither");
  }
  if (absl::Status s =
          CheckListenAddress(options.listen, options.tokens != nullptr, tls,
                             options.insecure_allow_remote, "--http-listen");
      !s.ok()) {
    return s;
  }
  std::unique_ptr<HttpServer> out(new HttpServer());
  if (tls) {
    out->server_ = std::make_unique<httplib::SSLServer>(
        options.tls_cert.c_str(), options.tls_key.c_str(),
        options.tls_client_ca.empty() ? nullptr
                                      : options.tls_client_ca.c_str());
    if (!out->server_->is_valid()) {
      return absl::InvalidArgumentError(
          "--http-listen: cannot serve TLS with --tls-cert/--tls-key");
    }
  } else {
    out->server_ = std::make_unique<httplib::Server>();
  }
  const auth::TokenTable* tokens = options.tokens;
  metrics::Registry* registry = options.metrics;
  out->server_->Get("/metrics", [tokens, registry](const httplib::Request& req,
                                                   httplib::Response& res) {
    std::optional<absl::string_view> header;
    std::string value;
    if (req.has_header("Authorization")) {
      value = req.get_header_value("Authorization");
      header = value;
    }
    absl::StatusOr<auth::Principal> who =
        auth::AuthenticateBearer(tokens, header);
    if (!who.ok()) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content(std::string(who.status().message()) + "\n", "text/plain");
      return;
    }
    if (!who->can_read_all()) {
      res.status = 403;
      res.set_content("/metrics is for admins and viewers\n", "text/plain");
      return;
    }
    res.set_content(registry->Render(), "text/plain; version=0.0.4");
  });
  const size_t colon = options.listen.rfind(':');
  std::string host = options.listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  if (!absl::SimpleAtoi(options.listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http-listen: '", options.listen, "' must be host:port"));
  }
  out->port_ = port == 0 ? out->server_->bind_to_any_port(host)
                         : (out->server_->bind_to_port(host, port) ? port : -1);
  if (out->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("--http-listen: cannot listen on ", options.listen));
  }
  httplib::Server* server = out->server_.get();
  out->thread_ = std::thread([server] { server->listen_after_bind(); });
  return out;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dial::scheduler
