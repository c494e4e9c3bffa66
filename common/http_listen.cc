#include "common/http_listen.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dial {

absl::StatusOr<int> BindHttp(httplib::Server& server, const std::string& listen,
                             const std::string& flag) {
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
  const int bound = port == 0 ? server.bind_to_any_port(host)
                              : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat(flag, ": cannot listen on ", listen));
  }
  return bound;
}

}  // namespace dial
