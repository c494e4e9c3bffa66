#include "http/message.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/beneath.h"

namespace dial::http {
namespace {

bool SameName(absl::string_view a, absl::string_view b) {
  return absl::EqualsIgnoreCase(a, b);
}

const std::string* FindHeader(const Headers& headers, absl::string_view name) {
  for (const auto& [key, value] : headers) {
    if (SameName(key, name)) return &value;
  }
  return nullptr;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool Decode(absl::string_view in, bool plus_is_space, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexDigit(in[i + 1]), lo = HexDigit(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (plus_is_space && in[i] == '+') {
      out += ' ';
    } else {
      out += in[i];
    }
  }
  return true;
}

std::string ContentTypeOf(absl::string_view name) {
  static const auto* types = new std::map<std::string, std::string>{
      {"html", "text/html; charset=utf-8"},
      {"js", "text/javascript; charset=utf-8"},
      {"mjs", "text/javascript; charset=utf-8"},
      {"css", "text/css; charset=utf-8"},
      {"json", "application/json"},
      {"map", "application/json"},
      {"svg", "image/svg+xml"},
      {"png", "image/png"},
      {"ico", "image/x-icon"},
      {"woff2", "font/woff2"},
      {"txt", "text/plain; charset=utf-8"},
  };
  const size_t dot = name.rfind('.');
  const size_t slash = name.rfind('/');
  if (dot != absl::string_view::npos &&
      (slash == absl::string_view::npos || dot > slash)) {
    auto it = types->find(absl::AsciiStrToLower(name.substr(dot + 1)));
    if (it != types->end()) return it->second;
  }
  return "application/octet-stream";
}

}  // namespace

bool Request::has_header(absl::string_view name) const {
  return FindHeader(headers, name) != nullptr;
}

std::string Request::header(absl::string_view name) const {
  const std::string* value = FindHeader(headers, name);
  return value ? *value : std::string();
}

bool Request::has_param(absl::string_view name) const {
  return params.find(std::string(name)) != params.end();
}

std::string Request::param(absl::string_view name) const {
  auto it = params.find(std::string(name));
  return it == params.end() ? std::string() : it->second;
}

void Response::set_content(std::string content, std::string content_type) {
  body = std::move(content);
  set_header("Content-Type", std::move(content_type));
}

void Response::set_header(std::string name, std::string value) {
  for (auto& [key, old] : headers) {
    if (SameName(key, name)) {
      old = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

std::string Response::header(absl::string_view name) const {
  const std::string* value = FindHeader(headers, name);
  return value ? *value : std::string();
}

void Response::set_stream(std::string content_type,
                          std::function<StreamStep(Sink&)> producer,
                          std::function<void()> on_closed) {
  set_header("Content-Type", std::move(content_type));
  next = std::move(producer);
  closed = std::move(on_closed);
}

std::optional<Response> CheckBodyHeaders(const Request& head,
                                         size_t max_body_bytes) {
  Response refused;
  refused.set_header("Connection", "close");
  // Every such header counts (a second one could say what the first did
  // not), and any Transfer-Encoding at all is refused.
  for (const auto& [name, value] : head.headers) {
    const std::string v =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
    if (SameName(name, "Content-Encoding") && !v.empty() && v != "identity") {
      refused.status = 415;
      refused.set_content(
          absl::StrCat("Content-Encoding: '", v.substr(0, 64),
                       "' is not accepted; send the body uncompressed\n"),
          "text/plain");
      return refused;
    }
    if (SameName(name, "Transfer-Encoding")) {
      refused.status = 411;
      refused.set_content(
          "Transfer-Encoding: chunked bodies are not accepted; send "
          "Content-Length\n",
          "text/plain");
      return refused;
    }
  }
  if (head.has_header("Content-Length")) {
    size_t length = 0;
    if (!absl::SimpleAtoi(head.header("Content-Length"), &length)) {
      refused.status = 400;
      refused.set_content("Content-Length: not a number\n", "text/plain");
      return refused;
    }
    if (length > max_body_bytes) {
      refused.status = 413;
      refused.set_content(
          absl::StrCat("Content-Length: ", length, " bytes is over the ",
                       max_body_bytes, "-byte limit\n"),
          "text/plain");
      return refused;
    }
  }
  return std::nullopt;
}

bool ParseTarget(absl::string_view target, std::string& path,
                 std::multimap<std::string, std::string>& params) {
  if (target.empty() || target.front() != '/') return false;
  const size_t question = target.find('?');
  if (!Decode(target.substr(0, question), /*plus_is_space=*/false, path)) {
    return false;
  }
  params.clear();
  if (question == absl::string_view::npos) return true;
  for (absl::string_view pair :
       absl::StrSplit(target.substr(question + 1), '&', absl::SkipEmpty())) {
    const size_t equals = pair.find('=');
    std::string key, value;
    if (!Decode(pair.substr(0, equals), true, key)) return false;
    if (equals != absl::string_view::npos &&
        !Decode(pair.substr(equals + 1), true, value)) {
      return false;
    }
    params.emplace(std::move(key), std::move(value));
  }
  return true;
}

bool AcceptsGzip(absl::string_view accept_encoding) {
  for (absl::string_view coding : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(coding, ';');
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(parts[0]), "gzip")) {
      continue;
    }
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
      double q = 1;
      if (absl::ConsumePrefix(&p, "q=") && absl::SimpleAtod(p, &q) && q <= 0) {
        return false;
      }
    }
    return true;
  }
  return false;
}

bool Compressible(absl::string_view content_type) {
  return (absl::StartsWith(content_type, "text/") &&
          !absl::StartsWith(content_type, "text/event-stream")) ||
         absl::StartsWith(content_type, "application/json") ||
         absl::StartsWith(content_type, "application/x-ndjson") ||
         absl::StartsWith(content_type, "image/svg+xml");
}

std::string Gzip(absl::string_view data) {
  z_stream z{};
  // 15 window bits + 16: the gzip wrapper.
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
               Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void ServeFile(const std::string& dir, const std::string& path,
               Response& response) {
  std::string relative = path.substr(1);
  if (relative.empty() || relative.back() == '/') relative += "index.html";
  // O_NONBLOCK: a FIFO put there would otherwise block the thread.
  absl::StatusOr<ScopedFd> fd =
      OpenBeneath(dir, relative, O_RDONLY | O_NONBLOCK);
  struct stat st {};
  if (!fd.ok() || fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    response.status = 404;
    response.set_content("not found\n", "text/plain");
    return;
  }
  std::string content(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = pread(fd->get(), content.data() + done,
                            content.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  content.resize(done);
  response.set_content(std::move(content), ContentTypeOf(relative));
}

}  // namespace dial::http
