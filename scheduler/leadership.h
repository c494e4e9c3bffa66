// Leadership: schedulers sharing one PostgreSQL database, one leading and
// the others standing by (docs/ha.md).
//
// - A StandbyServer holds the listen address while the scheduler does not
//   lead: health says NOT_SERVING (but for kLivenessService), and every
//   other call is UNAVAILABLE
//   with the leader's address in the trailing metadata `dial-leader`, for
//   clients to follow.
// - Leadership tries for the lease (storage::PgLeaderLease) every third of
//   a lease while standing by, and once it leads renews it as often. The
//   lease is lost when a renewal is refused, or when none got through for
//   a lease since the last one sent: the leader then stops at once, before
//   the database's fencing could refuse it anything.
//
// Thread-safe.
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/pg_leader_lease.h"
#include "storage/pg_study_store.h"

namespace grpc {
class Server;
class ServerCredentials;
class CallbackGenericService;
}  // namespace grpc

namespace dial::scheduler {

// The gRPC health service name that is SERVING while the process serves at
// all, leader or standby: a liveness probe asks for it, a readiness probe
// for the whole server (""), which only the leader passes.
inline constexpr char kLivenessService[] = "dial.live";

class StandbyServer {
 public:
  // Serves on `listen`; `leader` says where the leader is now ("" when
  // unknown), asked at each call.
  static absl::StatusOr<std::unique_ptr<StandbyServer>> Start(
      const std::string& listen,
      std::shared_ptr<grpc::ServerCredentials> credentials,
      std::function<std::string()> leader);
  ~StandbyServer();
  int port() const { return port_; }

 private:
  StandbyServer() = default;
  std::unique_ptr<grpc::CallbackGenericService> refuse_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

class Leadership {
 public:
  struct Options {
    storage::PgTarget target;
    std::string holder;     // unique among the schedulers (see HolderName)
    std::string advertise;  // HOST:PORT that clients should use for it
    absl::Duration lease = absl::Seconds(3);
  };
  static absl::StatusOr<std::unique_ptr<Leadership>> Create(
      const Options& options);
  ~Leadership();

  // Waits as a standby until this scheduler holds the lease, and returns
  // its epoch; CANCELLED once `stop` returns true (asked every third of a
  // lease). `leader` is told the leader's address (or "") at every look.
  absl::StatusOr<int64_t> WaitToLead(
      const std::function<bool()>& stop,
      const std::function<void(const std::string&)>& leader);
  // Renews the lease of `epoch` every third of a lease on a thread of its
  // own, until the lease is lost (then `lost` runs, once, on that thread)
  // or Release.
  void KeepLeading(int64_t epoch, std::function<void()> lost);
  // Stops renewing; `give_up` also frees the lease at once (a clean stop,
  // so a standby need not wait for it to run out).
  void Release(bool give_up);

  // A holder name unique to this process: host, pid and a random part.
  static std::string HolderName();

 private:
  explicit Leadership(std::unique_ptr<storage::PgLeaderLease> lease)
      : lease_(std::move(lease)) {}
  void Renewals(int64_t epoch, std::function<void()> lost);

  std::unique_ptr<storage::PgLeaderLease> lease_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread renewer_;
};

// A scheduler on PostgreSQL: stands by on `listen` until it holds the
// lease, fences the store with the epoch, runs a term (`start`: the
// scheduler's server, loading the state as a restart does; it returns what
// stops it), and when the lease is lost stops the term at once and stands
// by again. `signals` are waited for throughout (blocked by the caller):
// `handle` answers whether one means stop (SIGHUP reloads). Returns the
// process's exit code.
struct LeadOptions {
  Leadership::Options lease;  // advertise "": the bound listen address
  std::string listen;         // port 0: picked once, then kept
  std::shared_ptr<grpc::ServerCredentials> credentials;
  storage::PgStudyStore* store = nullptr;
  sigset_t signals;
  std::function<bool(int)> handle;
};
using TermStarter = std::function<absl::StatusOr<std::function<void()>>(
    const std::string& listen)>;
int RunWithLeadership(LeadOptions options, const TermStarter& start);

}  // namespace dial::scheduler
