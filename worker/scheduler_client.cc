#include "worker/scheduler_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/leader_channels.h"
#include "dial/v1/service.grpc.pb.h"

namespace dial::worker {
namespace {

class GrpcSchedulerClient : public SchedulerClient {
 public:
  GrpcSchedulerClient(std::unique_ptr<LeaderChannels> channels,
                      absl::Duration timeout, std::string token)
      : channels_(std::move(channels)),
        timeout_(timeout),
        token_(std::move(token)) {}

  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::RegisterWorkerRequest& request) override {
    return Call(&v1::WorkerService::Stub::RegisterWorker, request,
                v1::RegisterWorkerResponse(), timeout_, false);
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    // Waits for the channel (a few seconds at most, so shutdown stays
    // quick): the heartbeat thread is what drives a reconnect.
    return Call(&v1::WorkerService::Stub::Heartbeat, request,
                v1::HeartbeatResponse(), std::min(timeout_, absl::Seconds(5)),
                true);
  }
  absl::StatusOr<v1::AcquireTrialResponse> Acquire(
      const v1::AcquireTrialRequest& request) override {
    // The scheduler holds the call up to wait_ms; leave room past it.
    return Call(&v1::WorkerService::Stub::AcquireTrial, request,
                v1::AcquireTrialResponse(),
                absl::Milliseconds(request.wait_ms()) + timeout_, false);
  }
  absl::StatusOr<v1::ReportProgressResponse> Report(
      const v1::ReportProgressRequest& request) override {
    // Fails fast while the scheduler is unreachable: the relay buffers the
    // report and the trial trains on.
    return Call(&v1::WorkerService::Stub::ReportProgress, request,
                v1::ReportProgressResponse(), timeout_, false);
  }
  absl::Status Finish(const v1::FinishTrialRequest& request) override {
    return Call(&v1::WorkerService::Stub::FinishTrial, request,
                v1::FinishTrialResponse(), timeout_, true)
        .status();
  }

 private:
  template <typename Method, typename Request, typename Response>
  // `wait_for_ready`: the call waits (up to its deadline) for the channel
  // to connect instead of failing at once, and while it waits this thread
  // drives the connection. Without such a call a reconnect only advances
  // on gRPC's backup poller (every 5 s), too slowly for a TLS handshake
  // over a slow link: after a partition the worker never got back.
  absl::StatusOr<Response> Call(Method method, const Request& request,
                                Response response, absl::Duration timeout,
                                bool wait_for_ready) {
    grpc::Status status;
    // A standby's refusal goes again to the leader, at most once per
    // address (common/leader_channels.h).
    for (int attempt = 0; attempt < channels_->size(); ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      ctx.set_wait_for_ready(wait_for_ready);
      Authorize(ctx, token_);
      // On UNAVAILABLE Observe also asks the channel to connect again: an
      // idle one fails fast without reconnecting by itself.
      const LeaderChannels::Pick pick = channels_->Current();
      auto stub = v1::WorkerService::NewStub(pick.channel);
      status = ((*stub).*method)(&ctx, request, &response);
      if (!channels_->Observe(pick, status, ctx)) break;
    }
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  std::unique_ptr<LeaderChannels> channels_;
  absl::Duration timeout_;
  const std::string token_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerClient>> NewGrpcSchedulerClient(
    const GrpcSchedulerClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("--scheduler: address is required");
  }
  grpc::ChannelArguments args;  // MakeChannel sets the reconnect backoff
  ConnectOptions connect;
  connect.target = options.target;
  connect.tls_ca = options.tls_ca;
  connect.tls_cert = options.tls_cert;
  connect.tls_key = options.tls_key;
  connect.tls_server_name = options.tls_server_name;
  connect.token = options.token;
  connect.insecure = options.insecure;
  // MakeChannel sets the scheduler's message limits; the target may list a
  // leader and its standbys.
  auto channels = LeaderChannels::Create(connect, args);
  if (!channels.ok()) return channels.status();
  return std::unique_ptr<SchedulerClient>(new GrpcSchedulerClient(
      std::move(*channels), options.timeout, options.token));
}

}  // namespace dial::worker
