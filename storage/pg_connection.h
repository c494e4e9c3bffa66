// PgConnection: one libpq connection to PostgreSQL, with parameters and
// results in binary, errors mapped to absl codes, and a reconnect (with
// backoff) when the connection is lost. Not thread-safe: its owner
// serializes calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct pg_conn;
struct pg_result;

namespace dial::storage {

// Where the database is: a postgresql:// URL, and the password kept out
// of it (from --db-password-file; empty: libpq's own, e.g. PGPASSFILE).
struct PgTarget {
  std::string url;
  std::string password;
};

// Whether `db` names PostgreSQL (postgresql:// or postgres://).
bool IsPostgresUrl(absl::string_view db);
// INVALID_ARGUMENT naming the flag when `url` is not one PgConnection
// takes: not postgresql://, or with a password in it (it would show in
// argv and process lists: use --db-password-file or PGPASSFILE).
absl::Status CheckPostgresUrl(absl::string_view url);
// The URL without its query string, for messages and logs.
std::string DescribeUrl(absl::string_view url);

// A query's parameters ($1, $2, ...), sent in binary.
class PgParams {
 public:
  PgParams& Int(int64_t v);
  PgParams& Double(double v);
  PgParams& Bytes(absl::string_view v);  // bytea
  PgParams& Text(absl::string_view v);   // text
  size_t size() const { return values_.size(); }

 private:
  friend class PgConnection;
  // The values as libpq takes them: pointers, lengths, formats (binary).
  struct Wire {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
  };
  Wire ToWire() const;
  std::vector<std::string> values_;
  std::vector<unsigned int> types_;
};

// A query's rows, in binary: read each column as the type it has (bigint,
// double precision, bytea or text).
class PgResult {
 public:
  explicit PgResult(pg_result* result);
  ~PgResult();
  PgResult(PgResult&& other) noexcept;
  PgResult& operator=(PgResult&&) = delete;
  int rows() const;
  // Rows a command changed (INSERT, UPDATE, DELETE).
  int64_t affected() const;
  bool IsNull(int row, int col) const;
  int64_t Int(int row, int col) const;
  double Double(int row, int col) const;
  std::string Bytes(int row, int col) const;  // bytea or text

 private:
  friend class PgConnection;
  pg_result* result_;
};

class PgConnection {
 public:
  // Connects; a bad URL, wrong credentials, a missing database or one
  // that does not answer within `connect_timeout` are clear errors.
  // With `io_timeout`, a call whose packets go unanswered that long fails
  // (TCP user timeout) instead of waiting for the kernel to give up.
  static absl::StatusOr<std::unique_ptr<PgConnection>> Open(
      const PgTarget& target,
      absl::Duration connect_timeout = absl::Seconds(10),
      absl::Duration io_timeout = absl::ZeroDuration());
  ~PgConnection();

  // Runs one statement with `params`. Codes: ALREADY_EXISTS for a unique
  // violation, UNAVAILABLE when the connection is lost (it is re-made at
  // the next call), INTERNAL otherwise; the message has the server's.
  absl::StatusOr<PgResult> Exec(absl::string_view sql,
                                const PgParams& params = PgParams());
  // Runs statements without parameters (a migration).
  absl::Status ExecScript(absl::string_view sql);
  // Statements run on every new connection from now on (session settings),
  // and at once on the current one.
  absl::Status SetOnConnect(const std::string& sql);

  // Pipelined statements (group commit): Send queues one without waiting
  // for its answer; Settle, which every other call makes first, waits for
  // all those sent. A statement that failed, or changed other than
  // `affected` rows (-1: any), fails the Settle (INTERNAL, or UNAVAILABLE
  // for a lost connection), and its transaction is no good from then on:
  // InGoodTransaction is false and Commit rolls it back.
  absl::Status Send(absl::string_view sql, const PgParams& params,
                    int64_t affected);
  absl::Status Settle();

  // A transaction by hand (group commit): Commit is UNAVAILABLE when the
  // connection dropped in it (the change may or may not be stored) and
  // INTERNAL when the transaction had failed (the server rolled it back);
  // Rollback returns `why`.
  // `pipelined`: BEGIN is sent (Send) rather than waited for.
  absl::Status Begin(bool pipelined = false);
  absl::Status Commit();
  absl::Status Rollback(absl::Status why);
  // Connections made so far: a transaction begun on one is gone once this
  // changes.
  uint64_t connections() const { return connections_; }
  // In a transaction that no statement has failed.
  bool InGoodTransaction() const;
  // For tests: the connection fails as if the network dropped it.
  void DropForTesting();

  // BEGIN; `body`; COMMIT if it returned OK, else ROLLBACK and its error.
  // A COMMIT that may or may not have happened (the connection dropped) is
  // UNAVAILABLE with a message that says so.
  template <typename Fn>
  absl::Status Transaction(Fn&& body) {
    absl::Status status = Begin();
    if (!status.ok()) return status;
    status = body();
    return status.ok() ? Commit() : Rollback(status);
  }

 private:
  PgConnection(const PgTarget& target, absl::Duration timeout,
               absl::Duration io_timeout)
      : target_(target), timeout_(timeout), io_timeout_(io_timeout) {}
  // Makes the connection if there is none (or a lost one); UNAVAILABLE
  // while the server does not answer, at most one try per backoff step.
  absl::Status Connect();
  absl::Status StatusOf(pg_result* result, absl::string_view sql);
  // The name `sql` is prepared under, preparing it (at once, or pipelined
  // with `send`) if it is not yet; nullptr when too many are.
  const std::string* Prepared(const std::string& sql, const PgParams& params,
                              bool send, absl::Status& status);
  // The connection is gone: made again at the next call.
  absl::Status Lost(absl::string_view what);

  PgTarget target_;
  absl::Duration timeout_;
  absl::Duration io_timeout_;
  pg_conn* conn_ = nullptr;
  std::string on_connect_;
  absl::Time next_try_ = absl::InfinitePast();
  absl::Duration backoff_ = absl::Milliseconds(50);
  uint64_t connections_ = 0;
  // Prepared statements of this connection: SQL text -> name.
  static constexpr size_t kMaxPrepared = 256;
  std::unordered_map<std::string, std::string> prepared_;
  uint64_t names_ = 0;
  // What each statement sent and not yet settled must come to.
  struct Expected {
    int64_t affected;  // rows; -1: any
    bool prepare;      // the Parse of a statement, not one to run
    std::string sql;
  };
  std::vector<Expected> expected_;
  // Settle sends a Sync this often at least, so neither side's buffers
  // fill with answers nobody reads.
  static constexpr size_t kMaxUnsettled = 1024;
  // Why the open transaction is no good (a pipelined statement failed);
  // OK otherwise. Cleared when the transaction ends.
  absl::Status broken_;
};

}  // namespace dial::storage
