#include "scheduler/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/message_limits.h"
#include "common/status.h"
#include "scheduler/services.h"

namespace dial::scheduler {

absl::Status CheckListenAddress(const std::string& address, bool allow_remote) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: '", address, "' must be host:port, e.g. 127.0.0.1:7070"));
  }
  if (allow_remote) return absl::OkStatus();
  const std::string host = address.substr(0, colon);
  if (host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--listen: '", host,
      "' is not a loopback address; Dial has no authentication yet, so "
      "listening beyond this machine needs --allow-remote"));
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Create(
    const SchedulerServerOptions& options) {
  DIAL_RETURN_IF_ERROR(
      CheckListenAddress(options.listen, options.allow_remote));
  std::unique_ptr<SchedulerServer> server(new SchedulerServer());
  SchedulerCoreOptions core_options;
  core_options.store = options.store;
  core_options.clock = options.clock;
  core_options.checkpoints = options.checkpoints;
  core_options.worker_lease = options.worker_lease;
  DIAL_ASSIGN_OR_RETURN(server->core_, SchedulerCore::Create(core_options));
  server->study_service_ =
      std::make_unique<StudyServiceImpl>(server->core_.get());
  server->worker_service_ =
      std::make_unique<WorkerServiceImpl>(server->core_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(server->study_service_.get());
  builder.RegisterService(server->worker_service_.get());
  // Explicit limits (see common/message_limits.h): gRPC's defaults (4 MiB
  // in, unlimited out) are not what Dial's clients are built to expect.
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxResponseBytes);
  // Never share a port with another scheduler (gRPC sets SO_REUSEPORT by
  // default, which would split clients between two processes).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen));
  }
  server->address_ = absl::StrCat(
      options.listen.substr(0, options.listen.rfind(':')), ":", server->port_);
  return server;
}

SchedulerServer::~SchedulerServer() { Shutdown(); }

void SchedulerServer::Shutdown() {
  if (server_) {
    core_->StopWaiting();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
}

}  // namespace dial::scheduler
