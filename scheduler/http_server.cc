#include "scheduler/http_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/http_listen.h"
#include "scheduler/server.h"

namespace dial::scheduler {
namespace {

constexpr size_t kMaxBodyBytes = 8 << 20;

}  // namespace

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
  // Long-lived event streams hold a thread each (at most kMaxStreams).
  out->server_->new_task_queue = [] {
    return new httplib::ThreadPool(HttpApi::kMaxStreams + 16);
  };
  out->server_->set_payload_max_length(kMaxBodyBytes);
  // Security round two, H4: scripts only from this origin (no inline
  // script, no eval), no framing, no type sniffing. ECharts styles its
  // tooltips with inline style attributes, hence 'unsafe-inline' for
  // styles only.
  out->server_->set_default_headers({
      {"Content-Security-Policy",
       "default-src 'self'; script-src 'self'; style-src 'self' "
       "'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"X-Frame-Options", "DENY"},
      {"Referrer-Policy", "no-referrer"},
  });
  out->server_->set_keep_alive_max_count(100);
  // Debian's cpp-httplib compresses with Brotli at quality 11 whenever the
  // client accepts it: about 0.5 MB/s here, 17 s for a 100,000-trial
  // TrialTable that gzip sends in 1.1 s. Without "br" in Accept-Encoding
  // it falls back to gzip. (The request is httplib's own, not const.)
  HttpGuardOptions guard_options;
  guard_options.allowed_hosts = options.allowed_hosts;
  out->guard_ = std::make_unique<HttpGuard>(guard_options);
  HttpGuard* guard = out->guard_.get();
  out->server_->set_pre_routing_handler([guard](const httplib::Request& req,
                                                httplib::Response& res) {
    // Security round two: /index.html%00.js was served as JavaScript
    // (H4: control bytes in paths); a request naming any Host created
    // a study in no-token mode, so any web site could through DNS
    // rebinding, and any origin could POST (M5).
    HttpRequestHead head{req.method, req.path, std::nullopt, std::nullopt,
                         std::nullopt};
    if (req.has_header("Host")) head.host = req.get_header_value("Host");
    if (req.has_header("Origin")) {
      head.origin = req.get_header_value("Origin");
    }
    if (req.has_header("Sec-Fetch-Site")) {
      head.sec_fetch_site = req.get_header_value("Sec-Fetch-Site");
    }
    if (std::optional<HttpRefusal> refused = guard->Check(head)) {
      res.status = refused->status;
      res.set_content(refused->message + "\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Security round two, H3 (in part): cpp-httplib reads a body after
    // this handler, decompressing and de-chunking it without bound (a
    // 204 KB gzip body took 333 MB). No call of the API needs either:
    // a body must come whole, uncompressed, with its length, within
    // the cap, or it is refused before a byte of it is read.
    if (std::optional<HttpRefusal> refused =
            CheckBodyHeaders(req.get_header_value("Content-Encoding"),
                             req.get_header_value("Transfer-Encoding"),
                             req.has_header("Content-Length")
                                 ? std::optional<std::string>(
                                       req.get_header_value("Content-Length"))
                                 : std::nullopt,
                             kMaxBodyBytes)) {
      res.status = refused->status;
      res.set_header("Connection", "close");
      res.set_content(refused->message + "\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    auto& headers = const_cast<httplib::Headers&>(req.headers);
    auto [begin, end] = headers.equal_range("Accept-Encoding");
    for (auto it = begin; it != end; ++it) {
      std::vector<absl::string_view> kept;
      for (absl::string_view coding : absl::StrSplit(it->second, ',')) {
        absl::string_view name = absl::StripAsciiWhitespace(
            coding.substr(0, std::min(coding.find(';'), coding.size())));
        if (name != "br") kept.push_back(absl::StripAsciiWhitespace(coding));
      }
      it->second = absl::StrJoin(kept, ", ");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  out->api_ = std::make_unique<HttpApi>(HttpApiOptions{
      options.channel, options.tokens, /*secure_cookies=*/tls, guard});
  HttpApi* api = out->api_.get();
  if (options.channel) api->Install(*out->server_);
  if (!options.dashboard_dir.empty() &&
      !out->server_->set_mount_point("/", options.dashboard_dir)) {
    return absl::NotFoundError(absl::StrCat(
        "--dashboard-dir: '", options.dashboard_dir, "' is not a directory"));
  }
  out->server_->Get("/metrics", [tokens, registry, api](
                                    const httplib::Request& req,
                                    httplib::Response& res) {
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
  absl::StatusOr<int> port =
      BindHttp(*out->server_, options.listen, "--http-listen");
  if (!port.ok()) return port.status();
  out->port_ = *port;
  httplib::Server* server = out->server_.get();
  out->thread_ = std::thread([server] { server->listen_after_bind(); });
  return out;
}

HttpServer::~HttpServer() {
  if (api_) api_->CancelStreams();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dial::scheduler
