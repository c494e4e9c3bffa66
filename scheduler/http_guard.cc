#include "scheduler/http_guard.h"

#include <arpa/inet.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dial::scheduler {
namespace {

// The host of a Host header or an origin's authority: "[::1]:8080" ->
// "::1", "a.example:80" -> "a.example", lower case.
std::string HostOnly(std::string authority) {
  authority = absl::AsciiStrToLower(authority);
  if (absl::StartsWith(authority, "[")) {
    const size_t end = authority.find(']');
    return end == std::string::npos ? authority : authority.substr(1, end - 1);
  }
  const size_t colon = authority.rfind(':');
  return colon == std::string::npos ? authority : authority.substr(0, colon);
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// "http://a.example:8080" -> "a.example:8080"; nullopt for anything that
// is not an http(s) origin ("null", file:, ...).
std::optional<std::string> OriginAuthority(const std::string& origin) {
  for (absl::string_view scheme : {"http://", "https://"}) {
    if (absl::StartsWith(origin, scheme)) {
      std::string rest = origin.substr(scheme.size());
      if (rest.empty() || rest.find('/') != std::string::npos) break;
      return absl::AsciiStrToLower(rest);
    }
  }
  return std::nullopt;
}

}  // namespace

HttpGuard::HttpGuard(HttpGuardOptions options) : options_(std::move(options)) {}

bool HttpGuard::HostAllowed(const std::string& host) const {
  if (host.empty()) return false;
  // DNS rebinding needs a name the attacker controls: an address typed as
  // an address, and localhost, are never theirs.
  if (IsIpLiteral(host) || host == "localhost") return true;
  for (const auto& allowed : options_.allowed_hosts) {
    if (absl::AsciiStrToLower(allowed) == host || allowed == "*") return true;
  }
  return false;
}

std::optional<HttpRefusal> HttpGuard::Check(const HttpRequestHead& head) const {
  for (char c : head.path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return HttpRefusal{400, "path: control characters are not allowed"};
    }
  }
  if (!head.host || head.host->empty()) {
    return HttpRefusal{400, "Host: the header is required"};
  }
  const std::string host = HostOnly(*head.host);
  if (!HostAllowed(host)) {
    return HttpRefusal{
        421, absl::StrCat("Host: '", host.substr(0, 253),
                          "' is not a name this scheduler answers to (start "
                          "it with --http-allowed-hosts=",
                          host.substr(0, 253), " if it is yours)")};
  }
  const bool safe =
      head.method == "GET" || head.method == "HEAD" || head.method == "OPTIONS";
  if (safe) return std::nullopt;
  if (head.sec_fetch_site && *head.sec_fetch_site == "cross-site") {
    return HttpRefusal{
        403, "Sec-Fetch-Site: cross-site requests may not change anything"};
  }
  if (head.origin) {
    std::optional<std::string> authority = OriginAuthority(*head.origin);
    if (!authority || *authority != absl::AsciiStrToLower(*head.host)) {
      return HttpRefusal{
          403, absl::StrCat("Origin: '", head.origin->substr(0, 253),
                            "' is not this scheduler's origin; requests "
                            "that change something must come from its own "
                            "pages or from a client that sends no Origin")};
    }
  }
  return std::nullopt;
}

bool HttpGuard::BeginStream(const std::string& principal) {
  absl::MutexLock lock(&mu_);
  int& held = streams_[principal];
  if (held >= options_.max_streams_per_principal) {
    if (held == 0) streams_.erase(principal);
    return false;
  }
  ++held;
  return true;
}

void HttpGuard::EndStream(const std::string& principal) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(principal);
  if (it == streams_.end()) return;
  if (--it->second <= 0) streams_.erase(it);
}

}  // namespace dial::scheduler
