#include "scheduler/http_server.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "http/admission.h"
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
  HttpGuardOptions guard_options;
  guard_options.allowed_hosts = options.allowed_hosts;
  out->guard_ = std::make_unique<HttpGuard>(guard_options);
  HttpGuard* guard = out->guard_.get();

  http::ServerOptions server_options;
  server_options.listen = options.listen;
  server_options.listen_flag = "--http-listen";
  server_options.tls_cert = options.tls_cert;
  server_options.tls_key = options.tls_key;
  server_options.tls_client_ca = options.tls_client_ca;
  server_options.limits = options.limits;
  // Long-lived event streams hold a handler thread each (at most
  // kMaxStreams), and leave 16 for everything else.
  server_options.handler_threads = HttpApi::kMaxStreams + 16;
  // Security round two, H4: scripts only from this origin (no inline
  // script, no eval), no framing, no type sniffing. ECharts styles its
  // tooltips with inline style attributes, hence 'unsafe-inline' for
  // styles only.
  server_options.default_headers = {
      {"Content-Security-Policy",
       "default-src 'self'; script-src 'self'; style-src 'self' "
       "'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"X-Frame-Options", "DENY"},
      {"Referrer-Policy", "no-referrer"},
  };
  // Security round two: /index.html%00.js was served as JavaScript (H4:
  // control bytes in paths); a request naming any Host created a study in
  // no-token mode, so any web site could through DNS rebinding, and any
  // origin could POST (M5). Judged on the head, before any body is read.
  HttpServer* self = out.get();
  const auth::TokenTable* tokens = options.tokens;
  const size_t small_body = options.max_unauthenticated_body_bytes;
  server_options.check_head =
      [guard, self, tokens,
       small_body](const http::Request& req) -> std::optional<http::Response> {
    HttpRequestHead head{req.method, req.path, std::nullopt, std::nullopt,
                         std::nullopt};
    if (req.has_header("Host")) head.host = req.header("Host");
    if (req.has_header("Origin")) head.origin = req.header("Origin");
    if (req.has_header("Sec-Fetch-Site")) {
      head.sec_fetch_site = req.header("Sec-Fetch-Site");
    }
    http::Response res;
    if (std::optional<HttpRefusal> refused = guard->Check(head)) {
      res.status = refused->status;
      res.set_content(refused->message + "\n", "text/plain");
      return res;
    }
    if (tokens == nullptr) return std::nullopt;  // anonymous admins
    // Attack review, finding 10: wrong bearer tokens were never throttled
    // (300 in 0.04 s). Counted here, once per request, for every route.
    bool authenticated = false;
    if (req.has_header("Authorization")) {
      authenticated =
          auth::AuthenticateBearer(tokens, req.header("Authorization")).ok();
      if (!authenticated) {
        absl::Status throttled =
            ThrottleFailure(*tokens, http::AddressKey(req.remote_addr), res);
        if (!throttled.ok()) {
          res.status = 429;
          res.set_content(
              absl::StrCat("Authorization: ", throttled.message(), "\n"),
              "text/plain");
          return res;
        }
      }
    }
    // Attack review, finding 2: without a token a body is small (a login
    // is a few hundred bytes), so token-less sockets hold little budget.
    size_t length = 0;
    if (!authenticated &&
        absl::SimpleAtoi(req.header("Content-Length"), &length) &&
        length > small_body &&
        !auth::AuthenticateBearer(tokens, self->api_->Credential(req)).ok()) {
      res.status = 413;
      res.set_header("Connection", "close");
      res.set_content(
          absl::StrCat("request body: ", length,
                       " bytes; without a valid token or session a body may "
                       "have at most ",
                       small_body, " bytes\n"),
          "text/plain");
      return res;
    }
    return std::nullopt;
  };
  out->server_ = std::make_unique<http::Server>(server_options);

  metrics::Registry* registry = options.metrics;
  out->api_ = std::make_unique<HttpApi>(HttpApiOptions{
      options.channel, options.tokens, /*secure_cookies=*/tls, guard});
  HttpApi* api = out->api_.get();
  if (options.channel) api->Install(*out->server_);
  if (!options.dashboard_dir.empty()) {
    if (absl::Status s = out->server_->Mount(options.dashboard_dir); !s.ok()) {
      return absl::NotFoundError(
          absl::StrCat("--dashboard-dir: ", s.message()));
    }
  }
  out->server_->Get("/metrics", [tokens, registry, api](
                                    const http::Request& req,
                                    http::Response& res) {
    std::optional<std::string> credential = api->Credential(req);
    std::optional<absl::string_view> header;
    if (credential) header = *credential;
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
  absl::StatusOr<int> port = out->server_->Start();
  if (!port.ok()) return port.status();
  out->port_ = *port;
  return out;
}

HttpServer::~HttpServer() {
  if (api_) api_->CancelStreams();
  if (server_) server_->Stop();
}

}  // namespace dial::scheduler
