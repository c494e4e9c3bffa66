#include "scheduler/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/message_limits.h"
#include "common/status.h"
#include "scheduler/checkpoint_service.h"
#include "scheduler/grpc_limits.h"
#include "scheduler/leadership.h"
#include "scheduler/rpc_metrics.h"
#include "scheduler/services.h"

namespace dial::scheduler {

bool IsLoopbackListen(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

absl::Status CheckListenAddress(const std::string& address, bool authenticated,
                                bool tls, bool insecure_allow_remote,
                                const std::string& flag) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", address, "' must be host:port, e.g. 127.0.0.1:7070"));
  }
  if (IsLoopbackListen(address)) return absl::OkStatus();
  const std::string host = address.substr(0, colon);
  if (!authenticated) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", host,
        "' is not a loopback address: listening beyond this machine needs "
        "--auth-tokens (and TLS, --tls-cert/--tls-key); see "
        "docs/security.md"));
  }
  if (!tls && !insecure_allow_remote) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", host,
        "' is not a loopback address: serve it with TLS (--tls-cert and "
        "--tls-key), or accept plaintext tokens on the network with "
        "--insecure-allow-remote"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const SchedulerServerOptions& options) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key: give both or neither");
  }
  if (options.tls_cert.empty()) {
    if (!options.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca: client certificates need TLS (--tls-cert and "
          "--tls-key)");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl(
      options.tls_client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  DIAL_ASSIGN_OR_RETURN(pair.cert_chain, ReadSmallFile(options.tls_cert));
  DIAL_ASSIGN_OR_RETURN(pair.private_key, ReadSmallFile(options.tls_key));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options.tls_client_ca.empty()) {
    DIAL_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                          ReadSmallFile(options.tls_client_ca));
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Create(
    const SchedulerServerOptions& options) {
  DIAL_RETURN_IF_ERROR(CheckListenAddress(
      options.listen, options.tokens != nullptr, !options.tls_cert.empty(),
      options.insecure_allow_remote));
  DIAL_ASSIGN_OR_RETURN(auto credentials, ServerCredentialsFor(options));
  std::unique_ptr<SchedulerServer> server(new SchedulerServer());
  SchedulerCoreOptions core_options;
  core_options.store = options.store;
  core_options.clock = options.clock;
  core_options.checkpoints = options.checkpoints;
  core_options.worker_lease = options.worker_lease;
  core_options.backup_dir = options.backup_dir;
  core_options.limits = options.limits;
  core_options.suggestion_threads = options.suggestion_threads;
  core_options.quotas = options.quotas;
  core_options.fair_share_half_life = options.fair_share_half_life;
  core_options.preempt_grace = options.preempt_grace;
  core_options.preempt_min_run = options.preempt_min_run;
  core_options.fair_share_preempt = options.fair_share_preempt;
  if (options.metrics != nullptr) {
    core_options.on_usage = NewUsageCounters(options.metrics);
    core_options.fit_seconds =
        options.metrics
            ->AddHistogram("dial_searcher_fit_seconds",
                           "Seconds of each searcher fit (a suggestion's "
                           "model fit and choice, or a rebuild).",
                           {}, metrics::LatencyBuckets())
            ->With({});
  }
  DIAL_ASSIGN_OR_RETURN(server->core_, SchedulerCore::Create(core_options));
  server->study_service_ =
      std::make_unique<StudyServiceImpl>(server->core_.get(), options.tokens);
  server->worker_service_ =
      std::make_unique<WorkerServiceImpl>(server->core_.get(), options.tokens);
  if (!options.checkpoint_root.empty()) {
    DIAL_ASSIGN_OR_RETURN(server->depot_, transfer::CheckpointDepot::Create(
                                              {options.checkpoint_root}));
    server->checkpoint_service_ = std::make_unique<CheckpointServiceImpl>(
        server->core_.get(), server->depot_.get(), options.tokens);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &server->port_);
  builder.RegisterService(server->study_service_.get());
  builder.RegisterService(server->worker_service_.get());
  if (server->checkpoint_service_) {
    builder.RegisterService(server->checkpoint_service_.get());
  }
  // Clients send keepalive pings (every 10 s, also between calls) to
  // notice dead connections: allow them.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Explicit limits (see common/message_limits.h): gRPC's defaults (4 MiB
  // in, unlimited out) are not what Dial's clients are built to expect;
  // and bounds on what anonymous connections can hold (grpc_limits.h).
  ApplyGrpcLimits(options.grpc_limits, builder);
  if (options.metrics != nullptr) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(NewRpcMetricsInterceptorFactory(options.metrics));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    RegisterCoreGauges(server->core_.get(), options.metrics);
  }
  // Never share a port with another scheduler (gRPC sets SO_REUSEPORT by
  // default, which would split clients between two processes).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen));
  }
  // grpc.health.v1 answers for the whole server ("") on its own; name
  // each service too, so a probe may ask for the one it needs.
  if (auto* health = server->server_->GetHealthCheckService()) {
    health->SetServingStatus(v1::StudyService::service_full_name(), true);
    health->SetServingStatus(v1::WorkerService::service_full_name(), true);
    health->SetServingStatus(kLivenessService, true);
    if (server->checkpoint_service_) {
      health->SetServingStatus(v1::CheckpointService::service_full_name(),
                               true);
    }
  }
  server->address_ = absl::StrCat(
      options.listen.substr(0, options.listen.rfind(':')), ":", server->port_);
  return server;
}

SchedulerServer::~SchedulerServer() { Shutdown(); }

std::shared_ptr<grpc::Channel> SchedulerServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  args.SetMaxSendMessageSize(kMaxRequestBytes);
  return server_->InProcessChannel(args);
}

void SchedulerServer::Shutdown() {
  if (server_) {
    // Not ready from now: stopping may wait on the database (a reload
    // under the core's lock), and a readiness probe must not pass meanwhile.
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
      health->SetServingStatus(kLivenessService, true);
    }
    core_->StopWaiting();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
    server_.reset();
  }
}

}  // namespace dial::scheduler
