// SchedulerServer wires the core and its gRPC services into one running
// server (with health checking and reflection). Used by dial-scheduler and by
// in-process integration tests. Thread-safe after Create.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "scheduler/core.h"
#include "storage/checkpoint_store.h"
#include "storage/study_store.h"

namespace grpc {
class Server;
}

namespace dial::scheduler {

class StudyServiceImpl;
class WorkerServiceImpl;

struct SchedulerServerOptions {
  storage::StudyStore* store = nullptr;   // required, not owned
  std::string listen = "127.0.0.1:7070";  // port 0 picks a free one
  // Allow a non-loopback listen address. Off until authentication exists.
  bool allow_remote = false;
  const Clock* clock = nullptr;
  absl::Duration worker_lease = absl::Seconds(10);
  storage::CheckpointStore* checkpoints = nullptr;  // for retention
};

class SchedulerServer {
 public:
  // INVALID_ARGUMENT for a remote address without allow_remote;
  // UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Create(
      const SchedulerServerOptions& options);
  ~SchedulerServer();

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  SchedulerCore* core() { return core_.get(); }

  // Stops taking calls, lets running ones finish (up to a short deadline).
  // Call from one thread only.
  void Shutdown();

 private:
  SchedulerServer() = default;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<StudyServiceImpl> study_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
};

// OK for loopback hosts (127.0.0.0/8, localhost, [::1]); INVALID_ARGUMENT
// naming --allow-remote otherwise, unless allow_remote.
absl::Status CheckListenAddress(const std::string& address, bool allow_remote);

}  // namespace dial::scheduler
