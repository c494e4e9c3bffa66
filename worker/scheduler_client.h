// The worker's view of the scheduler: WorkerService behind an interface that
// returns absl::StatusOr, so the worker loop can be tested with a fake. The
// gRPC implementation gives every call a deadline and reuses one channel.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dial/v1/service.pb.h"

namespace dial::worker {

class SchedulerClient {
 public:
  virtual ~SchedulerClient() = default;
  virtual absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::RegisterWorkerRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) = 0;
  // Long poll: waits up to request.wait_ms for a trial.
  virtual absl::StatusOr<v1::AcquireTrialResponse> Acquire(
      const v1::AcquireTrialRequest& request) = 0;
  virtual absl::StatusOr<v1::ReportProgressResponse> Report(
      const v1::ReportProgressRequest& request) = 0;
  virtual absl::Status Finish(const v1::FinishTrialRequest& request) = 0;
};

struct GrpcSchedulerClientOptions {
  std::string target;
  absl::Duration timeout = absl::Seconds(20);  // unary calls
  // TLS (see common/grpc_channel.h): with tls_ca the channel checks the
  // scheduler's certificate; tls_cert + tls_key add a client certificate.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  // Bearer token sent with every call; empty: none.
  std::string token;
  // Allow the token in plaintext beyond loopback (--insecure).
  bool insecure = false;
};

// INVALID_ARGUMENT for an empty target or inconsistent TLS files,
// NOT_FOUND for a file that cannot be read.
absl::StatusOr<std::unique_ptr<SchedulerClient>> NewGrpcSchedulerClient(
    const GrpcSchedulerClientOptions& options);

}  // namespace dial::worker
