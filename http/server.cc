// http::Server on Boost.Beast: one I/O thread runs a coroutine per
// connection (reads and writes with deadlines); handlers run on a thread
// pool, and the coroutine waits for them without holding a thread.
#include "http/server.h"

#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange
// std::string_view in Beast's interfaces.
#define BOOST_BEAST_USE_STD_STRING_VIEW 1

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "http/admission.h"
#include "http/message.h"

namespace dial::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using net::awaitable;

std::chrono::steady_clock::duration Steady(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

struct Route {
  std::string method, path;
  bool prefix = false;
  Handler handler;
};

// Whether the client of a stream has gone (set on the I/O thread).
struct ClientWatch {
  std::atomic<bool> gone{false};
  std::function<void()> cancel;
};

// Collects what a stream's producer writes in one call; refuses once the
// client has gone.
class BufferSink : public Sink {
 public:
  BufferSink(std::string& out, const std::atomic<bool>& gone)
      : out_(out), gone_(gone) {}
  bool Write(absl::string_view data) override {
    if (gone_) return false;
    out_.append(data.data(), data.size());
    return true;
  }

 private:
  std::string& out_;
  const std::atomic<bool>& gone_;
};

// After refusing a request whose rest is unread: closing at once would
// answer the client's next bytes with a reset, which can destroy the
// answer before the client reads it. Half-close, then read and drop what
// still comes for a moment (bounded in time and in bytes).
template <typename Stream>
awaitable<void> Linger(Stream& stream) {
  auto& lowest = beast::get_lowest_layer(stream);
  beast::error_code ec;
  lowest.socket().shutdown(tcp::socket::shutdown_send, ec);
  char scrap[4096];
  size_t dropped = 0;
  lowest.expires_after(std::chrono::seconds(2));
  while (!ec && dropped < (4u << 20)) {
    dropped += co_await lowest.async_read_some(
        net::buffer(scrap), net::redirect_error(net::use_awaitable, ec));
  }
}

Response Plain(int status, std::string message) {
  Response r;
  r.status = status;
  r.set_content(std::move(message) + "\n", "text/plain");
  return r;
}

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        pool(static_cast<size_t>(std::max(1, options.handler_threads))) {}

  // Runs `fn` on the pool; the coroutine resumes on the I/O thread after.
  template <typename Fn>
  auto OnPool(Fn fn) {
    return net::async_initiate<decltype(net::use_awaitable), void()>(
        [this, fn = std::move(fn)](auto handler) mutable {
          net::post(pool, [this, fn = std::move(fn),
                           handler = std::move(handler)]() mutable {
            // An exception here would end the process (asio's pool calls
            // std::terminate); callers start from a failed result (500,
            // kFail), which is what stands then.
            try {
              fn();
            } catch (...) {
            }
            net::post(io, std::move(handler));
          });
        },
        net::use_awaitable);
  }

  const Route* FindRoute(const std::string& method,
                         const std::string& path) const {
    const std::string& m = method == "HEAD" ? std::string("GET") : method;
    const Route* best = nullptr;
    for (const Route& r : routes) {
      if (r.method != m) continue;
      if (!r.prefix && r.path == path) return &r;
      if (r.prefix && path.compare(0, r.path.size(), r.path) == 0 &&
          (best == nullptr || r.path.size() > best->path.size())) {
        best = &r;
      }
    }
    return best;
  }

  // Routing and the handler, on a pool thread.
  Response Handle(const Request& request) {
    Response response;
    const Route* route = FindRoute(request.method, request.path);
    try {
      if (route != nullptr) {
        route->handler(request, response);
      } else if (!mount.empty() &&
                 (request.method == "GET" || request.method == "HEAD")) {
        ServeFile(mount, request.path, response);
      } else {
        response = Plain(404, "not found");
      }
      if (!response.next && response.body.size() >= 256 &&
          !response.header("Content-Encoding").size() &&
          Compressible(response.header("Content-Type")) &&
          AcceptsGzip(request.header("Accept-Encoding"))) {
        response.body = Gzip(response.body);
        response.set_header("Content-Encoding", "gzip");
        response.set_header("Vary", "Accept-Encoding");
      }
    } catch (...) {
      // A stream set up before the throw still gets its clean-up.
      if (response.closed) {
        try {
          response.closed();
        } catch (...) {
        }
      }
      response = Plain(500, "internal error");
    }
    return response;
  }

  template <typename Stream>
  awaitable<void> Serve(Stream& stream, std::string remote, std::string key);
  template <typename Stream>
  awaitable<bool> Send(Stream& stream, const Request& request,
                       Response& response, bool keep_alive);
  awaitable<void> Accept();
  // A connection Stop can cut, for as long as it is served.
  struct Live {
    Live(Impl& impl, beast::tcp_stream& stream) : impl(impl), stream(&stream) {
      impl.live.insert(this->stream);
    }
    ~Live() { impl.live.erase(stream); }
    Impl& impl;
    beast::tcp_stream* stream;
  };
  // Called on the I/O thread as each connection's coroutine ends.
  void Ended(const std::string& key) {
    connections.Release(key);
    if (stopping && connections.total() == 0 && !drained.HasBeenNotified()) {
      drained.Notify();
    }
  }
  awaitable<void> Connection(tcp::socket socket, std::string remote,
                             std::string key);

  ServerOptions options;
  std::vector<Route> routes;
  std::string mount;
  std::optional<net::ssl::context> tls;
  std::atomic<bool> stopping{false};
  net::thread_pool pool;
  // Only on the I/O thread; per client (AddressKey: an IPv6 /64).
  ConnectionCount connections{options.limits.max_connections,
                              options.limits.max_connections_per_address};
  std::set<beast::tcp_stream*> live;
  BodyBudget body_budget{options.limits.max_body_bytes_in_flight,
                         options.limits.max_body_bytes_in_flight_per_address};
  absl::Notification drained;  // Stop: every connection has ended
  // Last: destroyed first, with the coroutines it still holds.
  net::io_context io;
  std::optional<tcp::acceptor> acceptor;
  std::thread thread;
  bool started = false, stopped = false;
};

template <typename Stream>
awaitable<bool> Server::Impl::Send(Stream& stream, const Request& request,
                                   Response& response, bool keep_alive) {
  auto& lowest = beast::get_lowest_layer(stream);
  for (const auto& [name, value] : options.default_headers) {
    if (response.header(name).empty()) response.set_header(name, value);
  }
  if (!response.header("Connection").empty()) keep_alive = false;
  // Clients that honour it (Node's fetch) stop reusing an idle connection
  // before the head deadline closes it.
  if (keep_alive) {
    response.set_header(
        "Keep-Alive",
        absl::StrCat("timeout=",
                     absl::ToInt64Seconds(options.limits.head_timeout)));
  }
  beast::error_code ec;
  const bool head_only = request.method == "HEAD";
  if (!response.next) {
    bhttp::response<bhttp::string_body> out;
    out.result(static_cast<unsigned>(response.status));
    out.version(11);
    for (const auto& [name, value] : response.headers) out.set(name, value);
    out.keep_alive(keep_alive);
    out.content_length(response.body.size());
    if (!head_only) out.body() = std::move(response.body);
    lowest.expires_after(Steady(options.limits.write_timeout));
    co_await bhttp::async_write(stream, out,
                                net::redirect_error(net::use_awaitable, ec));
    co_return !ec && keep_alive;
  }
  // A stream: chunks as the producer gives them.
  bhttp::response<bhttp::empty_body> out;
  out.result(static_cast<unsigned>(response.status));
  out.version(11);
  for (const auto& [name, value] : response.headers) out.set(name, value);
  out.keep_alive(keep_alive);
  out.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> serializer(out);
  lowest.expires_after(Steady(options.limits.write_timeout));
  co_await bhttp::async_write_header(
      stream, serializer, net::redirect_error(net::use_awaitable, ec));
  // Nothing is read while a stream runs, so a client that goes would be
  // noticed only at the next write (a quiet watch: minutes, holding its
  // slot). The socket is watched instead: at its end the sink says so and
  // the producer's `cancel` wakes it.
  auto watch = std::make_shared<ClientWatch>();
  watch->cancel = response.cancel;
  if (!ec && !head_only) {
    const int fd = lowest.socket().native_handle();
    lowest.socket().async_wait(
        tcp::socket::wait_read, [watch, fd](const beast::error_code& e) {
          if (e) return;  // cancelled: the stream ended first
          char byte;
          const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            watch->gone = true;
            if (watch->cancel) watch->cancel();
          }
        });
  }
  bool complete = false;
  while (!ec && !head_only && !stopping && !watch->gone) {
    std::string chunk;
    StreamStep step = StreamStep::kFail;
    co_await OnPool([&] {
      BufferSink sink(chunk, watch->gone);
      step = response.next(sink);
    });
    if (watch->gone) break;
    if (!chunk.empty()) {
      lowest.expires_after(Steady(options.limits.write_timeout));
      co_await net::async_write(stream, bhttp::make_chunk(net::buffer(chunk)),
                                net::redirect_error(net::use_awaitable, ec));
    }
    if (ec || step == StreamStep::kFail) break;
    if (step == StreamStep::kDone) {
      lowest.expires_after(Steady(options.limits.write_timeout));
      co_await net::async_write(stream, bhttp::make_chunk_last(),
                                net::redirect_error(net::use_awaitable, ec));
      complete = !ec;
      break;
    }
  }
  beast::error_code ignored;
  lowest.socket().cancel(ignored);  // the watch, if still waiting
  if (response.closed) co_await OnPool([&] { response.closed(); });
  co_return complete&& keep_alive;
}

template <typename Stream>
awaitable<void> Server::Impl::Serve(Stream& stream, std::string remote,
                                    std::string key) {
  auto& lowest = beast::get_lowest_layer(stream);
  const Limits& limits = options.limits;
  // Holds the head being read (and what a client pipelined after it).
  beast::flat_buffer buffer(limits.max_head_bytes + 4096);
  for (int served = 0; served < limits.max_requests_per_connection; ++served) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(limits.max_head_bytes));
    // The body's length is judged with the head (CheckBodyHeaders, which
    // answers 413), not by the parser, which would fail the head.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::error_code ec;
    if (stopping) co_return;
    // The first head's deadline runs from the connection (a TLS handshake
    // set it already); each later one from the end of the last answer.
    if (served > 0 || !tls) lowest.expires_after(Steady(limits.head_timeout));
    co_await bhttp::async_read_header(
        stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec == bhttp::error::header_limit ||
        ec == bhttp::error::buffer_overflow) {
      Request none;
      Response refused =
          Plain(431, absl::StrCat("the request line and headers are over "
                                  "the limit of ",
                                  limits.max_head_bytes, " bytes"));
      co_await Send(stream, none, refused, false);
      co_await Linger(stream);
      co_return;
    }
    if (ec && ec != bhttp::error::end_of_stream && ec != net::error::eof &&
        ec != beast::error::timeout && ec != net::error::operation_aborted &&
        buffer.size() > 0) {
      Request none;
      Response refused = Plain(400, "malformed request");
      co_await Send(stream, none, refused, false);
      co_await Linger(stream);
      co_return;
    }
    if (ec) co_return;  // gone, idle or too slow: no answer
    const auto& head = parser.get();
    Request request;
    request.method = std::string(head.method_string());
    request.target = std::string(head.target());
    request.remote_addr = remote;
    for (const auto& field : head) {
      request.headers.emplace_back(std::string(field.name_string()),
                                   std::string(field.value()));
    }
    // The last request a connection may carry is answered with
    // "Connection: close", so the client does not send another on it.
    const bool keep_alive =
        head.keep_alive() && served + 1 < limits.max_requests_per_connection;
    std::optional<Response> early;
    if (!ParseTarget(request.target, request.path, request.params)) {
      early = Plain(400, "request target: not a path, or a bad %-escape");
    }
    if (!early) early = CheckBodyHeaders(request, limits.max_body_bytes);
    if (!early && parser.chunked()) {  // however the headers said it
      Request chunked;
      chunked.headers = {{"Transfer-Encoding", "chunked"}};
      early = CheckBodyHeaders(chunked, limits.max_body_bytes);
    }
    if (!early && options.check_head) early = options.check_head(request);
    if (early) {
      const bool body_follows =
          parser.content_length().value_or(0) > 0 || parser.chunked();
      if (body_follows) early->set_header("Connection", "close");
      if (co_await Send(stream, request, *early, keep_alive)) continue;
      if (body_follows) co_await Linger(stream);
      co_return;
    }
    // The bodies being read or handled share one budget, so that many
    // connections with 8 MiB bodies cannot take gigabytes between them.
    // A body takes its share as its bytes arrive (a head that only
    // announces 8 MiB holds nothing), and one client at most a part.
    BodyBudget::Share share(body_budget, key);
    if (parser.content_length().value_or(0) > 0) {
      if (absl::EqualsIgnoreCase(request.header("Expect"), "100-continue")) {
        lowest.expires_after(Steady(limits.write_timeout));
        bhttp::response<bhttp::empty_body> go{bhttp::status::continue_, 11};
        co_await bhttp::async_write(
            stream, go, net::redirect_error(net::use_awaitable, ec));
        if (ec) co_return;
        // The client sends only now: it has a head's time to start.
        lowest.expires_after(Steady(limits.head_timeout));
      }
      // Until the body starts arriving, the head's deadline still runs:
      // a head with no body is held no longer than a head alone.
      bool arriving = false;
      while (!parser.is_done()) {
        co_await bhttp::async_read_some(
            stream, buffer, parser,
            net::redirect_error(net::use_awaitable, ec));
        if (ec) co_return;  // too slow, gone, or over the limit after all
        const size_t held = parser.get().body().size() + buffer.size();
        if (!arriving && held > 0) {
          arriving = true;
          lowest.expires_after(Steady(limits.body_timeout));
        }
        if (!share.Resize(held)) {
          Response busy = Plain(
              503,
              absl::StrCat("the server is reading as many request "
                           "bodies as it may (",
                           limits.max_body_bytes_in_flight, " bytes in all, ",
                           limits.max_body_bytes_in_flight_per_address,
                           " from one address); try again shortly"));
          busy.set_header("Retry-After", "1");
          busy.set_header("Connection", "close");
          co_await Send(stream, request, busy, false);
          co_await Linger(stream);
          co_return;
        }
      }
      request.body = std::move(parser.get().body());
    }
    if (stopping) co_return;
    Response response;
    co_await OnPool([&] { response = Handle(request); });
    if (!co_await Send(stream, request, response, keep_alive)) co_return;
  }
}

awaitable<void> Server::Impl::Connection(tcp::socket socket, std::string remote,
                                         std::string key) {
  // Stop's closing of every live connection may have run before this
  // coroutine started: it would not have seen this one.
  if (stopping) co_return;
  beast::tcp_stream plain(std::move(socket));
  if (!tls) {
    Live live(*this, plain);
    co_await Serve(plain, remote, key);
  } else {
    beast::ssl_stream<beast::tcp_stream> secure(std::move(plain), *tls);
    Live live(*this, beast::get_lowest_layer(secure));
    // The handshake and the first request's head share one deadline.
    beast::get_lowest_layer(secure).expires_after(
        Steady(options.limits.head_timeout));
    beast::error_code ec;
    co_await secure.async_handshake(
        net::ssl::stream_base::server,
        net::redirect_error(net::use_awaitable, ec));
    if (!ec) co_await Serve(secure, remote, key);
  }
}

awaitable<void> Server::Impl::Accept() {
  auto refusal = [](const std::string& says) {
    return absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
        "Content-Type: text/plain\r\nRetry-After: 1\r\nContent-Length: ",
        says.size() + 1, "\r\n\r\n", says, "\n");
  };
  const std::string server_full = refusal(absl::StrCat(
      "the server holds as many connections as it may (",
      options.limits.max_connections, " in all); try again shortly"));
  const std::string client_full =
      refusal(absl::StrCat("too many connections from this address (",
                           options.limits.max_connections_per_address,
                           " at once per IPv4 address or IPv6 /64)"));
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(
        net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || stopping) co_return;
    if (ec) {
      // E.g. out of descriptors: the connection stays in the backlog, and
      // accepting again at once would spin. A moment, then again.
      net::steady_timer pause(io, std::chrono::milliseconds(100));
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    beast::error_code ignored;
    tcp::endpoint peer = socket.remote_endpoint(ignored);
    net::ip::address address = peer.address();
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
      address = net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
    }
    std::string remote = address.to_string();
    std::string key = AddressKey(remote);
    const ConnectionCount::Admit admit = connections.Take(key);
    if (admit != ConnectionCount::Admit::kYes) {
      // A short answer if the socket takes it at once, and gone; it says
      // which cap was met.
      const std::string& busy = admit == ConnectionCount::Admit::kServerFull
                                    ? server_full
                                    : client_full;
      // Plain text means nothing to a TLS client: it is only closed.
      if (!tls) {
        socket.non_blocking(true, ignored);
        socket.write_some(net::buffer(busy), ignored);
      }
      socket.close(ignored);
      continue;
    }
    net::co_spawn(io, Connection(std::move(socket), remote, key),
                  [this, key](std::exception_ptr) { Ended(key); });
  }
}

Server::Server(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { Stop(); }

void Server::Get(const std::string& path, Handler handler) {
  const bool prefix = !path.empty() && path.back() == '*';
  impl_->routes.push_back({"GET",
                           prefix ? path.substr(0, path.size() - 1) : path,
                           prefix, std::move(handler)});
}

void Server::Post(const std::string& path, Handler handler) {
  const bool prefix = !path.empty() && path.back() == '*';
  impl_->routes.push_back({"POST",
                           prefix ? path.substr(0, path.size() - 1) : path,
                           prefix, std::move(handler)});
}

absl::Status Server::Mount(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a directory"));
  }
  impl_->mount = dir;
  return absl::OkStatus();
}

absl::StatusOr<int> Server::Start() {
  Impl& s = *impl_;
  const std::string& flag = s.options.listen_flag;
  const std::string& listen = s.options.listen;
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", listen, "' must be host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  if (s.options.tls_cert.empty() != s.options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key: give both or neither");
  }
  if (!s.options.tls_cert.empty()) {
    s.tls.emplace(net::ssl::context::tls_server);
    beast::error_code ec;
    s.tls->set_options(
        net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
            net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
            net::ssl::context::no_tlsv1_1,
        ec);
    if (!ec) s.tls->use_certificate_chain_file(s.options.tls_cert, ec);
    if (!ec) {
      s.tls->use_private_key_file(s.options.tls_key, net::ssl::context::pem,
                                  ec);
    }
    if (!ec && !s.options.tls_client_ca.empty()) {
      s.tls->load_verify_file(s.options.tls_client_ca, ec);
      if (!ec) {
        s.tls->set_verify_mode(
            net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert, ec);
      }
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": cannot serve TLS with --tls-cert/--tls-key",
          s.options.tls_client_ca.empty() ? "" : "/--tls-client-ca", ": ",
          ec.message()));
    }
  }
  beast::error_code ec;
  tcp::resolver resolver(s.io);
  auto found =
      resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || found.empty()) {
    return absl::UnavailableError(
        absl::StrCat(flag, ": cannot listen on ", listen, ": ", ec.message()));
  }
  tcp::endpoint endpoint = found.begin()->endpoint();
  s.acceptor.emplace(s.io);
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat(flag, ": cannot listen on ", listen, ": ", ec.message()));
  }
  const int bound = s.acceptor->local_endpoint().port();
  net::co_spawn(s.io, s.Accept(), net::detached);
  s.started = true;
  s.thread = std::thread([&s] {
    auto work = net::make_work_guard(s.io);
    s.io.run();
  });
  return bound;
}

void Server::Stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.stopping = true;
  // No new connections, and every open one cut: each coroutine ends once
  // the handler it waits for (if any) returns; long streams must have
  // been ended by their owners.
  net::post(s.io, [&s] {
    beast::error_code ignored;
    s.acceptor->close(ignored);
    for (beast::tcp_stream* stream : s.live) stream->close();
    if (s.connections.total() == 0 && !s.drained.HasBeenNotified()) {
      s.drained.Notify();
    }
  });
  s.drained.WaitForNotification();
  s.pool.join();
  s.io.stop();
  s.thread.join();
}

}  // namespace dial::http
