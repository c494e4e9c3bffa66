#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/leader_channels.h"
#include "google/protobuf/util/time_util.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace dial::client {
namespace {

// Pages of 1000, the servers' maximum for studies and trials.
constexpr int32_t kPageSize = 1000;

// A server that hands back the token it was given would page forever.
absl::Status CheckProgress(const std::string& token, const std::string& next,
                           const char* method) {
  if (!next.empty() && next == token) {
    return absl::InternalError(absl::StrCat(
        method, ": the scheduler returned the same page token twice"));
  }
  return absl::OkStatus();
}

// This client never cancels a unary call: a CANCELLED one was cancelled by
// a scheduler whose server shut down with it in flight (a standby taking
// the lease, a leader ending its term). As UNAVAILABLE it follows the same
// failover, and callers retry it by the same rules.
grpc::Status CancelledAsUnavailable(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::CANCELLED) return status;
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      "the scheduler cancelled the call (its server shut down): " +
          status.error_message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<DialClient>> DialClient::Create(
    const DialClientOptions& options) {
  ConnectOptions connect;
  connect.target = options.target;
  connect.tls_ca = options.tls_ca;
  connect.tls_cert = options.tls_cert;
  connect.tls_key = options.tls_key;
  connect.tls_server_name = options.tls_server_name;
  connect.token = options.token;
  connect.insecure = options.insecure;
  // The target may list a leader and its standbys (common/leader_channels.h).
  auto channels = LeaderChannels::Create(connect, grpc::ChannelArguments());
  if (!channels.ok()) return channels.status();
  return std::unique_ptr<DialClient>(
      new DialClient(std::move(*channels), options.timeout, options.token));
}

DialClient::DialClient(std::unique_ptr<LeaderChannels> channels,
                       absl::Duration timeout, std::string token)
    : channels_(std::move(channels)),
      timeout_(timeout),
      token_(std::move(token)) {}

DialClient::~DialClient() = default;

void DialClient::Prepare(grpc::ClientContext& ctx) const {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  Authorize(ctx, token_);
}

absl::Status DialClient::WaitForReady(absl::Duration timeout) {
  if (channels_->Current().channel->WaitForConnected(
          absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::OkStatus();
  }
  return absl::UnavailableError("scheduler not reachable");
}

absl::Status DialClient::CheckHealth(const std::string& service) {
  using grpc::health::v1::HealthCheckResponse;
  auto health = grpc::health::v1::Health::NewStub(channels_->Current().channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  grpc::Status status = health->Check(&ctx, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  if (response.status() != HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "health: ",
        HealthCheckResponse::ServingStatus_Name(response.status())));
  }
  return absl::OkStatus();
}

// Runs one unary RPC with the client's deadline and token; a standby's
// refusal goes again to the leader (at most once per address).
#define DIAL_CALL(method, request, response)                            \
  grpc::Status grpc_status;                                             \
  for (int attempt = 0; attempt < channels_->size(); ++attempt) {       \
    grpc::ClientContext ctx;                                            \
    Prepare(ctx);                                                       \
    const LeaderChannels::Pick pick = channels_->Current();             \
    grpc_status =                                                       \
        CancelledAsUnavailable(v1::StudyService::NewStub(pick.channel)  \
                                   ->method(&ctx, request, &response)); \
    if (!channels_->Observe(pick, grpc_status, ctx)) break;             \
  }                                                                     \
  if (!grpc_status.ok()) return FromGrpcStatus(grpc_status)

absl::StatusOr<v1::Study> DialClient::CreateStudy(const v1::StudySpec& spec) {
  v1::CreateStudyRequest request;
  *request.mutable_spec() = spec;
  v1::CreateStudyResponse response;
  DIAL_CALL(CreateStudy, request, response);
  return response.study();
}

absl::StatusOr<v1::Study> DialClient::GetStudy(const std::string& study) {
  v1::GetStudyRequest request;
  request.set_study(study);
  v1::GetStudyResponse response;
  DIAL_CALL(GetStudy, request, response);
  return response.study();
}

absl::StatusOr<std::vector<v1::Study>> DialClient::ListStudies() {
  std::vector<v1::Study> out;
  std::string token;
  do {
    v1::ListStudiesRequest request;
    request.set_page_size(kPageSize);
    request.set_page_token(token);
    v1::ListStudiesResponse response;
    DIAL_CALL(ListStudies, request, response);
    for (auto& s : *response.mutable_studies()) out.push_back(std::move(s));
    auto progress =
        CheckProgress(token, response.next_page_token(), "ListStudies");
    if (!progress.ok()) return progress;
    token = response.next_page_token();
  } while (!token.empty());
  return out;
}

absl::StatusOr<v1::Study> DialClient::UpdateStudy(
    const std::string& study, int32_t max_trials, int32_t max_parallel_trials,
    std::optional<int32_t> priority) {
  v1::UpdateStudyRequest request;
  request.set_study(study);
  request.set_max_trials(max_trials);
  request.set_max_parallel_trials(max_parallel_trials);
  if (priority) request.set_priority(*priority);
  v1::UpdateStudyResponse response;
  DIAL_CALL(UpdateStudy, request, response);
  return response.study();
}

absl::StatusOr<v1::SetNoteResponse> DialClient::SetNote(
    const std::string& study, std::optional<int64_t> trial,
    const std::string& note) {
  v1::SetNoteRequest request;
  request.set_study(study);
  if (trial) request.set_trial(*trial);
  request.set_note(note);
  v1::SetNoteResponse response;
  DIAL_CALL(SetNote, request, response);
  return response;
}

absl::StatusOr<v1::Study> DialClient::StopStudy(const std::string& study) {
  v1::StopStudyRequest request;
  request.set_study(study);
  v1::StopStudyResponse response;
  DIAL_CALL(StopStudy, request, response);
  return response.study();
}

absl::Status DialClient::DeleteStudy(const std::string& study) {
  v1::DeleteStudyRequest request;
  request.set_study(study);
  v1::DeleteStudyResponse response;
  DIAL_CALL(DeleteStudy, request, response);
  return absl::OkStatus();
}

absl::StatusOr<v1::ListTrialsResponse> DialClient::ListTrials(
    const std::string& study, const std::vector<v1::TrialState>& states,
    int32_t page_size, const std::string& page_token) {
  v1::ListTrialsRequest request;
  request.set_study(study);
  for (auto s : states) request.add_states(s);
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  v1::ListTrialsResponse response;
  DIAL_CALL(ListTrials, request, response);
  return response;
}

absl::StatusOr<std::vector<v1::Trial>> DialClient::ListAllTrials(
    const std::string& study, const std::vector<v1::TrialState>& states) {
  std::vector<v1::Trial> out;
  std::string token;
  do {
    auto page = ListTrials(study, states, kPageSize, token);
    if (!page.ok()) return page.status();
    for (auto& t : *page->mutable_trials()) out.push_back(std::move(t));
    auto progress = CheckProgress(token, page->next_page_token(), "ListTrials");
    if (!progress.ok()) return progress;
    token = page->next_page_token();
  } while (!token.empty());
  return out;
}

absl::StatusOr<transfer::TransferStats> DialClient::DownloadCheckpoint(
    const std::string& study, const std::string& id, const std::string& dest) {
  transfer::GrpcCheckpointTransferOptions options;
  options.channel = channels_->Current().channel;
  options.token = token_;
  options.call_timeout = timeout_;
  options.give_up_after = std::max(timeout_, absl::Minutes(2));
  return transfer::NewGrpcCheckpointTransfer(options)->Download(study, id,
                                                                dest);
}

absl::StatusOr<v1::Trial> DialClient::GetTrial(const std::string& study,
                                               int64_t trial) {
  google::protobuf::RepeatedPtrField<v1::MetricPoint> history;
  std::string token;
  v1::GetTrialResponse response;
  do {
    v1::GetTrialRequest request;
    request.set_study(study);
    request.set_trial(trial);
    request.set_history_page_token(token);
    response.Clear();
    DIAL_CALL(GetTrial, request, response);
    for (auto& point : *response.mutable_trial()->mutable_metric_history()) {
      *history.Add() = std::move(point);
    }
    auto progress =
        CheckProgress(token, response.next_history_page_token(), "GetTrial");
    if (!progress.ok()) return progress;
    token = response.next_history_page_token();
  } while (!token.empty());
  v1::Trial out = std::move(*response.mutable_trial());
  out.mutable_metric_history()->Swap(&history);
  return out;
}

absl::StatusOr<v1::GetParameterImportanceResponse>
DialClient::GetParameterImportance(const std::string& study,
                                   double top_quantile) {
  v1::GetParameterImportanceRequest request;
  request.set_study(study);
  request.set_top_quantile(top_quantile);
  v1::GetParameterImportanceResponse response;
  DIAL_CALL(GetParameterImportance, request, response);
  return response;
}

absl::StatusOr<v1::GetBestTrialsResponse> DialClient::GetFront(
    const std::string& study, int32_t count) {
  v1::GetBestTrialsRequest request;
  request.set_study(study);
  request.set_count(count);
  v1::GetBestTrialsResponse response;
  DIAL_CALL(GetBestTrials, request, response);
  return response;
}

absl::StatusOr<v1::EnqueueTrialsResponse> DialClient::EnqueueTrials(
    const std::string& study, const std::vector<v1::QueuedTrial>& trials) {
  v1::EnqueueTrialsRequest request;
  request.set_study(study);
  for (const auto& t : trials) *request.add_trials() = t;
  v1::EnqueueTrialsResponse response;
  DIAL_CALL(EnqueueTrials, request, response);
  return response;
}

absl::StatusOr<v1::ReevaluateTrialsResponse> DialClient::ReevaluateTrials(
    const std::string& study, int32_t top, int32_t seeds) {
  v1::ReevaluateTrialsRequest request;
  request.set_study(study);
  request.set_top(top);
  request.set_seeds(seeds);
  v1::ReevaluateTrialsResponse response;
  DIAL_CALL(ReevaluateTrials, request, response);
  return response;
}

absl::StatusOr<std::vector<v1::Trial>> DialClient::GetBestTrials(
    const std::string& study, int32_t count) {
  auto response = GetFront(study, count);
  if (!response.ok()) return response.status();
  return std::vector<v1::Trial>(response->trials().begin(),
                                response->trials().end());
}

absl::StatusOr<v1::SuggestTrialsResponse> DialClient::SuggestTrials(
    const std::string& study, int32_t count, const std::string& client_id) {
  v1::SuggestTrialsRequest request;
  request.set_study(study);
  request.set_count(count);
  request.set_client_id(client_id);
  v1::SuggestTrialsResponse response;
  DIAL_CALL(SuggestTrials, request, response);
  return response;
}

absl::StatusOr<v1::Decision> DialClient::ReportIntermediate(
    const std::string& study, int64_t trial, int64_t step,
    const std::map<std::string, double>& metrics,
    const std::string& checkpoint) {
  v1::ReportIntermediateRequest request;
  request.set_study(study);
  request.set_trial(trial);
  request.set_step(step);
  for (const auto& [k, v] : metrics) (*request.mutable_metrics())[k] = v;
  request.set_checkpoint(checkpoint);
  v1::ReportIntermediateResponse response;
  DIAL_CALL(ReportIntermediate, request, response);
  return response.decision();
}

absl::StatusOr<v1::Trial> DialClient::CompleteTrial(
    const std::string& study, int64_t trial,
    const std::map<std::string, double>& final_metrics,
    const std::string& error) {
  v1::CompleteTrialRequest request;
  request.set_study(study);
  request.set_trial(trial);
  for (const auto& [k, v] : final_metrics) {
    (*request.mutable_final_metrics())[k] = v;
  }
  request.set_error(error);
  v1::CompleteTrialResponse response;
  DIAL_CALL(CompleteTrial, request, response);
  return response.trial();
}

absl::StatusOr<v1::BackupDatabaseResponse> DialClient::BackupDatabase(
    const std::string& name) {
  v1::BackupDatabaseRequest request;
  request.set_path(name);
  v1::BackupDatabaseResponse response;
  DIAL_CALL(BackupDatabase, request, response);
  return response;
}

absl::StatusOr<v1::ListAuditEventsResponse> DialClient::ListAuditEvents(
    const std::string& study, int32_t page_size,
    const std::string& page_token) {
  v1::ListAuditEventsRequest request;
  request.set_study(study);
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  v1::ListAuditEventsResponse response;
  DIAL_CALL(ListAuditEvents, request, response);
  return response;
}

absl::StatusOr<v1::GetUsageResponse> DialClient::GetUsage(const std::string& by,
                                                          absl::Time since) {
  v1::GetUsageRequest request;
  request.set_by(by);
  if (since != absl::InfinitePast()) {
    *request.mutable_since() =
        google::protobuf::util::TimeUtil::MillisecondsToTimestamp(
            absl::ToUnixMillis(since));
  }
  v1::GetUsageResponse response;
  DIAL_CALL(GetUsage, request, response);
  return response;
}

absl::StatusOr<v1::ListWorkersResponse> DialClient::ListWorkers() {
  v1::ListWorkersRequest request;
  v1::ListWorkersResponse response;
  DIAL_CALL(ListWorkers, request, response);
  return response;
}

absl::Status DialClient::WatchStudy(
    const std::string& study,
    const std::function<bool(const v1::StudyEvent&)>& on_event) {
  grpc::ClientContext ctx;
  Authorize(ctx, token_);
  v1::WatchStudyRequest request;
  request.set_study(study);
  auto reader = v1::StudyService::NewStub(channels_->Current().channel)
                    ->WatchStudy(&ctx, request);
  v1::WatchStudyResponse response;
  while (reader->Read(&response)) {
    if (!on_event(response.event())) {
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (status.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::OkStatus();
  }
  return FromGrpcStatus(status);
}

}  // namespace dial::client
