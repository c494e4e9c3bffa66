#include "worker/scheduler_client.h"

#include <grpcpp/grpcpp.h>

#include "common/grpc_status.h"
#include "dial/v1/service.grpc.pb.h"

namespace dial::worker {
namespace {

class GrpcSchedulerClient : public SchedulerClient {
 public:
  GrpcSchedulerClient(std::shared_ptr<grpc::Channel> channel,
                      absl::Duration timeout)
      : stub_(v1::WorkerService::NewStub(channel)), timeout_(timeout) {}

  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::RegisterWorkerRequest& request) override {
    return Call(&v1::WorkerService::Stub::RegisterWorker, request,
                v1::RegisterWorkerResponse(), timeout_);
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    return Call(&v1::WorkerService::Stub::Heartbeat, request,
                v1::HeartbeatResponse(), timeout_);
  }
  absl::StatusOr<v1::AcquireTrialResponse> Acquire(
      const v1::AcquireTrialRequest& request) override {
    // The scheduler holds the call up to wait_ms; leave room past it.
    return Call(&v1::WorkerService::Stub::AcquireTrial, request,
                v1::AcquireTrialResponse(),
                absl::Milliseconds(request.wait_ms()) + timeout_);
  }
  absl::StatusOr<v1::ReportProgressResponse> Report(
      const v1::ReportProgressRequest& request) override {
    return Call(&v1::WorkerService::Stub::ReportProgress, request,
                v1::ReportProgressResponse(), timeout_);
  }
  absl::Status Finish(const v1::FinishTrialRequest& request) override {
    return Call(&v1::WorkerService::Stub::FinishTrial, request,
                v1::FinishTrialResponse(), timeout_)
        .status();
  }

 private:
  template <typename Method, typename Request, typename Response>
  absl::StatusOr<Response> Call(Method method, const Request& request,
                                Response response, absl::Duration timeout) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    grpc::Status status = ((*stub_).*method)(&ctx, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  std::unique_ptr<v1::WorkerService::Stub> stub_;
  absl::Duration timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerClient>> NewGrpcSchedulerClient(
    const GrpcSchedulerClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("--scheduler: address is required");
  }
  auto channel = grpc::CreateChannel(options.target,
                                     grpc::InsecureChannelCredentials());
  return std::unique_ptr<SchedulerClient>(
      new GrpcSchedulerClient(std::move(channel), options.timeout));
}

}  // namespace dial::worker
