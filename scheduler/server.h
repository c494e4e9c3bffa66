// SchedulerServer wires the core and its gRPC services into one running
// server (with health checking and reflection). Used by dial-scheduler and by
// in-process integration tests. Thread-safe after Create.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "auth/token_table.h"
#include "common/metrics.h"
#include "scheduler/core.h"
#include "scheduler/grpc_limits.h"
#include "storage/checkpoint_store.h"
#include "storage/study_store.h"
#include "transfer/checkpoint_depot.h"

namespace grpc {
class Channel;
class Server;
class ServerCredentials;
}  // namespace grpc

namespace dial::scheduler {

class StudyServiceImpl;
class WorkerServiceImpl;
class CheckpointServiceImpl;

struct SchedulerServerOptions {
  storage::StudyStore* store = nullptr;   // required, not owned
  std::string listen = "127.0.0.1:7070";  // port 0 picks a free one
  // Principals by token (--auth-tokens); null: no authentication, every
  // caller is the anonymous admin, and only loopback addresses are allowed.
  // Not owned.
  const auth::TokenTable* tokens = nullptr;
  // PEM files: the server's certificate chain and key (TLS), and a CA that
  // client certificates must chain to (mTLS: required when set).
  std::string tls_cert = "";
  std::string tls_key = "";
  std::string tls_client_ca = "";
  // Allow a plaintext non-loopback listen address (tokens still required).
  bool insecure_allow_remote = false;
  const Clock* clock = nullptr;
  absl::Duration worker_lease = absl::Seconds(10);
  storage::CheckpointStore* checkpoints = nullptr;  // for retention
  // Serves CheckpointService (uploads and downloads for hosts without a
  // shared filesystem) over this root; empty: not served.
  std::string checkpoint_root = "";
  // Core options passed through (backups, limits).
  std::string backup_dir = "";
  Limits limits = Limits{};
  int suggestion_threads = 0;  // 0: one per core
  // Owners' quotas (--quotas); null: the default for everyone. Not owned.
  const Quotas* quotas = nullptr;
  absl::Duration fair_share_half_life = absl::Hours(24 * 7);
  absl::Duration preempt_grace = absl::Seconds(30);
  absl::Duration preempt_min_run = absl::Seconds(60);
  bool fair_share_preempt = false;
  // Counts and times every call into it (dial_grpc_server_*), and the
  // core's gauges (studies, trials by state, workers); null: no metrics.
  // Not owned; outlives the server.
  metrics::Registry* metrics = nullptr;
  // What the gRPC port lets any connection hold (--grpc-*).
  GrpcLimits grpc_limits = GrpcLimits{};
};

// The server credentials `options` ask for: TLS (with client certificates
// when tls_client_ca is set) or plaintext. INVALID_ARGUMENT for a partial
// TLS setup; the error of a file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const SchedulerServerOptions& options);

class SchedulerServer {
 public:
  // INVALID_ARGUMENT for a listen address CheckListenAddress refuses or an
  // incomplete TLS setup; NOT_FOUND for an unreadable PEM file;
  // UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Create(
      const SchedulerServerOptions& options);
  ~SchedulerServer();

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  SchedulerCore* core() { return core_.get(); }
  // A channel to this server's services inside the process (the HTTP
  // API's): the same authentication, limits and metrics, no socket.
  std::shared_ptr<grpc::Channel> InProcessChannel();

  // Stops taking calls, lets running ones finish (up to a short deadline).
  // Call from one thread only.
  void Shutdown();

 private:
  SchedulerServer() = default;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<StudyServiceImpl> study_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<transfer::CheckpointDepot> depot_;
  std::unique_ptr<CheckpointServiceImpl> checkpoint_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
};

// OK for loopback hosts (127.0.0.0/8, localhost, [::1]). Any other host
// needs authentication (`authenticated`: --auth-tokens) and, unless `tls`,
// --insecure-allow-remote; INVALID_ARGUMENT naming the missing flag.
// `flag` names the address's flag in the errors.
absl::Status CheckListenAddress(const std::string& address, bool authenticated,
                                bool tls, bool insecure_allow_remote,
                                const std::string& flag = "--listen");
// True for loopback hosts.
bool IsLoopbackListen(const std::string& address);

}  // namespace dial::scheduler
