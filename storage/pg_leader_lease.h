// PgLeaderLease: which of the schedulers sharing one PostgreSQL database
// leads. The lease is the one row of table `leader`: its holder, the
// holder's advertised address, an epoch that grows at every takeover, and
// an expiry in the database's clock (so the schedulers' clocks do not
// matter). A standby takes the lease once it has expired; the leader renews
// it every lease / 3. Fencing is in the database: PgStudyStore::SetFence
// makes every write transaction check, under a share lock on the row, that
// the lease is still this holder's, so a leader that was paused or cut off
// can never commit after a takeover (a takeover waits for the share locks
// of the transactions in flight, and the server aborts a transaction idle
// for longer than a lease).
//
// Thread-safe: its own connection, under its own mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/pg_connection.h"

namespace dial::storage {

struct LeaseState {
  std::string holder;   // empty: nobody ever led
  std::string address;  // the holder's --advertise
  int64_t epoch = 0;
  bool expired = true;
};

class PgLeaderLease {
 public:
  struct Options {
    PgTarget target;
    std::string holder;   // this scheduler, unique among them
    std::string address;  // where clients reach it (--advertise)
    absl::Duration lease = absl::Seconds(3);
  };
  // Connects (the schema must be migrated: PgStudyStore::Create does it).
  static absl::StatusOr<std::unique_ptr<PgLeaderLease>> Create(
      const Options& options);

  // Takes the lease if it is free or expired (a new epoch), or renews it if
  // this holder has it. The epoch held; FAILED_PRECONDITION if another
  // holder's lease runs; UNAVAILABLE if the database does not answer.
  absl::StatusOr<int64_t> TryAcquire();
  // Extends this holder's lease of `epoch`. FAILED_PRECONDITION if it was
  // lost (expired, or taken over); UNAVAILABLE if the database does not
  // answer.
  absl::Status Renew(int64_t epoch);
  // Gives the lease up (a clean stop), so a standby need not wait for it
  // to expire.
  absl::Status Release(int64_t epoch);
  // The lease as the database has it now.
  absl::StatusOr<LeaseState> Read();

  const Options& options() const { return options_; }

 private:
  PgLeaderLease(const Options& options, std::unique_ptr<PgConnection> conn)
      : options_(options), conn_(std::move(conn)) {}

  const Options options_;
  absl::Mutex mu_;
  std::unique_ptr<PgConnection> conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::storage
