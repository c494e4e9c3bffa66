// Dial's HTTP/1.1 server, for the scheduler's HTTP edge (/metrics, the
// JSON API, the dashboard) and a worker's /metrics. It is built on
// Boost.Beast so that every part of a request has a hard bound before it
// is read (docs/decisions.md, "The HTTP edge"):
//   - the request line and headers together (Limits::max_head_bytes: 431),
//   - the body (a Content-Length within max_body_bytes: 413; no
//     compressed (415) or chunked (411) bodies),
//   - the time to read the head, and the body (a deadline for each
//     whole part, not per read, so one byte every few seconds does not
//     keep a connection),
//   - connections in all and per client address.
// Reading and writing are asynchronous on one I/O thread, so slow or idle
// connections hold no thread; handlers run on a pool of threads and may
// block (a streamed answer is produced a piece at a time on the pool).
// TLS (with client certificates when a CA is given) is OpenSSL's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dial::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: the path and the query
  std::string path;    // percent-decoded, without the query
  std::multimap<std::string, std::string> params;  // the query, decoded
  Headers headers;
  std::string body;
  std::string remote_addr;  // the client's IP address

  // Header names compare without case; header() is "" when absent (the
  // first when repeated).
  bool has_header(absl::string_view name) const;
  std::string header(absl::string_view name) const;
  bool has_param(absl::string_view name) const;
  std::string param(absl::string_view name) const;  // "" when absent
};

// Where a streamed answer writes its pieces.
class Sink {
 public:
  virtual ~Sink() = default;
  // False once the client has gone (the stream should end).
  virtual bool Write(absl::string_view data) = 0;
};

// What a stream's producer says after each call.
enum class StreamStep {
  kMore,  // call again
  kDone,  // the answer is complete
  kFail,  // the answer cannot be completed: the connection is cut, so the
          // client sees a truncated answer, not a short complete one
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  // A streamed answer (chunked): `next` is called on a handler thread
  // until it says kDone or kFail or the client goes; `closed` runs once
  // after, whatever happened.
  std::function<StreamStep(Sink&)> next;
  std::function<void()> closed;
  // Called (on another thread, while `next` may be blocked waiting for
  // something to send) when the client of a stream has gone: `next` should
  // return soon. Optional.
  std::function<void()> cancel;

  void set_content(std::string content, std::string content_type);
  void set_header(std::string name, std::string value);  // replaces
  std::string header(absl::string_view name) const;      // "" when absent
  void set_stream(std::string content_type,
                  std::function<StreamStep(Sink&)> next,
                  std::function<void()> closed = {});
};

using Handler = std::function<void(const Request&, Response&)>;

struct Limits {
  size_t max_head_bytes = 16 << 10;  // the request line and all headers
  size_t max_body_bytes = 8 << 20;
  // Request bodies being read or handled at once, all connections
  // together, and from one client (an IPv4 address or an IPv6 /64); a
  // body takes its share as its bytes arrive, and one that does not fit is
  // answered 503 (Retry-After: 1).
  size_t max_body_bytes_in_flight = 64 << 20;
  size_t max_body_bytes_in_flight_per_address = 16 << 20;
  // The whole head of a request, from the connection (or the end of the
  // previous answer) to its last header line, and on until the first
  // bytes of its body; idle kept-alive connections close after it too.
  absl::Duration head_timeout = absl::Seconds(10);
  // The whole body, from its first bytes.
  absl::Duration body_timeout = absl::Seconds(60);
  absl::Duration write_timeout = absl::Seconds(60);  // each write
  int max_connections = 1024;
  // Per client: an IPv4 address, or an IPv6 /64 (http/admission.h).
  int max_connections_per_address = 32;
  int max_requests_per_connection = 100;
};

struct ServerOptions {
  std::string listen;             // host:port ([v6]:port too); port 0: any free
  std::string listen_flag;        // the flag named in errors: "--http-listen"
  std::string tls_cert, tls_key;  // PEM files; both or neither
  std::string tls_client_ca;      // PEM; clients must present a certificate
  Limits limits;
  int handler_threads = 16;
  // Added to every answer (security headers).
  Headers default_headers;
  // Sees each request's head (no body yet) before anything else; an answer
  // it returns is sent instead, and the body, if any, is never read.
  std::function<std::optional<Response>(const Request&)> check_head;
};

// The body of a request, judged from its headers before any of it is read:
// nullopt when it may be read, else the answer: 415 for a Content-Encoding
// other than identity, 411 for a Transfer-Encoding (chunked), 413 for a
// Content-Length over `max_body_bytes`, 400 for one that is not a number.
std::optional<Response> CheckBodyHeaders(const Request& head,
                                         size_t max_body_bytes);

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // Stop()

  // Routes, added before Start. An exact path matches first, then the
  // longest prefix route (a path ending in '*'). GET routes answer HEAD.
  void Get(const std::string& path, Handler handler);
  void Post(const std::string& path, Handler handler);
  // Serves the files below `dir` (index.html for "/") at GET paths that no
  // route takes, never through a symbolic link, typed by their names.
  // NOT_FOUND when `dir` is not a directory.
  absl::Status Mount(const std::string& dir);

  // Binds `listen` and serves; the port. INVALID_ARGUMENT for a malformed
  // address or TLS files that cannot be used, UNAVAILABLE when it cannot
  // bind.
  absl::StatusOr<int> Start();
  // Stops accepting, waits for running handlers (end long streams first),
  // and closes every connection. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dial::http
