#include "storage/pg_leader_lease.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dial::storage {

absl::StatusOr<std::unique_ptr<PgLeaderLease>> PgLeaderLease::Create(
    const Options& options) {
  if (options.holder.empty()) {
    return absl::InvalidArgumentError("leader lease: no holder name");
  }
  if (options.lease < absl::Milliseconds(300)) {
    return absl::InvalidArgumentError(
        "--leader-lease-ms: at least 300 (it is renewed every third of it)");
  }
  // A renewal that cannot get through must fail within a third of a lease,
  // so the leader notices in time that it may have lost it.
  const absl::Duration third = options.lease / 3;
  DIAL_ASSIGN_OR_RETURN(
      std::unique_ptr<PgConnection> conn,
      PgConnection::Open(options.target, std::max(third, absl::Seconds(1)),
                         third));
  return std::unique_ptr<PgLeaderLease>(
      new PgLeaderLease(options, std::move(conn)));
}

absl::StatusOr<int64_t> PgLeaderLease::TryAcquire() {
  absl::MutexLock lock(&mu_);
  // A new epoch unless this holder's lease still runs (then a renewal).
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec(
          "UPDATE leader SET epoch = CASE WHEN holder = $1 AND expires > "
          "clock_timestamp() THEN epoch ELSE epoch + 1 END, holder = $1, "
          "address = $2, expires = clock_timestamp() + $3 * interval '1 "
          "second' WHERE id = 1 AND (holder = $1 OR expires <= "
          "clock_timestamp()) RETURNING epoch",
          PgParams()
              .Text(options_.holder)
              .Text(options_.address)
              .Double(absl::ToDoubleSeconds(options_.lease))));
  if (r.rows() == 0) {
    return absl::FailedPreconditionError("another scheduler holds the lease");
  }
  return r.Int(0, 0);
}

absl::Status PgLeaderLease::Renew(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("UPDATE leader SET expires = clock_timestamp() + $3 * "
                  "interval '1 second' WHERE id = 1 AND holder = $1 AND "
                  "epoch = $2 AND expires > clock_timestamp()",
                  PgParams()
                      .Text(options_.holder)
                      .Int(epoch)
                      .Double(absl::ToDoubleSeconds(options_.lease))));
  if (r.affected() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the lease of epoch ", epoch, " was lost"));
  }
  return absl::OkStatus();
}

absl::Status PgLeaderLease::Release(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  return conn_
      ->Exec(
          "UPDATE leader SET expires = '-infinity' WHERE id = 1 AND "
          "holder = $1 AND epoch = $2",
          PgParams().Text(options_.holder).Int(epoch))
      .status();
}

absl::StatusOr<LeaseState> PgLeaderLease::Read() {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn_->Exec("SELECT holder, address, epoch, (expires <= "
                  "clock_timestamp())::int FROM leader WHERE id = 1"));
  LeaseState state;
  if (r.rows() == 0) return state;
  state.holder = r.Bytes(0, 0);
  state.address = r.Bytes(0, 1);
  state.epoch = r.Int(0, 2);
  state.expired = r.Int(0, 3) != 0;
  return state;
}

}  // namespace dial::storage
