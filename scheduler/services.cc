#include "scheduler/services.h"

#include <deque>
#include <string>

#include "common/grpc_status.h"
#include "common/status.h"

namespace dial::scheduler {
namespace {

// Finishes `reactor` with `status` once everything the answer could
// reflect (`ticket`) is durable; with UNAVAILABLE instead if it was lost.
void FinishDurable(SchedulerCore* core, grpc::ServerUnaryReactor* reactor,
                   absl::Status status, WriteTicket ticket) {
  core->WhenDurable(ticket, [reactor, status](absl::Status durable) {
    reactor->Finish(ToGrpcStatus(durable.ok() ? status : durable));
  });
}

// Answers a unary call with the core's reply: `fill` moves the value into
// the response.
template <typename T, typename Fill>
grpc::ServerUnaryReactor* Answer(SchedulerCore* core,
                                 grpc::CallbackServerContext* ctx,
                                 Reply<T> reply, Fill&& fill) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (reply.ok()) fill(*reply);
  FinishDurable(core, reactor, reply.status(), reply.ticket());
  return reactor;
}

grpc::ServerUnaryReactor* Answer(SchedulerCore* core,
                                 grpc::CallbackServerContext* ctx,
                                 const StatusReply& reply) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  FinishDurable(core, reactor, reply.status(), reply.ticket());
  return reactor;
}

// Streams a study's events: the snapshot first, then every event the core
// emits, ending after STUDY_FINISHED or when the client goes away.
class WatchReactor final
    : public grpc::ServerWriteReactor<v1::WatchStudyResponse> {
 public:
  WatchReactor(SchedulerCore* core, const std::string& study) : core_(core) {
    // The snapshot and every later event come through the callback, in
    // order, possibly before Watch returns.
    auto id = core_->Watch(
        study, [this](const v1::StudyEvent& event) { Enqueue(event); });
    absl::MutexLock lock(&mu_);
    registered_ = true;
    if (!id.ok()) {
      End(ToGrpcStatus(id.status()));
      return;
    }
    watch_id_ = *id;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "watch stream broken"));
      return;
    }
    queue_.pop_front();
    Next();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (!writing_) End(grpc::Status::CANCELLED);
    cancelled_ = true;
  }

  void OnDone() override {
    int64_t id;
    {
      // The stream can end before the constructor has the watch id.
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&registered_));
      id = watch_id_;
    }
    if (id != 0) core_->Unwatch(id);
    delete this;
  }

 private:
  void Enqueue(const v1::StudyEvent& event) {
    absl::MutexLock lock(&mu_);
    Push(event);
  }

  void Push(const v1::StudyEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || last_queued_) return;
    last_queued_ = event.kind() == v1::StudyEvent::STUDY_FINISHED;
    *queue_.emplace_back().mutable_event() = event;
    if (!writing_) Next();
  }

  void Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (cancelled_) {
      End(grpc::Status::CANCELLED);
    } else if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
    } else if (last_queued_) {
      End(grpc::Status::OK);
    }
  }

  void End(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  SchedulerCore* core_;
  absl::Mutex mu_;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int64_t watch_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::WatchStudyResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool last_queued_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* StudyServiceImpl::CreateStudy(
    grpc::CallbackServerContext* ctx, const v1::CreateStudyRequest* request,
    v1::CreateStudyResponse* response) {
  return Answer(
      core_, ctx, core_->CreateStudy(request->spec()),
      [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetStudy(
    grpc::CallbackServerContext* ctx, const v1::GetStudyRequest* request,
    v1::GetStudyResponse* response) {
  return Answer(
      core_, ctx, core_->GetStudy(request->study()),
      [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ListStudies(
    grpc::CallbackServerContext* ctx, const v1::ListStudiesRequest* request,
    v1::ListStudiesResponse* response) {
  return Answer(core_, ctx, core_->ListStudies(),
                [&](std::vector<v1::Study>& studies) {
                  for (auto& s : studies) {
                    *response->add_studies() = std::move(s);
                  }
                });
}

grpc::ServerUnaryReactor* StudyServiceImpl::UpdateStudy(
    grpc::CallbackServerContext* ctx, const v1::UpdateStudyRequest* request,
    v1::UpdateStudyResponse* response) {
  return Answer(
      core_, ctx,
      core_->UpdateStudy(request->study(), request->max_trials(),
                         request->max_parallel_trials()),
      [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::StopStudy(
    grpc::CallbackServerContext* ctx, const v1::StopStudyRequest* request,
    v1::StopStudyResponse* response) {
  return Answer(
      core_, ctx, core_->StopStudy(request->study()),
      [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::DeleteStudy(
    grpc::CallbackServerContext* ctx, const v1::DeleteStudyRequest* request,
    v1::DeleteStudyResponse* response) {
  return Answer(core_, ctx, core_->DeleteStudy(request->study()));
}

grpc::ServerUnaryReactor* StudyServiceImpl::ListTrials(
    grpc::CallbackServerContext* ctx, const v1::ListTrialsRequest* request,
    v1::ListTrialsResponse* response) {
  std::vector<v1::TrialState> states;
  for (int s : request->states()) {
    states.push_back(static_cast<v1::TrialState>(s));
  }
  return Answer(core_, ctx,
                core_->ListTrials(request->study(), states,
                                  request->page_size(), request->page_token()),
                [&](TrialPage& page) {
                  for (auto& t : page.trials) {
                    *response->add_trials() = std::move(t);
                  }
                  response->set_next_page_token(page.next_page_token);
                });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetTrial(
    grpc::CallbackServerContext* ctx, const v1::GetTrialRequest* request,
    v1::GetTrialResponse* response) {
  return Answer(
      core_, ctx, core_->GetTrial(request->study(), request->trial()),
      [&](v1::Trial& t) { *response->mutable_trial() = std::move(t); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetBestTrials(
    grpc::CallbackServerContext* ctx, const v1::GetBestTrialsRequest* request,
    v1::GetBestTrialsResponse* response) {
  return Answer(core_, ctx,
                core_->GetBestTrials(request->study(), request->count()),
                [&](std::vector<v1::Trial>& trials) {
                  for (auto& t : trials) *response->add_trials() = std::move(t);
                });
}

grpc::ServerWriteReactor<v1::WatchStudyResponse>* StudyServiceImpl::WatchStudy(
    grpc::CallbackServerContext* ctx, const v1::WatchStudyRequest* request) {
  return new WatchReactor(core_, request->study());
}

grpc::ServerUnaryReactor* StudyServiceImpl::SuggestTrials(
    grpc::CallbackServerContext* ctx, const v1::SuggestTrialsRequest* request,
    v1::SuggestTrialsResponse* response) {
  // Model fits can take a while: the core answers from its suggestion
  // thread and this reactor finishes then.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->SuggestTrialsAsync(
      request->study(), request->count(), request->client_id(),
      [this, reactor, response](Reply<Suggestion> s) {
        if (s.ok()) {
          for (auto& t : s->trials) *response->add_trials() = std::move(t);
          response->set_done(s->done);
          response->set_study_state(s->study_state);
        }
        FinishDurable(core_, reactor, s.status(), s.ticket());
      });
  return reactor;
}

grpc::ServerUnaryReactor* StudyServiceImpl::ReportIntermediate(
    grpc::CallbackServerContext* ctx,
    const v1::ReportIntermediateRequest* request,
    v1::ReportIntermediateResponse* response) {
  return Answer(
      core_, ctx,
      core_->ReportIntermediate(request->study(), request->trial(),
                                request->step(), request->metrics(),
                                request->checkpoint()),
      [&](v1::Decision& d) { *response->mutable_decision() = std::move(d); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::CompleteTrial(
    grpc::CallbackServerContext* ctx, const v1::CompleteTrialRequest* request,
    v1::CompleteTrialResponse* response) {
  return Answer(
      core_, ctx,
      core_->CompleteTrial(request->study(), request->trial(),
                           request->final_metrics(), request->error()),
      [&](v1::Trial& t) { *response->mutable_trial() = std::move(t); });
}

grpc::ServerUnaryReactor* StudyServiceImpl::BackupDatabase(
    grpc::CallbackServerContext* ctx, const v1::BackupDatabaseRequest* request,
    v1::BackupDatabaseResponse* response) {
  // A copy takes as long as the database is large: the core answers from
  // the backup's thread and this reactor finishes then.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->BackupDatabaseAsync(
      request->path(), [reactor, response,
                        path = request->path()](absl::StatusOr<int64_t> bytes) {
        if (bytes.ok()) {
          response->set_path(path);
          response->set_bytes(*bytes);
        }
        reactor->Finish(ToGrpcStatus(bytes.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::RegisterWorker(
    grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  return Answer(
      core_, ctx, core_->RegisterWorker(request->host(), request->resources()),
      [&](v1::RegisterWorkerResponse& r) { *response = std::move(r); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  return Answer(core_, ctx, core_->Heartbeat(*request),
                [&](v1::HeartbeatResponse& r) { *response = std::move(r); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::AcquireTrial(
    grpc::CallbackServerContext* ctx, const v1::AcquireTrialRequest* request,
    v1::AcquireTrialResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  core_->AcquireTrial(
      request->worker_id(), request->free_gpus(),
      absl::Milliseconds(request->wait_ms()),
      [ctx] { return !ctx->IsCancelled(); },
      [this, reactor, response](Reply<std::optional<Assignment>> result) {
        if (result.ok() && result->has_value()) {
          Assignment& a = **result;
          *response->mutable_trial() = std::move(a.trial);
          *response->mutable_run() = std::move(a.run);
          response->set_restore_checkpoint(a.restore_checkpoint);
          response->set_start_step(a.start_step);
          response->set_attempt(a.attempt);
        }
        FinishDurable(core_, reactor, result.status(), result.ticket());
      });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ReportProgress(
    grpc::CallbackServerContext* ctx, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse* response) {
  return Answer(
      core_, ctx, core_->ReportProgress(*request),
      [&](v1::Decision& d) { *response->mutable_decision() = std::move(d); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::FinishTrial(
    grpc::CallbackServerContext* ctx, const v1::FinishTrialRequest* request,
    v1::FinishTrialResponse* response) {
  return Answer(core_, ctx, core_->FinishTrial(*request));
}

}  // namespace dial::scheduler
