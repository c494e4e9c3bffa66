// The bounds the scheduler's gRPC port keeps before any token is checked
// (docs/security.md, "Limits"): gRPC reads a whole request message before
// a handler sees its token, so what an anonymous client can make the
// scheduler hold must be bounded by the transport itself: memory in all,
// streams per connection, the time to finish a handshake, and how long a
// connection may stay idle or open. Thread-safe: plain values and a pure
// function.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace grpc {
class ServerBuilder;
}

namespace dial::scheduler {

struct GrpcLimits {
  // Memory gRPC may use for connections and messages in flight, all
  // together (a grpc::ResourceQuota): over it, windows shrink and calls and
  // connections are shed instead of the process growing.
  int64_t memory_bytes = int64_t{256} << 20;
  // Streams (calls) open at once on one connection.
  int32_t max_concurrent_streams = 1024;
  // From accepting a connection to the end of its (TLS and HTTP/2)
  // handshake.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A connection with no call open this long is closed.
  absl::Duration max_connection_idle = absl::Minutes(10);
  // A connection is asked to go (GOAWAY) after this long, and closed, with
  // whatever it still has open, after the grace (clients reconnect).
  absl::Duration max_connection_age = absl::Hours(24);
  absl::Duration max_connection_age_grace = absl::Minutes(5);
};

// Sets `limits`, and the message size limits of common/message_limits.h,
// on `builder`.
void ApplyGrpcLimits(const GrpcLimits& limits, grpc::ServerBuilder& builder);

}  // namespace dial::scheduler
