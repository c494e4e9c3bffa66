#include "scheduler/grpc_limits.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <climits>

#include "common/message_limits.h"

namespace dial::scheduler {
namespace {

int Millis(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT_MAX));
}

}  // namespace

void ApplyGrpcLimits(const GrpcLimits& limits, grpc::ServerBuilder& builder) {
  // The largest legitimate request is an upload chunk of up to 16 MiB (a
  // manifest may use chunks that large); specs are at most 256 KiB.
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxResponseBytes);
  grpc::ResourceQuota quota("dial-scheduler");
  quota.Resize(static_cast<size_t>(limits.memory_bytes));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             limits.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             Millis(limits.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             Millis(limits.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             Millis(limits.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Millis(limits.max_connection_age_grace));
}

}  // namespace dial::scheduler
