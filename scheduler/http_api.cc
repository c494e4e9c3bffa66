#include "scheduler/http_api.h"

#include <grpcpp/client_context.h>
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/export.h"
#include "common/json.h"
#include "dial/v1/service.grpc.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "http/admission.h"
#include "scheduler/trial_table.h"

namespace dial::scheduler {
namespace {

using Stub = v1::StudyService::Stub;
constexpr char kCookie[] = "dial_session";
// A unary call's deadline; SuggestTrials waits for the searcher.
constexpr auto kCallDeadline = std::chrono::seconds(60);
// An event stream ends after this; EventSource reconnects by itself.
constexpr auto kStreamDeadline = std::chrono::minutes(10);

// The HTTP status for a gRPC code, as Google's HTTP mapping has it.
int HttpStatus(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    default:
      return 500;
  }
}

// {"code": 5, "status": "NOT_FOUND", "message": "..."} (google.rpc.Status
// in JSON, with the code's name).
std::string ErrorJson(const absl::Status& status) {
  std::string out =
      absl::StrCat("{\"code\": ", status.raw_code(), ", \"status\": ");
  AppendJsonString(absl::StatusCodeToString(status.code()), out);
  absl::StrAppend(&out, ", \"message\": ");
  AppendJsonString(status.message(), out);
  absl::StrAppend(&out, "}\n");
  return out;
}

void SendError(http::Response& res, const absl::Status& status) {
  res.status = HttpStatus(static_cast<grpc::StatusCode>(status.raw_code()));
  if (res.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(ErrorJson(status), "application/json");
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

// A unary method: JSON request in, JSON answer out, through the stub.
using Unary = std::function<absl::StatusOr<std::string>(
    Stub&, grpc::ClientContext&, const std::string&)>;

template <typename Req, typename Resp>
Unary Route(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&,
                                      Resp*)) {
  return [rpc](Stub& stub, grpc::ClientContext& ctx,
               const std::string& body) -> absl::StatusOr<std::string> {
    Req request;
    if (!body.empty()) {
      auto parsed = google::protobuf::util::JsonStringToMessage(body, &request);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("request body: not a ", Req::descriptor()->name(),
                         " in JSON: ", parsed.message().as_string()));
      }
    }
    Resp response;
    grpc::Status s = (stub.*rpc)(&ctx, request, &response);
    if (!s.ok()) return FromGrpc(s);
    return ToJson(response);
  };
}

const std::map<std::string, Unary>& Routes() {
  static const auto* routes = new std::map<std::string, Unary>{
      {"CreateStudy", Route(&Stub::CreateStudy)},
      {"GetStudy", Route(&Stub::GetStudy)},
      {"ListStudies", Route(&Stub::ListStudies)},
      {"UpdateStudy", Route(&Stub::UpdateStudy)},
      {"StopStudy", Route(&Stub::StopStudy)},
      {"SetNote", Route(&Stub::SetNote)},
      {"DeleteStudy", Route(&Stub::DeleteStudy)},
      {"ListTrials", Route(&Stub::ListTrials)},
      {"GetTrial", Route(&Stub::GetTrial)},
      {"GetBestTrials", Route(&Stub::GetBestTrials)},
      {"EnqueueTrials", Route(&Stub::EnqueueTrials)},
      {"ReevaluateTrials", Route(&Stub::ReevaluateTrials)},
      {"GetParameterImportance", Route(&Stub::GetParameterImportance)},
      {"SuggestTrials", Route(&Stub::SuggestTrials)},
      {"ReportIntermediate", Route(&Stub::ReportIntermediate)},
      {"CompleteTrial", Route(&Stub::CompleteTrial)},
      {"BackupDatabase", Route(&Stub::BackupDatabase)},
      {"ListAuditEvents", Route(&Stub::ListAuditEvents)},
      {"ListWorkers", Route(&Stub::ListWorkers)},
      {"GetUsage", Route(&Stub::GetUsage)},
  };
  return *routes;
}

std::optional<std::string> CookieValue(const http::Request& req,
                                       absl::string_view name) {
  if (!req.has_header("Cookie")) return std::nullopt;
  for (absl::string_view part : absl::StrSplit(req.header("Cookie"), ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return std::nullopt;
}

// A call as the holder of `credential` ("Bearer <token>"), with the
// unary deadline.
void Prepare(grpc::ClientContext& ctx,
             const std::optional<std::string>& credential) {
  if (credential) ctx.AddMetadata("authorization", *credential);
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
}

// Every page of a study's trials, in number order, to `page` (which
// returns false to stop early).
absl::Status ForEachPage(
    Stub& stub, const std::optional<std::string>& credential,
    const std::string& study,
    const std::function<bool(const v1::ListTrialsResponse&)>& page) {
  v1::ListTrialsRequest request;
  request.set_study(study);
  request.set_page_size(1000);
  do {
    grpc::ClientContext ctx;
    Prepare(ctx, credential);
    v1::ListTrialsResponse response;
    grpc::Status s = stub.ListTrials(&ctx, request, &response);
    if (!s.ok()) return FromGrpc(s);
    if (!page(response)) return absl::OkStatus();
    if (!response.next_page_token().empty() &&
        response.next_page_token() == request.page_token()) {
      return absl::InternalError("ListTrials returned the same token twice");
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return absl::OkStatus();
}

absl::StatusOr<v1::StudySpec> SpecOf(
    Stub& stub, const std::optional<std::string>& credential,
    const std::string& study) {
  grpc::ClientContext ctx;
  Prepare(ctx, credential);
  v1::GetStudyRequest request;
  request.set_study(study);
  v1::GetStudyResponse response;
  grpc::Status s = stub.GetStudy(&ctx, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response.study().spec();
}

}  // namespace

absl::Status ThrottleFailure(const auth::TokenTable& tokens,
                             const std::string& client, http::Response& res) {
  const absl::Time now = absl::Now();
  const absl::Duration wait = tokens.failures().Wait(client, now);
  if (wait <= absl::ZeroDuration()) {
    tokens.failures().Failed(client, now);
    return absl::OkStatus();
  }
  const int64_t seconds =
      absl::ToInt64Seconds(absl::Ceil(wait, absl::Seconds(1)));
  res.set_header("Retry-After", std::to_string(seconds));
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many wrong tokens from this address; try again in ", seconds, " s"));
}

namespace {

bool IsJson(const http::Request& req) {
  return absl::StartsWith(req.header("Content-Type"), "application/json");
}

}  // namespace

namespace {

std::string RandomHex() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) std::abort();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

}  // namespace

SessionTable::Created SessionTable::Create(const std::string& token,
                                           const std::string& principal) {
  Created out{RandomHex(), RandomHex()};
  const std::string& id = out.id;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.expires < now || it->second.idle_expires < now) {
      if (--per_principal_[it->second.principal] == 0) {
        per_principal_.erase(it->second.principal);
      }
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  // Attack review, finding 6: the table dropped the oldest session of
  // anyone, so 10,000 logins with one worker's token ended every session.
  auto mine = per_principal_.find(principal);
  if (mine != per_principal_.end() &&
      mine->second >= kMaxSessionsPerPrincipal) {
    RemoveOldest(principal);
  } else if (sessions_.size() >= kMaxSessions) {
    auto most = per_principal_.begin();
    for (auto it = per_principal_.begin(); it != per_principal_.end(); ++it) {
      if (it->second > most->second) most = it;
    }
    if (most != per_principal_.end()) RemoveOldest(std::string(most->first));
  }
  sessions_[id] = {token, out.key, principal, now + kLifetime, now + kIdle};
  ++per_principal_[principal];
  return out;
}

void SessionTable::RemoveOldest(const std::string& principal) {
  auto oldest = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->second.principal == principal &&
        (oldest == sessions_.end() ||
         it->second.expires < oldest->second.expires)) {
      oldest = it;
    }
  }
  if (oldest == sessions_.end()) return;
  sessions_.erase(oldest);
  if (--per_principal_[principal] == 0) per_principal_.erase(principal);
}

std::optional<std::string> SessionTable::Find(const std::string& id,
                                              const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  const absl::Time now = absl::Now();
  if (it == sessions_.end() || it->second.expires < now ||
      it->second.idle_expires < now || key.size() != it->second.key.size() ||
      CRYPTO_memcmp(key.data(), it->second.key.data(), key.size()) != 0) {
    return std::nullopt;
  }
  it->second.idle_expires = now + kIdle;
  return it->second.token;
}

void SessionTable::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  const std::string principal = it->second.principal;
  sessions_.erase(it);
  if (--per_principal_[principal] == 0) per_principal_.erase(principal);
}

HttpApi::HttpApi(HttpApiOptions options) : options_(std::move(options)) {}

HttpApi::~HttpApi() { CancelStreams(); }

void HttpApi::CancelStreams() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : streams_) ctx->TryCancel();
}

bool HttpApi::AddStream(grpc::ClientContext* ctx, bool admin) {
  absl::MutexLock lock(&mu_);
  const size_t cap = admin ? kMaxStreams : kMaxStreams - kAdminStreams;
  if (cancelled_ || streams_.size() >= cap) return false;
  streams_.insert(ctx);
  return true;
}

void HttpApi::RemoveStream(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  streams_.erase(ctx);
}

std::optional<std::string> HttpApi::Credential(const http::Request& req) {
  if (req.has_header("Authorization")) {
    return req.header("Authorization");
  }
  std::optional<std::string> id = CookieValue(req, kCookie);
  if (!id) return std::nullopt;
  // Security round two, M6: the cookie alone (which every port of the host
  // receives) is not enough: the page sends the session's key too, in a
  // header, or for what a page cannot add headers to (EventSource, a
  // download link) in the query.
  std::string key = req.header("X-Dial-Session");
  if (key.empty() && req.method == "GET") key = req.param("session_key");
  std::optional<std::string> token = sessions_.Find(*id, key);
  if (!token) return std::nullopt;
  return absl::StrCat("Bearer ", *token);
}

void HttpApi::Install(http::Server& server) {
  auto stub = std::make_shared<Stub>(options_.channel);
  const auth::TokenTable* tokens = options_.tokens;

  server.Get("/api/v1/whoami", [this, tokens](const http::Request& req,
                                              http::Response& res) {
    std::optional<std::string> credential = Credential(req);
    absl::StatusOr<auth::Principal> who =
        auth::AuthenticateBearer(tokens, credential);
    if (!who.ok()) return SendError(res, who.status());
    std::string out = "{\"name\": ";
    AppendJsonString(who->name, out);
    out += ", \"role\": ";
    AppendJsonString(auth::RoleName(who->role), out);
    absl::StrAppend(
        &out, ", \"anonymous\": ", who->anonymous ? "true" : "false", "}\n");
    res.set_content(out, "application/json");
  });

  server.Post("/api/v1/login", [this, tokens](const http::Request& req,
                                              http::Response& res) {
    if (!IsJson(req)) {
      return SendError(
          res, absl::InvalidArgumentError("login: send {\"token\": ...} as "
                                          "application/json"));
    }
    google::protobuf::Struct body;
    auto field = body.fields().end();
    if (google::protobuf::util::JsonStringToMessage(req.body, &body).ok()) {
      field = body.fields().find("token");
    }
    if (field == body.fields().end() || field->second.string_value().empty()) {
      return SendError(
          res, absl::InvalidArgumentError("login: token: missing or not a "
                                          "string"));
    }
    const std::string& token = field->second.string_value();
    const std::string bearer = absl::StrCat("Bearer ", token);
    absl::StatusOr<auth::Principal> who =
        auth::AuthenticateBearer(tokens, bearer);
    // Security round two, finding 11, and attack review, finding 10: wrong
    // tokens make their client (an IPv4 address, an IPv6 /64) wait,
    // doubling; a valid token is never refused for its client's failures.
    if (!who.ok()) {
      if (tokens != nullptr) {
        absl::Status throttled =
            ThrottleFailure(*tokens, http::AddressKey(req.remote_addr), res);
        if (!throttled.ok()) return SendError(res, throttled);
      }
      return SendError(res, who.status());
    }
    // Attack review, finding 6: a worker's token (on every worker host,
    // near the trials it runs) opens no dashboard session.
    if (who->role == auth::Role::kWorker) {
      return SendError(res, absl::PermissionDeniedError(
                                "login: a worker's token cannot open a "
                                "dashboard session; log in with a user, "
                                "viewer or admin token"));
    }
    const SessionTable::Created session = sessions_.Create(token, who->name);
    std::string cookie =
        absl::StrCat(kCookie, "=", session.id,
                     "; Path=/; HttpOnly; SameSite=Strict; Max-Age=",
                     absl::ToInt64Seconds(SessionTable::kLifetime));
    if (options_.secure_cookies) cookie += "; Secure";
    res.set_header("Set-Cookie", cookie);
    res.set_header("Cache-Control", "no-store");
    std::string out = "{\"name\": ";
    AppendJsonString(who->name, out);
    out += ", \"role\": ";
    AppendJsonString(auth::RoleName(who->role), out);
    out += ", \"sessionKey\": ";
    AppendJsonString(session.key, out);
    out += "}\n";
    res.set_content(out, "application/json");
  });

  server.Post("/api/v1/logout", [this](const http::Request& req,
                                       http::Response& res) {
    if (std::optional<std::string> id = CookieValue(req, kCookie)) {
      sessions_.Remove(*id);
    }
    res.set_header("Set-Cookie", absl::StrCat(kCookie,
                                              "=; Path=/; HttpOnly; "
                                              "SameSite=Strict; Max-Age=0"));
    res.set_content("{}\n", "application/json");
  });

  server.Get("/api/v1/TrialTable", [this, stub](const http::Request& req,
                                                http::Response& res) {
    const std::string study = req.param("study");
    std::optional<std::string> credential = Credential(req);
    absl::StatusOr<v1::StudySpec> spec = SpecOf(*stub, credential, study);
    if (!spec.ok()) return SendError(res, spec.status());
    TrialTableBuilder table(*spec);
    absl::Status s = ForEachPage(*stub, credential, study,
                                 [&](const v1::ListTrialsResponse& page) {
                                   for (const auto& t : page.trials()) {
                                     table.Add(t);
                                   }
                                   return true;
                                 });
    if (!s.ok()) return SendError(res, s);
    res.set_content(table.Finish(), "application/json");
  });

  server.Get("/api/v1/ExportStudy", [this, stub](const http::Request& req,
                                                 http::Response& res) {
    const std::string study = req.param("study");
    absl::StatusOr<ExportFormat> format = ParseExportFormat(
        req.has_param("format") ? req.param("format") : std::string("csv"));
    if (!format.ok()) return SendError(res, format.status());
    const bool history =
        req.param("history") == "1" || req.param("history") == "true";
    std::optional<std::string> credential = Credential(req);
    absl::StatusOr<v1::StudySpec> spec = SpecOf(*stub, credential, study);
    if (!spec.ok()) return SendError(res, spec.status());
    // A page of trials, with their whole histories when asked for.
    auto with_history = [stub, credential, study](
                            const v1::ListTrialsResponse& page,
                            std::vector<v1::Trial>& out) -> absl::Status {
      for (const auto& t : page.trials()) {
        v1::GetTrialRequest request;
        request.set_study(study);
        request.set_trial(t.number());
        request.set_history_page_size(10000);
        v1::Trial full;
        do {
          grpc::ClientContext ctx;
          Prepare(ctx, credential);
          v1::GetTrialResponse response;
          grpc::Status s = stub->GetTrial(&ctx, request, &response);
          if (!s.ok()) return FromGrpc(s);
          if (request.history_page_token().empty()) {
            full = std::move(*response.mutable_trial());
          } else {
            for (auto& p :
                 *response.mutable_trial()->mutable_metric_history()) {
              *full.add_metric_history() = std::move(p);
            }
          }
          request.set_history_page_token(response.next_history_page_token());
        } while (!request.history_page_token().empty());
        out.push_back(std::move(full));
      }
      return absl::OkStatus();
    };
    // The CSV header names every metric: a first pass collects them.
    auto metrics = std::make_shared<std::set<std::string>>();
    if (*format == ExportFormat::kCsv) {
      absl::Status s = ForEachPage(
          *stub, credential, study, [&](const v1::ListTrialsResponse& page) {
            std::vector<v1::Trial> trials;
            if (history) {
              absl::Status h = with_history(page, trials);
              if (!h.ok()) return false;
            } else {
              trials.assign(page.trials().begin(), page.trials().end());
            }
            for (const auto& t : trials) {
              CollectExportMetrics(t, history, *metrics);
            }
            return true;
          });
      if (!s.ok()) return SendError(res, s);
    }
    res.set_header(
        "Content-Disposition",
        absl::StrCat("attachment; filename=\"", study,
                     *format == ExportFormat::kCsv ? ".csv\"" : ".jsonl\""));
    // Each call of the provider writes the next page.
    struct Cursor {
      std::string token;
      bool header_sent = false, done = false;
    };
    auto cursor = std::make_shared<Cursor>();
    v1::StudySpec spec_copy = *spec;
    const ExportFormat fmt = *format;
    res.set_stream(
        fmt == ExportFormat::kCsv ? "text/csv" : "application/x-ndjson",
        [stub, credential, study, history, metrics, cursor, spec_copy, fmt,
         with_history](http::Sink& sink) {
          if (!cursor->header_sent) {
            cursor->header_sent = true;
            std::string header =
                ExportHeader(spec_copy, *metrics, fmt, history);
            if (!header.empty() && !sink.Write(header)) {
              return http::StreamStep::kFail;
            }
            return http::StreamStep::kMore;
          }
          v1::ListTrialsRequest request;
          request.set_study(study);
          request.set_page_size(history ? 100 : 1000);
          request.set_page_token(cursor->token);
          grpc::ClientContext ctx;
          Prepare(ctx, credential);
          v1::ListTrialsResponse page;
          if (!stub->ListTrials(&ctx, request, &page).ok()) {
            return http::StreamStep::kFail;
          }
          std::vector<v1::Trial> trials;
          if (history) {
            if (!with_history(page, trials).ok()) {
              return http::StreamStep::kFail;
            }
          } else {
            trials.assign(page.trials().begin(), page.trials().end());
          }
          // JSON lines name their own metrics; the CSV's were collected.
          std::string rows =
              ExportRows(spec_copy, *metrics, trials, fmt, history);
          if (!rows.empty() && !sink.Write(rows)) {
            return http::StreamStep::kFail;
          }
          cursor->token = page.next_page_token();
          return cursor->token.empty() ? http::StreamStep::kDone
                                       : http::StreamStep::kMore;
        });
  });

  server.Get("/api/v1/WatchStudy", [this, stub](const http::Request& req,
                                                http::Response& res) {
    struct Watch {
      grpc::ClientContext ctx;
      std::unique_ptr<grpc::ClientReader<v1::WatchStudyResponse>> reader;
      v1::WatchStudyResponse first;
      bool first_sent = false, ended = false;
    };
    auto watch = std::make_shared<Watch>();
    std::optional<std::string> credential = Credential(req);
    if (credential) watch->ctx.AddMetadata("authorization", *credential);
    // Security round two, finding 11: the streams were one pool for
    // everyone; one principal holds at most a few of them.
    std::string holder;
    bool admin = options_.tokens == nullptr;
    if (options_.guard != nullptr) {
      absl::StatusOr<auth::Principal> who =
          auth::AuthenticateBearer(options_.tokens, credential);
      if (!who.ok()) return SendError(res, who.status());
      holder = who->name;
      admin = who->is_admin();
      if (!options_.guard->BeginStream(holder)) {
        return SendError(res, absl::ResourceExhaustedError(absl::StrCat(
                                  "WatchStudy: '", holder,
                                  "' has as many event streams open as one "
                                  "principal may; close one (another tab?)")));
      }
    }
    auto release = [this, holder] {
      if (options_.guard != nullptr) options_.guard->EndStream(holder);
    };
    watch->ctx.set_deadline(std::chrono::system_clock::now() + kStreamDeadline);
    // Attack review, finding 11: 4 principals filled every stream; some
    // are kept for admins.
    if (!AddStream(&watch->ctx, admin)) {
      release();
      return SendError(
          res,
          absl::ResourceExhaustedError(absl::StrCat(
              "WatchStudy: ", admin ? kMaxStreams : kMaxStreams - kAdminStreams,
              " event streams are open",
              admin ? "" : " (the rest are kept for admins)",
              "; try again later")));
    }
    v1::WatchStudyRequest request;
    request.set_study(req.param("study"));
    watch->reader = stub->WatchStudy(&watch->ctx, request);
    // The first event (the snapshot) decides the HTTP status: a refused
    // watch is an error answer, not an event stream.
    if (!watch->reader->Read(&watch->first)) {
      grpc::Status s = watch->reader->Finish();
      RemoveStream(&watch->ctx);
      release();
      return SendError(
          res, s.ok() ? absl::UnavailableError("watch ended") : FromGrpc(s));
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_stream(
        "text/event-stream",
        [watch](http::Sink& sink) {
          v1::WatchStudyResponse next;
          const v1::WatchStudyResponse* event = &watch->first;
          if (watch->first_sent) {
            if (!watch->reader->Read(&next)) {
              grpc::Status s = watch->reader->Finish();
              watch->ended = true;
              sink.Write(absl::StrCat(
                  "event: end\ndata: ", ErrorJson(FromGrpc(s)), "\n"));
              return http::StreamStep::kDone;
            }
            event = &next;
          }
          watch->first_sent = true;
          return sink.Write(absl::StrCat("data: ", ToJson(*event), "\n\n"))
                     ? http::StreamStep::kMore
                     : http::StreamStep::kFail;
        },
        [this, watch, release] {
          if (!watch->ended) {
            watch->ctx.TryCancel();
            (void)watch->reader->Finish();
          }
          RemoveStream(&watch->ctx);
          release();
        });
    // The client went: the blocked Read returns, and the slot is free.
    res.cancel = [watch] { watch->ctx.TryCancel(); };
  });

  server.Post("/api/v1/*", [this, stub](const http::Request& req,
                                        http::Response& res) {
    const std::string method = req.path.substr(std::string("/api/v1/").size());
    auto route = Routes().find(method);
    if (route == Routes().end()) {
      return SendError(res, absl::NotFoundError(absl::StrCat(
                                "/api/v1/", method.substr(0, 64),
                                ": no such method (see docs/http-api.md)")));
    }
    if (!IsJson(req)) {
      return SendError(res, absl::InvalidArgumentError(
                                "the request body must be application/json"));
    }
    grpc::ClientContext ctx;
    if (std::optional<std::string> credential = Credential(req)) {
      ctx.AddMetadata("authorization", *credential);
    }
    ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    absl::StatusOr<std::string> out = route->second(*stub, ctx, req.body);
    if (!out.ok()) return SendError(res, out.status());
    res.set_content(*out, "application/json");
  });
}

}  // namespace dial::scheduler
