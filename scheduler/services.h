// gRPC adapters over SchedulerCore: each handler authenticates the caller
// (Authenticate: the bearer token's principal), translates the request,
// calls the core with that principal, converts the status with ToGrpcStatus
// and finishes; trials leave without their lease token, and without worker
// and attempt details for non-admins (Redact). Uses
// the callback API; unary handlers finish inline (bounded work: memory plus
// one local transaction) and WatchStudy parks a write reactor that the core
// feeds. Thread-safe: the core does the locking.
#pragma once

#include <memory>
#include <string>

#include "auth/token_table.h"
#include "dial/v1/service.grpc.pb.h"
#include "scheduler/core.h"

namespace dial::scheduler {

// The caller's principal: the anonymous admin when `tokens` is null (no
// --auth-tokens); else the principal of the "authorization: Bearer <token>"
// metadata, UNAUTHENTICATED when it is missing or unknown, and
// RESOURCE_EXHAUSTED for an unknown one while the caller's client has to
// wait after too many (auth::FailureThrottle; a valid token always passes).
absl::StatusOr<auth::Principal> Authenticate(
    const auth::TokenTable* tokens, const grpc::ServerContextBase& ctx);

// The client of a gRPC peer ("ipv4:10.0.0.1:5000", "ipv6:[2001:db8::1]:5000")
// as http::AddressKey counts it; "" for one with no IP address (in-process,
// a Unix socket).
std::string PeerClient(const std::string& peer);

// Clears what `who` may not see of a trial: the lease token always, the
// worker and attempt unless an admin.
void Redact(const auth::Principal& who, v1::Trial& trial);

class StudyServiceImpl final : public v1::StudyService::CallbackService {
 public:
  // `tokens` may be null (no authentication); not owned.
  StudyServiceImpl(SchedulerCore* core, const auth::TokenTable* tokens)
      : core_(core), tokens_(tokens) {}

  grpc::ServerUnaryReactor* CreateStudy(
      grpc::CallbackServerContext* ctx, const v1::CreateStudyRequest* request,
      v1::CreateStudyResponse* response) override;
  grpc::ServerUnaryReactor* GetStudy(grpc::CallbackServerContext* ctx,
                                     const v1::GetStudyRequest* request,
                                     v1::GetStudyResponse* response) override;
  grpc::ServerUnaryReactor* ListStudies(
      grpc::CallbackServerContext* ctx, const v1::ListStudiesRequest* request,
      v1::ListStudiesResponse* response) override;
  grpc::ServerUnaryReactor* UpdateStudy(
      grpc::CallbackServerContext* ctx, const v1::UpdateStudyRequest* request,
      v1::UpdateStudyResponse* response) override;
  grpc::ServerUnaryReactor* SetNote(grpc::CallbackServerContext* ctx,
                                    const v1::SetNoteRequest* request,
                                    v1::SetNoteResponse* response) override;
  grpc::ServerUnaryReactor* StopStudy(grpc::CallbackServerContext* ctx,
                                      const v1::StopStudyRequest* request,
                                      v1::StopStudyResponse* response) override;
  grpc::ServerUnaryReactor* DeleteStudy(
      grpc::CallbackServerContext* ctx, const v1::DeleteStudyRequest* request,
      v1::DeleteStudyResponse* response) override;
  grpc::ServerUnaryReactor* ListTrials(
      grpc::CallbackServerContext* ctx, const v1::ListTrialsRequest* request,
      v1::ListTrialsResponse* response) override;
  grpc::ServerUnaryReactor* GetTrial(grpc::CallbackServerContext* ctx,
                                     const v1::GetTrialRequest* request,
                                     v1::GetTrialResponse* response) override;
  grpc::ServerUnaryReactor* GetBestTrials(
      grpc::CallbackServerContext* ctx, const v1::GetBestTrialsRequest* request,
      v1::GetBestTrialsResponse* response) override;
  grpc::ServerUnaryReactor* EnqueueTrials(
      grpc::CallbackServerContext* ctx, const v1::EnqueueTrialsRequest* request,
      v1::EnqueueTrialsResponse* response) override;
  grpc::ServerUnaryReactor* ReevaluateTrials(
      grpc::CallbackServerContext* ctx,
      const v1::ReevaluateTrialsRequest* request,
      v1::ReevaluateTrialsResponse* response) override;
  grpc::ServerUnaryReactor* GetUsage(grpc::CallbackServerContext* ctx,
                                     const v1::GetUsageRequest* request,
                                     v1::GetUsageResponse* response) override;
  grpc::ServerUnaryReactor* ListWorkers(
      grpc::CallbackServerContext* ctx, const v1::ListWorkersRequest* request,
      v1::ListWorkersResponse* response) override;
  grpc::ServerUnaryReactor* GetParameterImportance(
      grpc::CallbackServerContext* ctx,
      const v1::GetParameterImportanceRequest* request,
      v1::GetParameterImportanceResponse* response) override;
  grpc::ServerWriteReactor<v1::WatchStudyResponse>* WatchStudy(
      grpc::CallbackServerContext* ctx,
      const v1::WatchStudyRequest* request) override;
  grpc::ServerUnaryReactor* SuggestTrials(
      grpc::CallbackServerContext* ctx, const v1::SuggestTrialsRequest* request,
      v1::SuggestTrialsResponse* response) override;
  grpc::ServerUnaryReactor* ReportIntermediate(
      grpc::CallbackServerContext* ctx,
      const v1::ReportIntermediateRequest* request,
      v1::ReportIntermediateResponse* response) override;
  grpc::ServerUnaryReactor* CompleteTrial(
      grpc::CallbackServerContext* ctx, const v1::CompleteTrialRequest* request,
      v1::CompleteTrialResponse* response) override;
  // Parks the reactor while the core copies the database.
  grpc::ServerUnaryReactor* BackupDatabase(
      grpc::CallbackServerContext* ctx,
      const v1::BackupDatabaseRequest* request,
      v1::BackupDatabaseResponse* response) override;
  grpc::ServerUnaryReactor* ListAuditEvents(
      grpc::CallbackServerContext* ctx,
      const v1::ListAuditEventsRequest* request,
      v1::ListAuditEventsResponse* response) override;

 private:
  SchedulerCore* core_;
  const auth::TokenTable* tokens_;
};

// Worker daemons' API. AcquireTrial is a long poll: the reactor is parked
// in the core until a trial is ready or the wait ends.
class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  WorkerServiceImpl(SchedulerCore* core, const auth::TokenTable* tokens)
      : core_(core), tokens_(tokens) {}
  grpc::ServerUnaryReactor* RegisterWorker(
      grpc::CallbackServerContext* ctx,
      const v1::RegisterWorkerRequest* request,
      v1::RegisterWorkerResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* AcquireTrial(
      grpc::CallbackServerContext* ctx, const v1::AcquireTrialRequest* request,
      v1::AcquireTrialResponse* response) override;
  grpc::ServerUnaryReactor* ReportProgress(
      grpc::CallbackServerContext* ctx,
      const v1::ReportProgressRequest* request,
      v1::ReportProgressResponse* response) override;
  grpc::ServerUnaryReactor* FinishTrial(
      grpc::CallbackServerContext* ctx, const v1::FinishTrialRequest* request,
      v1::FinishTrialResponse* response) override;

 private:
  SchedulerCore* core_;
  const auth::TokenTable* tokens_;
};

}  // namespace dial::scheduler
