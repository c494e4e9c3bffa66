#include "scheduler/services.h"

#include <deque>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "http/admission.h"
#include "scheduler/limits.h"

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
// emits, ending after STUDY_FINISHED or when the client goes away. At most
// `max_queue` events, and `max_queue_bytes` of them, wait for a client that
// does not read: a watcher that reaches either is dropped with
// RESOURCE_EXHAUSTED, and what it had queued is freed (gRPC keeps only the
// message it is writing).
class WatchReactor final
    : public grpc::ServerWriteReactor<v1::WatchStudyResponse> {
 public:
  WatchReactor(SchedulerCore* core, const std::string& study,
               const auth::Principal& who,
               size_t max_queue = Limits{}.max_watcher_queue,
               size_t max_queue_bytes = Limits{}.max_watcher_queue_bytes)
      : core_(core), max_queue_(max_queue), max_queue_bytes_(max_queue_bytes) {
    // The snapshot and every later event come through the callback, in
    // order, possibly before Watch returns.
    auto id = core_->Watch(
        study,
        [this, who](const v1::StudyEvent& event) {
          v1::StudyEvent seen = event;
          if (seen.has_trial()) Redact(who, *seen.mutable_trial());
          if (seen.has_best_trial()) Redact(who, *seen.mutable_best_trial());
          Enqueue(seen);
        },
        who);
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
    queued_bytes_ -= queue_.front().ByteSizeLong();
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
    if (queue_.size() >= max_queue_ || queued_bytes_ >= max_queue_bytes_) {
      // Finding: four streams that never read, on a study with a 1 MB
      // spec, took the scheduler from 25 MB to 596 MB in 150 reports: the
      // queues had no bound.
      const std::string queued =
          absl::StrCat(queue_.size(), " events (", queued_bytes_, " bytes)");
      queue_.erase(writing_ ? queue_.begin() + 1 : queue_.begin(),
                   queue_.end());
      queued_bytes_ = writing_ ? queue_.front().ByteSizeLong() : 0;
      End(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("watcher too slow: ", queued,
                       " queued unread, the limit; watch again and read "
                       "faster")));
      return;
    }
    last_queued_ = event.kind() == v1::StudyEvent::STUDY_FINISHED;
    *queue_.emplace_back().mutable_event() = event;
    queued_bytes_ += queue_.back().ByteSizeLong();
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
  const size_t max_queue_;
  const size_t max_queue_bytes_;
  absl::Mutex mu_;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int64_t watch_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::WatchStudyResponse> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool last_queued_ ABSL_GUARDED_BY(mu_) = false;
};

// Runs `handler` with the caller's principal, or refuses the call.
template <typename Handler>
grpc::ServerUnaryReactor* AsPrincipal(const auth::TokenTable* tokens,
                                      grpc::CallbackServerContext* ctx,
                                      Handler&& handler) {
  absl::StatusOr<auth::Principal> who = Authenticate(tokens, *ctx);
  if (!who.ok()) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  return handler(*who);
}

void RedactAll(const auth::Principal& who,
               google::protobuf::RepeatedPtrField<v1::Trial>& trials) {
  for (v1::Trial& t : trials) Redact(who, t);
}

}  // namespace

std::string PeerClient(const std::string& peer) {
  absl::string_view rest = peer;
  if (absl::ConsumePrefix(&rest, "ipv4:")) {
    return http::AddressKey(std::string(rest.substr(0, rest.rfind(':'))));
  }
  if (!absl::ConsumePrefix(&rest, "ipv6:")) return "";
  // "[2001:db8::1]:5000", or URI-escaped: "%5B2001:db8::1%5D:5000"; a zone
  // ("%25eth0") is not part of the address.
  const std::string host =
      absl::StrReplaceAll(rest.substr(0, rest.rfind(':')),
                          {{"%5B", ""}, {"%5D", ""}, {"[", ""}, {"]", ""}});
  return http::AddressKey(host.substr(0, host.find('%')));
}

absl::StatusOr<auth::Principal> Authenticate(
    const auth::TokenTable* tokens, const grpc::ServerContextBase& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  std::optional<absl::string_view> header;
  if (it != metadata.end()) {
    header = absl::string_view(it->second.data(), it->second.size());
  }
  absl::StatusOr<auth::Principal> who =
      auth::AuthenticateBearer(tokens, header);
  if (who.ok() || tokens == nullptr || !header) return who;
  // Attack review, finding 10: wrong tokens were never throttled. A
  // client (an IPv4 address, an IPv6 /64) that keeps sending them waits;
  // the in-process channel of the HTTP edge is throttled there instead.
  const std::string client = PeerClient(ctx.peer());
  if (client.empty()) return who;
  const absl::Time now = absl::Now();
  const absl::Duration wait = tokens->failures().Wait(client, now);
  if (wait <= absl::ZeroDuration()) {
    tokens->failures().Failed(client, now);
    return who;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many wrong tokens from this address; try again in ",
      absl::ToInt64Seconds(absl::Ceil(wait, absl::Seconds(1))), " s"));
}

void Redact(const auth::Principal& who, v1::Trial& trial) {
  trial.clear_lease_token();
  if (!who.is_admin()) {
    trial.clear_worker_id();
    trial.clear_attempt();
  }
}

grpc::ServerUnaryReactor* StudyServiceImpl::CreateStudy(
    grpc::CallbackServerContext* ctx, const v1::CreateStudyRequest* request,
    v1::CreateStudyResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx, core_->CreateStudy(request->spec(), who),
        [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetStudy(
    grpc::CallbackServerContext* ctx, const v1::GetStudyRequest* request,
    v1::GetStudyResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx, core_->GetStudy(request->study(), who),
        [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ListStudies(
    grpc::CallbackServerContext* ctx, const v1::ListStudiesRequest* request,
    v1::ListStudiesResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx,
        core_->ListStudies(who, request->page_size(), request->page_token()),
        [&](StudyPage& page) {
          for (auto& s : page.studies) *response->add_studies() = std::move(s);
          response->set_next_page_token(page.next_page_token);
        });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::UpdateStudy(
    grpc::CallbackServerContext* ctx, const v1::UpdateStudyRequest* request,
    v1::UpdateStudyResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx,
        core_->UpdateStudy(
            request->study(),
            StudyChange{request->max_trials(), request->max_parallel_trials(),
                        request->has_priority()
                            ? std::optional<int32_t>(request->priority())
                            : std::nullopt},
            who),
        [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::SetNote(
    grpc::CallbackServerContext* ctx, const v1::SetNoteRequest* request,
    v1::SetNoteResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx,
                  core_->SetNote(request->study(),
                                 request->has_trial()
                                     ? std::optional<int64_t>(request->trial())
                                     : std::nullopt,
                                 request->note(), who),
                  [&](v1::SetNoteResponse& r) {
                    if (r.has_trial()) Redact(who, *r.mutable_trial());
                    *response = std::move(r);
                  });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::StopStudy(
    grpc::CallbackServerContext* ctx, const v1::StopStudyRequest* request,
    v1::StopStudyResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx, core_->StopStudy(request->study(), who),
        [&](v1::Study& s) { *response->mutable_study() = std::move(s); });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::DeleteStudy(
    grpc::CallbackServerContext* ctx, const v1::DeleteStudyRequest* request,
    v1::DeleteStudyResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx, core_->DeleteStudy(request->study(), who));
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ListTrials(
    grpc::CallbackServerContext* ctx, const v1::ListTrialsRequest* request,
    v1::ListTrialsResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    std::vector<v1::TrialState> states;
    for (int s : request->states()) {
      states.push_back(static_cast<v1::TrialState>(s));
    }
    return Answer(
        core_, ctx,
        core_->ListTrials(request->study(), states, request->page_size(),
                          request->page_token(), who),
        [&](TrialPage& page) {
          for (auto& t : page.trials) {
            *response->add_trials() = std::move(t);
          }
          RedactAll(who, *response->mutable_trials());
          response->set_next_page_token(page.next_page_token);
        });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetTrial(
    grpc::CallbackServerContext* ctx, const v1::GetTrialRequest* request,
    v1::GetTrialResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx,
                  core_->GetTrial(request->study(), request->trial(), who,
                                  request->history_page_size(),
                                  request->history_page_token(),
                                  response->mutable_next_history_page_token()),
                  [&](v1::Trial& t) {
                    Redact(who, t);
                    *response->mutable_trial() = std::move(t);
                  });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetBestTrials(
    grpc::CallbackServerContext* ctx, const v1::GetBestTrialsRequest* request,
    v1::GetBestTrialsResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx,
        core_->GetBestTrials(request->study(), request->count(), who, response),
        [&](std::vector<v1::Trial>& trials) {
          for (auto& t : trials) *response->add_trials() = std::move(t);
          RedactAll(who, *response->mutable_trials());
        });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::EnqueueTrials(
    grpc::CallbackServerContext* ctx, const v1::EnqueueTrialsRequest* request,
    v1::EnqueueTrialsResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    int32_t waiting = 0;
    auto queued = core_->EnqueueTrials(
        request->study(), {request->trials().begin(), request->trials().end()},
        who, &waiting);
    return Answer(core_, ctx, std::move(queued),
                  [&](std::vector<v1::QueuedTrial>& items) {
                    for (auto& q : items)
                      *response->add_queued() = std::move(q);
                    response->set_waiting(waiting);
                  });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ReevaluateTrials(
    grpc::CallbackServerContext* ctx,
    const v1::ReevaluateTrialsRequest* request,
    v1::ReevaluateTrialsResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    int32_t max_trials = 0;
    auto queued = core_->ReevaluateTrials(request->study(), request->top(),
                                          request->seeds(), who, &max_trials);
    return Answer(core_, ctx, std::move(queued),
                  [&](std::vector<v1::QueuedTrial>& items) {
                    for (auto& q : items)
                      *response->add_queued() = std::move(q);
                    response->set_max_trials(max_trials);
                  });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetParameterImportance(
    grpc::CallbackServerContext* ctx,
    const v1::GetParameterImportanceRequest* request,
    v1::GetParameterImportanceResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx,
                  core_->GetParameterImportance(request->study(),
                                                request->top_quantile(), who),
                  [&](searchers::ImportanceResult& result) {
                    for (const auto& p : result.params) {
                      auto* out = response->add_params();
                      out->set_name(p.name);
                      out->set_importance(p.importance);
                    }
                    response->set_trials(result.trials);
                    response->set_top_trials(result.top_trials);
                    response->set_method("ped-anova");
                  });
  });
}

grpc::ServerWriteReactor<v1::WatchStudyResponse>* StudyServiceImpl::WatchStudy(
    grpc::CallbackServerContext* ctx, const v1::WatchStudyRequest* request) {
  absl::StatusOr<auth::Principal> who = Authenticate(tokens_, *ctx);
  if (!who.ok()) {
    // A stream that ends at once with the refusal.
    class Refused final
        : public grpc::ServerWriteReactor<v1::WatchStudyResponse> {
     public:
      explicit Refused(const absl::Status& status) {
        Finish(ToGrpcStatus(status));
      }
      void OnDone() override { delete this; }
    };
    return new Refused(who.status());
  }
  return new WatchReactor(core_, request->study(), *who,
                          core_->limits().max_watcher_queue,
                          core_->limits().max_watcher_queue_bytes);
}

grpc::ServerUnaryReactor* StudyServiceImpl::SuggestTrials(
    grpc::CallbackServerContext* ctx, const v1::SuggestTrialsRequest* request,
    v1::SuggestTrialsResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    // Model fits can take a while: the core answers from its suggestion
    // thread and this reactor finishes then.
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_->SuggestTrialsAsync(
        request->study(), request->count(), request->client_id(),
        [this, reactor, response, who](Reply<Suggestion> s) {
          if (s.ok()) {
            for (auto& t : s->trials) *response->add_trials() = std::move(t);
            RedactAll(who, *response->mutable_trials());
            response->set_done(s->done);
            response->set_study_state(s->study_state);
          }
          FinishDurable(core_, reactor, s.status(), s.ticket());
        },
        who);
    return reactor;
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ReportIntermediate(
    grpc::CallbackServerContext* ctx,
    const v1::ReportIntermediateRequest* request,
    v1::ReportIntermediateResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx,
        core_->ReportIntermediate(request->study(), request->trial(),
                                  request->step(), request->metrics(),
                                  request->checkpoint(), who),
        [&](v1::Decision& d) { *response->mutable_decision() = std::move(d); });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::CompleteTrial(
    grpc::CallbackServerContext* ctx, const v1::CompleteTrialRequest* request,
    v1::CompleteTrialResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx,
        core_->CompleteTrial(request->study(), request->trial(),
                             request->final_metrics(), request->error(), who),
        [&](v1::Trial& t) {
          Redact(who, t);
          *response->mutable_trial() = std::move(t);
        });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::BackupDatabase(
    grpc::CallbackServerContext* ctx, const v1::BackupDatabaseRequest* request,
    v1::BackupDatabaseResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    // A copy takes as long as the database is large: the core answers from
    // the backup's thread and this reactor finishes then.
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_->BackupDatabaseAsync(
        request->path(),
        [reactor,
         response](absl::StatusOr<std::pair<std::string, int64_t>> copy) {
          if (copy.ok()) {
            response->set_path(copy->first);
            response->set_bytes(copy->second);
          }
          reactor->Finish(ToGrpcStatus(copy.status()));
        },
        who);
    return reactor;
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ListAuditEvents(
    grpc::CallbackServerContext* ctx, const v1::ListAuditEventsRequest* request,
    v1::ListAuditEventsResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx,
                  core_->ListAuditEvents(request->study(), request->page_size(),
                                         request->page_token(), who),
                  [&](AuditPage& page) {
                    for (auto& e : page.events) {
                      *response->add_events() = std::move(e);
                    }
                    response->set_next_page_token(page.next_page_token);
                  });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::ListWorkers(
    grpc::CallbackServerContext* ctx, const v1::ListWorkersRequest*,
    v1::ListWorkersResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx, core_->ListWorkers(who),
                  [&](std::vector<v1::Worker>& workers) {
                    for (auto& w : workers) {
                      *response->add_workers() = std::move(w);
                    }
                  });
  });
}

grpc::ServerUnaryReactor* StudyServiceImpl::GetUsage(
    grpc::CallbackServerContext* ctx, const v1::GetUsageRequest* request,
    v1::GetUsageResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    const absl::Time since =
        request->has_since()
            ? absl::FromUnixMillis(
                  google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                      request->since()))
            : absl::InfinitePast();
    return Answer(core_, ctx, core_->GetUsage(request->by(), since, who),
                  [&](v1::GetUsageResponse& r) { *response = std::move(r); });
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::RegisterWorker(
    grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx,
        core_->RegisterWorker(request->host(), request->resources(), who),
        [&](v1::RegisterWorkerResponse& r) { *response = std::move(r); });
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx, core_->Heartbeat(*request, who),
                  [&](v1::HeartbeatResponse& r) { *response = std::move(r); });
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::AcquireTrial(
    grpc::CallbackServerContext* ctx, const v1::AcquireTrialRequest* request,
    v1::AcquireTrialResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    core_->AcquireTrial(
        request->worker_id(), request->free_gpus(),
        absl::Milliseconds(request->wait_ms()),
        [ctx] { return !ctx->IsCancelled(); },
        [this, reactor, response,
         who](Reply<std::optional<Assignment>> result) {
          if (result.ok() && result->has_value()) {
            Assignment& a = **result;
            response->set_lease_token(a.trial.lease_token());
            Redact(who, a.trial);
            *response->mutable_trial() = std::move(a.trial);
            *response->mutable_run() = std::move(a.run);
            response->set_restore_checkpoint(a.restore_checkpoint);
            response->set_start_step(a.start_step);
            response->set_attempt(a.attempt);
          }
          FinishDurable(core_, reactor, result.status(), result.ticket());
        },
        who);
    return reactor;
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ReportProgress(
    grpc::CallbackServerContext* ctx, const v1::ReportProgressRequest* request,
    v1::ReportProgressResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(
        core_, ctx, core_->ReportProgress(*request, who),
        [&](v1::Decision& d) { *response->mutable_decision() = std::move(d); });
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::FinishTrial(
    grpc::CallbackServerContext* ctx, const v1::FinishTrialRequest* request,
    v1::FinishTrialResponse* response) {
  return AsPrincipal(tokens_, ctx, [&](const auth::Principal& who) {
    return Answer(core_, ctx, core_->FinishTrial(*request, who));
  });
}

}  // namespace dial::scheduler
