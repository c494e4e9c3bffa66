// Binding an httplib server to a --*-listen flag's "host:port" ([v6]:port
// too; port 0 picks a free one), shared by the scheduler's HTTP edge and
// the worker's /metrics.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace dial {

// The port bound. INVALID_ARGUMENT naming `flag` when `listen` is not
// host:port; UNAVAILABLE when it cannot be bound.
absl::StatusOr<int> BindHttp(httplib::Server& server, const std::string& listen,
                             const std::string& flag);

}  // namespace dial
