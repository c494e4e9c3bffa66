// The one place where absl::Status and grpc::Status meet. Thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace dial {

// Same canonical code and message (absl and gRPC share the code numbering).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace dial
