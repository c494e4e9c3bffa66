#include "storage/pg_connection.h"

#include <endian.h>
#include <libpq-fe.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dial::storage {
namespace {

// Type OIDs of the parameters we send.
constexpr unsigned int kInt8 = 20, kText = 25, kFloat8 = 701, kBytea = 17;

const char* const kSchemes[] = {"postgresql://", "postgres://"};

}  // namespace

bool IsPostgresUrl(absl::string_view db) {
  for (const char* scheme : kSchemes) {
    if (absl::StartsWith(db, scheme)) return true;
  }
  return false;
}

namespace {

// Where a password would sit in a postgresql:// URL: the user info, up to
// the last '@' before the parameters (a raw '/' or '@' in a password is not
// valid there, but must not make one escape the checks and the masking).
// {offset of the user info, its length}; length npos when there is none.
std::pair<size_t, size_t> UserInfo(absl::string_view url) {
  const size_t scheme = url.find("//");
  if (scheme == absl::string_view::npos) return {0, absl::string_view::npos};
  const size_t start = scheme + 2;
  const size_t at = url.substr(0, url.find('?')).rfind('@');
  if (at == absl::string_view::npos || at < start) {
    return {start, absl::string_view::npos};
  }
  return {start, at - start};
}

}  // namespace

std::string DescribeUrl(absl::string_view url) {
  // Without its parameters, and with any password (which CheckPostgresUrl
  // refuses, in an error that names the URL) masked.
  url = url.substr(0, url.find('?'));
  const auto [start, length] = UserInfo(url);
  if (length == absl::string_view::npos) return std::string(url);
  const size_t colon = url.substr(start, length).find(':');
  if (colon == absl::string_view::npos) return std::string(url);
  return absl::StrCat(url.substr(0, start + colon), ":***",
                      url.substr(start + length));
}

absl::Status CheckPostgresUrl(absl::string_view url) {
  if (!IsPostgresUrl(url)) {
    return absl::InvalidArgumentError(
        "--db: a PostgreSQL database is postgresql://USER@HOST:PORT/DBNAME");
  }
  const auto [start, length] = UserInfo(url);
  if (length != absl::string_view::npos &&
      url.substr(start, length).find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "--db: the URL holds a password, which would show in the process "
        "list; put it in --db-password-file or PGPASSFILE instead");
  }
  if (absl::StrContains(url, "password=")) {
    return absl::InvalidArgumentError(
        "--db: the URL holds a password parameter, which would show in the "
        "process list; put it in --db-password-file or PGPASSFILE instead");
  }
  return absl::OkStatus();
}

PgParams& PgParams::Int(int64_t v) {
  const uint64_t be = htobe64(static_cast<uint64_t>(v));
  values_.emplace_back(reinterpret_cast<const char*>(&be), sizeof(be));
  types_.push_back(kInt8);
  return *this;
}

PgParams& PgParams::Double(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const uint64_t be = htobe64(bits);
  values_.emplace_back(reinterpret_cast<const char*>(&be), sizeof(be));
  types_.push_back(kFloat8);
  return *this;
}

PgParams& PgParams::Bytes(absl::string_view v) {
  values_.emplace_back(v);
  types_.push_back(kBytea);
  return *this;
}

PgParams& PgParams::Text(absl::string_view v) {
  values_.emplace_back(v);
  types_.push_back(kText);
  return *this;
}

PgParams::Wire PgParams::ToWire() const {
  Wire wire;
  for (const std::string& v : values_) {
    wire.values.push_back(v.data());
    wire.lengths.push_back(static_cast<int>(v.size()));
    wire.formats.push_back(1);
  }
  return wire;
}

PgResult::PgResult(pg_result* result) : result_(result) {}
PgResult::~PgResult() {
  if (result_ != nullptr) PQclear(result_);
}
PgResult::PgResult(PgResult&& other) noexcept : result_(other.result_) {
  other.result_ = nullptr;
}
int PgResult::rows() const { return PQntuples(result_); }
int64_t PgResult::affected() const {
  const char* n = PQcmdTuples(result_);
  return n[0] ? std::strtoll(n, nullptr, 10) : 0;
}
bool PgResult::IsNull(int row, int col) const {
  return PQgetisnull(result_, row, col);
}
int64_t PgResult::Int(int row, int col) const {
  const char* v = PQgetvalue(result_, row, col);
  switch (PQgetlength(result_, row, col)) {
    case 8: {
      uint64_t be;
      std::memcpy(&be, v, 8);
      return static_cast<int64_t>(be64toh(be));
    }
    case 4: {
      uint32_t be;
      std::memcpy(&be, v, 4);
      return static_cast<int32_t>(be32toh(be));
    }
    case 2: {
      uint16_t be;
      std::memcpy(&be, v, 2);
      return static_cast<int16_t>(be16toh(be));
    }
    default:
      return 0;  // NULL
  }
}
double PgResult::Double(int row, int col) const {
  const char* v = PQgetvalue(result_, row, col);
  if (PQgetlength(result_, row, col) == 4) {
    uint32_t be;
    std::memcpy(&be, v, 4);
    const uint32_t bits = be32toh(be);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (PQgetlength(result_, row, col) != 8) return 0;
  uint64_t be;
  std::memcpy(&be, v, 8);
  const uint64_t bits = be64toh(be);
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
std::string PgResult::Bytes(int row, int col) const {
  return std::string(PQgetvalue(result_, row, col),
                     PQgetlength(result_, row, col));
}

absl::StatusOr<std::unique_ptr<PgConnection>> PgConnection::Open(
    const PgTarget& target, absl::Duration connect_timeout,
    absl::Duration io_timeout) {
  if (absl::Status s = CheckPostgresUrl(target.url); !s.ok()) return s;
  std::unique_ptr<PgConnection> conn(
      new PgConnection(target, connect_timeout, io_timeout));
  if (absl::Status s = conn->Connect(); !s.ok()) return s;
  return conn;
}

PgConnection::~PgConnection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

absl::Status PgConnection::Connect() {
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) {
    return absl::OkStatus();
  }
  const absl::Time now = absl::Now();
  if (now < next_try_) {
    return absl::UnavailableError(absl::StrCat(
        "database ", DescribeUrl(target_.url), " unavailable; retrying"));
  }
  if (conn_ != nullptr) PQfinish(conn_);
  const std::string timeout = absl::StrCat(
      std::max<int64_t>(1, absl::ToInt64Seconds(timeout_ + absl::Seconds(1) -
                                                absl::Nanoseconds(1))));
  std::vector<const char*> keys = {"dbname", "connect_timeout",
                                   "application_name"};
  std::vector<const char*> values = {target_.url.c_str(), timeout.c_str(),
                                     "dial-scheduler"};
  if (!target_.password.empty()) {
    keys.push_back("password");
    values.push_back(target_.password.c_str());
  }
  const std::string io_ms =
      absl::StrCat(absl::ToInt64Milliseconds(io_timeout_));
  if (io_timeout_ > absl::ZeroDuration()) {
    for (const char* k : {"tcp_user_timeout", "keepalives_idle",
                          "keepalives_interval", "keepalives_count"}) {
      keys.push_back(k);
    }
    values.push_back(io_ms.c_str());
    values.push_back("1");
    values.push_back("1");
    values.push_back("3");
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  conn_ = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    std::string why =
        conn_ != nullptr ? PQerrorMessage(conn_) : "out of memory";
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) {
      why.pop_back();
    }
    next_try_ = now + backoff_;
    backoff_ = std::min(backoff_ * 2, absl::Seconds(2));
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", DescribeUrl(target_.url), ": ", why));
  }
  backoff_ = absl::Milliseconds(50);
  ++connections_;
  prepared_.clear();  // a new session has none
  expected_.clear();
  broken_ = absl::OkStatus();
  // Notices (e.g. "relation already exists, skipping") are not for stderr.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  if (!on_connect_.empty()) {
    PgResult r(PQexec(conn_, on_connect_.c_str()));
    if (absl::Status s = StatusOf(r.result_, on_connect_); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PgConnection::SetOnConnect(const std::string& sql) {
  on_connect_ = sql;
  return ExecScript(sql);
}

absl::Status PgConnection::StatusOf(pg_result* result, absl::string_view sql) {
  const ExecStatusType st = PQresultStatus(result);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return absl::OkStatus();
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string message = PQresultErrorMessage(result);
  if (message.empty() && conn_ != nullptr) message = PQerrorMessage(conn_);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  const std::string code = state ? state : "";
  // No SQLSTATE: libpq's own error, the connection lost (the server went
  // away mid-call). It is made again at the next call.
  if (code.empty() || conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK ||
      absl::StartsWith(code, "08") || absl::StartsWith(code, "57P") ||
      absl::StartsWith(code, "53")) {
    if (conn_ != nullptr && (code.empty() || PQstatus(conn_) != CONNECTION_OK ||
                             absl::StartsWith(code, "57P"))) {
      PQfinish(conn_);
      conn_ = nullptr;
    }
    return absl::UnavailableError(
        absl::StrCat("database unavailable: ", message));
  }
  if (code == "23505") return absl::AlreadyExistsError(message);
  if (code == "40001" || code == "40P01") return absl::AbortedError(message);
  return absl::InternalError(absl::StrCat("database error ", code, ": ",
                                          message, " (in: ", sql.substr(0, 60),
                                          ")"));
}

absl::StatusOr<PgResult> PgConnection::Exec(absl::string_view sql,
                                            const PgParams& params) {
  if (absl::Status s = Settle(); !s.ok()) return s;
  if (absl::Status s = Connect(); !s.ok()) return s;
  const std::string text(sql);
  const PgParams::Wire wire = params.ToWire();
  absl::Status status;
  const std::string* prepared = Prepared(text, params, false, status);
  if (!status.ok()) return status;
  PgResult result(
      prepared != nullptr
          ? PQexecPrepared(conn_, prepared->c_str(),
                           static_cast<int>(params.size()), wire.values.data(),
                           wire.lengths.data(), wire.formats.data(),
                           /*resultFormat=*/1)
          : PQexecParams(conn_, text.c_str(), static_cast<int>(params.size()),
                         params.types_.data(), wire.values.data(),
                         wire.lengths.data(), wire.formats.data(),
                         /*resultFormat=*/1));
  // PgResult owns it either way; StatusOf reads it first.
  if (absl::Status s = StatusOf(result.result_, sql); !s.ok()) return s;
  return result;
}

// Statements run often are prepared once a connection (parsed and planned
// once); a few hundred distinct texts at most. Names are never reused, so
// one whose pipelined Parse failed is simply forgotten.
const std::string* PgConnection::Prepared(const std::string& sql,
                                          const PgParams& params, bool send,
                                          absl::Status& status) {
  if (auto it = prepared_.find(sql); it != prepared_.end()) return &it->second;
  if (prepared_.size() >= kMaxPrepared) return nullptr;
  std::string name = absl::StrCat("d", ++names_);
  if (send) {
    if (PQsendPrepare(conn_, name.c_str(), sql.c_str(),
                      static_cast<int>(params.size()),
                      params.types_.data()) != 1) {
      status = Lost("sending a statement");
      return nullptr;
    }
    expected_.push_back({-1, true, sql});
  } else {
    PgResult made(PQprepare(conn_, name.c_str(), sql.c_str(),
                            static_cast<int>(params.size()),
                            params.types_.data()));
    status = StatusOf(made.result_, sql);
    if (!status.ok()) return nullptr;
  }
  return &prepared_.emplace(sql, std::move(name)).first->second;
}

absl::Status PgConnection::Lost(absl::string_view what) {
  std::string why = conn_ != nullptr ? PQerrorMessage(conn_) : "";
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) {
    why.pop_back();
  }
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  expected_.clear();
  return absl::UnavailableError(
      absl::StrCat("database unavailable (", what, "): ", why));
}

absl::Status PgConnection::Send(absl::string_view sql, const PgParams& params,
                                int64_t affected) {
  if (absl::Status s = Connect(); !s.ok()) return s;
  if (PQpipelineStatus(conn_) == PQ_PIPELINE_OFF &&
      PQenterPipelineMode(conn_) != 1) {
    return absl::InternalError("cannot enter pipeline mode");
  }
  const std::string text(sql);
  absl::Status status;
  const std::string* prepared = Prepared(text, params, true, status);
  if (!status.ok()) return status;
  const PgParams::Wire wire = params.ToWire();
  const int sent =
      prepared != nullptr
          ? PQsendQueryPrepared(
                conn_, prepared->c_str(), static_cast<int>(params.size()),
                wire.values.data(), wire.lengths.data(), wire.formats.data(), 1)
          : PQsendQueryParams(conn_, text.c_str(),
                              static_cast<int>(params.size()),
                              params.types_.data(), wire.values.data(),
                              wire.lengths.data(), wire.formats.data(), 1);
  if (sent != 1) return Lost("sending a statement");
  expected_.push_back({affected, false, text});
  // Off to the server now, which runs it while we go on.
  if (PQflush(conn_) != 0) return Lost("sending a statement");
  return expected_.size() >= kMaxUnsettled ? Settle() : absl::OkStatus();
}

absl::Status PgConnection::Settle() {
  if (conn_ == nullptr || PQpipelineStatus(conn_) == PQ_PIPELINE_OFF) {
    expected_.clear();
    return absl::OkStatus();
  }
  if (PQpipelineSync(conn_) != 1) return broken_ = Lost("settling");
  absl::Status first;
  for (const Expected& e : expected_) {
    while (pg_result* raw = PQgetResult(conn_)) {
      PgResult r(raw);
      absl::Status s;
      const ExecStatusType st = PQresultStatus(raw);
      if (st == PGRES_PIPELINE_ABORTED) {
        s = absl::InternalError(
            "a pipelined statement was skipped after one before it failed");
      } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        s = StatusOf(raw, e.sql);
      } else if (!e.prepare && e.affected >= 0 && r.affected() != e.affected) {
        s = absl::InternalError(absl::StrCat(
            "a pipelined write changed ", r.affected(), " rows, not ",
            e.affected, " (in: ", e.sql.substr(0, 60), ")"));
      }
      if (!s.ok() && e.prepare) prepared_.erase(e.sql);
      if (!s.ok() && first.ok()) first = s;
      if (conn_ == nullptr) break;  // StatusOf found the connection lost
    }
    if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) break;
  }
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    absl::Status lost = Lost("settling");
    return broken_ = first.ok() ? lost : first;
  }
  PgResult sync(PQgetResult(conn_));
  if (sync.result_ == nullptr ||
      PQresultStatus(sync.result_) != PGRES_PIPELINE_SYNC ||
      PQexitPipelineMode(conn_) != 1) {
    absl::Status lost = Lost("leaving pipeline mode");
    return broken_ = first.ok() ? lost : first;
  }
  expected_.clear();
  if (!first.ok()) broken_ = first;
  return first;
}

absl::Status PgConnection::ExecScript(absl::string_view sql) {
  if (absl::Status s = Settle(); !s.ok()) return s;
  if (absl::Status s = Connect(); !s.ok()) return s;
  const std::string text(sql);
  PgResult result(PQexec(conn_, text.c_str()));
  return StatusOf(result.result_, sql);
}

absl::Status PgConnection::Begin(bool pipelined) {
  Settle().IgnoreError();
  broken_ = absl::OkStatus();
  return pipelined ? Send("BEGIN", PgParams(), -1) : ExecScript("BEGIN");
}

absl::Status PgConnection::Commit() {
  if (absl::Status s = Settle(); !s.ok() || !broken_.ok()) {
    // Not COMMIT: the server would commit what a failed check refused.
    return Rollback(absl::InternalError(absl::StrCat(
        "a statement of the transaction failed, so it was rolled back: ",
        (s.ok() ? broken_ : s).message())));
  }
  const bool failed = conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK &&
                      PQtransactionStatus(conn_) == PQTRANS_INERROR;
  absl::Status status = ExecScript("COMMIT");
  if (absl::IsUnavailable(status)) {
    return absl::UnavailableError(absl::StrCat(
        "the connection dropped at COMMIT: the change may or may not be "
        "stored; ",
        status.message()));
  }
  if (status.ok() && failed) {
    // The server answers COMMIT of a failed transaction with ROLLBACK.
    return absl::InternalError(
        "a statement of the transaction failed, so the server rolled it "
        "back");
  }
  return status;
}

void PgConnection::DropForTesting() {
  if (conn_ != nullptr) ::shutdown(PQsocket(conn_), SHUT_RDWR);
}

bool PgConnection::InGoodTransaction() const {
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK || !broken_.ok()) {
    return false;
  }
  // With statements in flight the server's state is known at Settle.
  return !expected_.empty() || PQtransactionStatus(conn_) == PQTRANS_INTRANS;
}

absl::Status PgConnection::Rollback(absl::Status why) {
  Settle().IgnoreError();
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) {
    ExecScript("ROLLBACK").IgnoreError();
  }
  broken_ = absl::OkStatus();
  return why;
}

}  // namespace dial::storage
