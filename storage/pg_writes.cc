// PgStudyStore's writes (pg_study_store.h): a transaction per write, or
// with group commit writes applied in the open transaction of one of two
// connections while the previous group's COMMIT runs on the other; and the
// leader's fence that every transaction checks last.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "storage/pg_study_store.h"
#include "storage/sqlite_group_committer.h"

namespace dial::storage {

PgStudyStore::~PgStudyStore() {
  // Its thread calls into the store: it commits what was applied, first.
  if (committer_) committer_->Stop();
}

absl::Status PgStudyStore::Write(const std::function<absl::Status()>& body,
                                 bool one_statement, const std::string& needs,
                                 const std::string& makes) {
  if (!committer_) {
    absl::Status status = conn_->Transaction([&]() -> absl::Status {
      absl::Status fenced = CheckFence(*conn_, holder_, epoch_);
      return fenced.ok() ? body() : fenced;
    });
    // The caches may hold what the rolled back transaction wrote.
    if (!status.ok()) ForgetCaches();
    return status;
  }
  // The rows a write needs may be those of the group being committed on
  // the other connection, which this one sees only once that COMMIT is
  // done: a sent write that needs them waits for it first (it would fail
  // the group), and one that found them missing tries again after it.
  if (!needs.empty() && !settled_ && written_committing_.contains(needs)) {
    mu_.Await(absl::Condition(&settled_));
  }
  absl::Status status = WriteInGroup(body, one_statement);
  for (int tries = 0; absl::IsNotFound(status) && !settled_ && tries < 4;
       ++tries) {
    mu_.Await(absl::Condition(&settled_));
    status = WriteInGroup(body, one_statement);
  }
  if (status.ok() && !makes.empty()) written_now_.insert(makes);
  return status;
}

absl::Status PgStudyStore::WriteInGroup(
    const std::function<absl::Status()>& body, bool one_statement) {
  if (!lost_.ok()) return lost_;
  if (txn_open_ && (conn_->connections() != txn_connection_ ||
                    !conn_->InGoodTransaction())) {
    // The connection dropped, or a statement (a read's, say) failed the
    // transaction: the group's writes are gone.
    txn_open_ = false;
    LoseGroup(absl::UnavailableError(
        "the open transaction was lost (connection dropped or a statement "
        "failed)"));
    return lost_;
  }
  if (!txn_open_) {
    DIAL_RETURN_IF_ERROR(conn_->Begin(/*pipelined=*/true));
    txn_open_ = true;
    txn_connection_ = conn_->connections();
  }
  absl::Status status =
      one_statement ? absl::OkStatus() : conn_->ExecScript("SAVEPOINT w");
  if (status.ok()) status = body();
  if (status.ok() && !one_statement) status = conn_->ExecScript("RELEASE w");
  if (status.ok()) {
    committer_->Applied();
    return status;
  }
  const bool same = conn_->connections() == txn_connection_;
  if (same && one_statement && conn_->InGoodTransaction()) {
    return status;  // its check failed; it changed nothing
  }
  if (same && !one_statement && conn_->ExecScript("ROLLBACK TO w").ok() &&
      conn_->ExecScript("RELEASE w").ok()) {
    return status;  // the group's other writes stay
  }
  conn_->Rollback(status).IgnoreError();
  txn_open_ = false;
  LoseGroup(status);
  return status;
}

void PgStudyStore::LoseGroup(const absl::Status& cause) {
  ForgetCaches();  // they may hold what the group wrote
  lost_ = absl::UnavailableError(absl::StrCat(
      cause.message(),
      "; the uncommitted writes before it are lost too, and writes are "
      "refused until the scheduler reloads its state"));
  lost_pending_ = true;
  committer_->Lost();
}

// The group's COMMIT runs outside the lock, on the connection the group
// was applied on; meanwhile the next group is applied on the other one.
// Reads wait for the COMMIT (settled_), so they never see the next group's
// writes without this one's.
CommittedGroup PgStudyStore::CommitGroup() {
  CommittedGroup group;
  absl::Status settle;
  PgConnection* committing = nullptr;
  bool same = false;
  std::string holder;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    group.seq = committer_->WrittenSeq();
    if (!lost_pending_ && txn_open_) {
      committing = conn_;
      // Its statements run before the next group's: once sent on the other
      // connection, those could take row locks its statements still wait
      // for, while the next group waits for this COMMIT.
      settle = conn_->Settle();
      same = conn_->connections() == txn_connection_;
      txn_open_ = false;
      conn_ = conn_ == conns_[0].get() ? conns_[1].get() : conns_[0].get();
      settled_ = false;
      written_committing_ = std::move(written_now_);
      written_now_.clear();
      holder = holder_;
      epoch = epoch_;
    }
  }
  absl::Status status = settle;
  if (committing != nullptr && status.ok()) {
    if (!same) {
      status = absl::UnavailableError(
          "the connection dropped before COMMIT: the group is lost");
    }
    // Fenced: a group checks the lease last, under a share lock held to
    // its COMMIT, so a takeover either waits for it or makes it fail.
    if (status.ok()) status = CheckFence(*committing, holder, epoch);
    if (status.ok()) status = committing->Commit();
  }
  if (committing != nullptr && !status.ok() && same) {
    committing->Rollback(status).IgnoreError();
  }
  absl::MutexLock lock(&mu_);
  settled_ = true;
  written_committing_.clear();
  if (committing != nullptr) {
    if (!status.ok()) {
      // The writes applied since built on these: they are lost too.
      if (txn_open_) conn_->Rollback(status).IgnoreError();
      txn_open_ = false;
      group.seq = committer_->WrittenSeq();
      LoseGroup(status);
    }
    group.committed = status.ok();
  }
  if (lost_pending_) {
    lost_pending_ = false;
    group.lost = lost_;
  }
  return group;
}

Durability* PgStudyStore::durability() { return committer_ ? this : nullptr; }

uint64_t PgStudyStore::WrittenSeq() const {
  return committer_ ? committer_->WrittenSeq() : 0;
}

void PgStudyStore::WhenDurable(uint64_t seq,
                               std::function<void(absl::Status)> done) {
  if (!committer_) return done(absl::OkStatus());
  committer_->WhenDurable(seq, std::move(done));
}

void PgStudyStore::SetLostHandler(std::function<void()> handler) {
  if (committer_) committer_->SetLostHandler(std::move(handler));
}

void PgStudyStore::Recover() {
  absl::MutexLock lock(&mu_);
  lost_ = absl::OkStatus();
}

void PgStudyStore::HoldCommitsForTesting(bool hold) {
  if (committer_) committer_->HoldForTesting(hold);
}

void PgStudyStore::DropConnectionForTesting() {
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  conn_->DropForTesting();
}

absl::Status PgStudyStore::SetFence(const std::string& holder, int64_t epoch,
                                    absl::Duration lease) {
  if (committer_) {
    // The last term's open group, if any, ends first: it checks the old
    // fence, so it cannot commit under the new epoch.
    absl::Notification ended;
    committer_->WhenDurable(committer_->WrittenSeq(),
                            [&ended](const absl::Status&) { ended.Notify(); });
    ended.WaitForNotification();
  }
  absl::MutexLock lock(&mu_, absl::Condition(&settled_));
  holder_ = holder;
  epoch_ = epoch;
  lost_ = absl::OkStatus();  // a new term loads the state afresh
  ForgetCaches();            // another scheduler may have written since
  const std::string timeout =
      absl::StrCat("SET idle_in_transaction_session_timeout = ",
                   std::max<int64_t>(1, absl::ToInt64Milliseconds(lease)));
  for (auto& conn : conns_) {
    if (conn) DIAL_RETURN_IF_ERROR(conn->SetOnConnect(timeout));
  }
  return absl::OkStatus();
}

absl::Status PgStudyStore::CheckFence(PgConnection& conn,
                                      const std::string& holder,
                                      int64_t epoch) {
  if (epoch == 0) return absl::OkStatus();
  DIAL_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec("SELECT 1 FROM leader WHERE id = 1 AND holder = $1 AND "
                "epoch = $2 AND expires > clock_timestamp() FOR SHARE",
                PgParams().Text(holder).Int(epoch)));
  if (r.rows() == 0) {
    return absl::UnavailableError(
        absl::StrCat("this scheduler no longer leads (its lease of epoch ",
                     epoch, " is lost): nothing was written"));
  }
  return absl::OkStatus();
}

}  // namespace dial::storage
