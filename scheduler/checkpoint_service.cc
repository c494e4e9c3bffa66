#include "scheduler/checkpoint_service.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "scheduler/services.h"
#include "transfer/manifest.h"

namespace dial::scheduler {
namespace {

// PERMISSION_DENIED unless `who` may upload (workers; admins).
absl::Status CheckUploadRole(const auth::Principal& who) {
  if (who.role == auth::Role::kWorker || who.is_admin()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(auth::RoleName(who.role), " '", who.name,
                   "' may not upload checkpoints (workers may)"));
}

// Takes the chunks of one upload stream: the first message names the
// upload; each chunk is checked and written as it arrives.
class UploadReactor final
    : public grpc::ServerReadReactor<v1::UploadChunksRequest> {
 public:
  UploadReactor(transfer::CheckpointDepot* depot, absl::Status allowed,
                v1::UploadChunksResponse* response)
      : depot_(depot), response_(response) {
    if (!allowed.ok()) {
      Finish(ToGrpcStatus(allowed));
      return;
    }
    StartRead(&piece_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client is done sending (or gone)
      Finish(grpc::Status::OK);
      return;
    }
    if (upload_id_.empty()) upload_id_ = piece_.upload_id();
    if (upload_id_.empty()) {
      Finish(ToGrpcStatus(absl::InvalidArgumentError(
          "upload_id: the stream's first message must name the upload")));
      return;
    }
    absl::Status put = depot_->Put(upload_id_, piece_.index(), piece_.data());
    if (!put.ok()) {
      Finish(ToGrpcStatus(put));
      return;
    }
    response_->set_received(response_->received() + 1);
    StartRead(&piece_);
  }
  void OnDone() override { delete this; }

 private:
  transfer::CheckpointDepot* const depot_;
  v1::UploadChunksResponse* const response_;
  v1::UploadChunksRequest piece_;
  std::string upload_id_;
};

// Streams a checkpoint: its manifest, then its chunks from `from_chunk`,
// each read (and checked) when the previous one has been written.
class DownloadReactor final
    : public grpc::ServerWriteReactor<v1::DownloadCheckpointResponse> {
 public:
  DownloadReactor(CheckpointServiceImpl* service,
                  absl::StatusOr<auth::Principal> who,
                  const v1::DownloadCheckpointRequest* request)
      : depot_(service->depot()) {
    if (!who.ok()) {
      Finish(ToGrpcStatus(who.status()));
      return;
    }
    const std::string study = request->study();
    const std::string id = request->checkpoint();
    const int64_t from = request->from_chunk();
    service->Run([this, service, who = *who, study, id, from] {
      absl::Status status = Open(service->core(), who, study, id, from);
      if (!status.ok()) {
        Finish(ToGrpcStatus(status));
        return;
      }
      StartWrite(&piece_);
    });
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client gone"));
      return;
    }
    if (next_ >= static_cast<int64_t>(chunks_.size())) {
      Finish(grpc::Status::OK);
      return;
    }
    piece_.Clear();
    auto data = depot_->ReadChunk(manifest_, chunks_[next_]);
    if (!data.ok()) {
      Finish(ToGrpcStatus(data.status()));
      return;
    }
    piece_.set_index(next_++);
    *piece_.mutable_data() = std::move(*data);
    StartWrite(&piece_);
  }
  void OnDone() override { delete this; }

 private:
  absl::Status Open(SchedulerCore* core, const auth::Principal& who,
                    const std::string& study, const std::string& id,
                    int64_t from) {
    if (!transfer::SafeRelativePath(id) || !absl::StartsWith(id, study + "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: '", id.substr(0, 256),
                       "' is not a checkpoint id of study '", study, "'"));
    }
    DIAL_RETURN_IF_ERROR(core->CheckCheckpointReader(study, who));
    DIAL_ASSIGN_OR_RETURN(manifest_, depot_->Manifest(id));
    chunks_ = transfer::Chunks(manifest_);
    if (from < 0 || from > static_cast<int64_t>(chunks_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "from_chunk: ", from, " is outside [0, ", chunks_.size(), "]"));
    }
    next_ = from;
    *piece_.mutable_manifest() = manifest_;
    return absl::OkStatus();
  }

  transfer::CheckpointDepot* const depot_;
  v1::CheckpointManifest manifest_;
  std::vector<transfer::ChunkRef> chunks_;
  int64_t next_ = 0;
  v1::DownloadCheckpointResponse piece_;
};

}  // namespace

CheckpointServiceImpl::CheckpointServiceImpl(SchedulerCore* core,
                                             transfer::CheckpointDepot* depot,
                                             const auth::TokenTable* tokens,
                                             int io_threads)
    : core_(core), depot_(depot), tokens_(tokens) {
  for (int i = 0; i < io_threads; ++i) {
    threads_.emplace_back([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and nothing left
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        task();
        lock.lock();
      }
    });
  }
}

CheckpointServiceImpl::~CheckpointServiceImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void CheckpointServiceImpl::Run(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

template <typename Task>
grpc::ServerUnaryReactor* CheckpointServiceImpl::OnIoThread(
    grpc::CallbackServerContext* ctx, Task task) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<auth::Principal> who = Authenticate(tokens_, *ctx);
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  Run([reactor, task = std::move(task), who = *who] { task(reactor, who); });
  return reactor;
}

grpc::ServerUnaryReactor* CheckpointServiceImpl::StartUpload(
    grpc::CallbackServerContext* ctx, const v1::StartUploadRequest* request,
    v1::StartUploadResponse* response) {
  return OnIoThread(ctx, [this, request, response](
                             grpc::ServerUnaryReactor* reactor,
                             const auth::Principal& who) {
    absl::Status status = CheckUploadRole(who);
    if (status.ok()) {
      // Security round two, M3: the owner's checkpoint quota is checked
      // before anything is staged.
      status = core_->CheckUploader(request->lease(),
                                    request->manifest().checkpoint(), who,
                                    transfer::TotalBytes(request->manifest()));
    }
    if (status.ok()) {
      const std::vector<std::string> bases(request->bases().begin(),
                                           request->bases().end());
      const v1::TrialLease& lease = request->lease();
      auto upload =
          depot_->Start(lease.study(), lease.trial(), request->step(),
                        request->manifest(), bases, who.name,
                        absl::StrCat(lease.worker_id(), "/", lease.attempt()));
      if (upload.ok()) {
        response->set_upload_id(upload->upload_id);
        for (int64_t i : upload->missing) response->add_missing(i);
        response->set_missing_bytes(upload->missing_bytes);
      }
      status = upload.status();
    }
    reactor->Finish(ToGrpcStatus(status));
  });
}

grpc::ServerReadReactor<v1::UploadChunksRequest>*
CheckpointServiceImpl::UploadChunks(grpc::CallbackServerContext* ctx,
                                    v1::UploadChunksResponse* response) {
  absl::StatusOr<auth::Principal> who = Authenticate(tokens_, *ctx);
  return new UploadReactor(
      depot_, who.ok() ? CheckUploadRole(*who) : who.status(), response);
}

absl::Status CheckpointServiceImpl::CheckOwnUpload(const v1::TrialLease& lease,
                                                   const std::string& upload_id,
                                                   const auth::Principal& who) {
  DIAL_RETURN_IF_ERROR(CheckUploadRole(who));
  DIAL_ASSIGN_OR_RETURN(transfer::CheckpointDepot::Upload upload,
                        depot_->Find(upload_id));
  if (upload.study != lease.study() || upload.trial != lease.trial()) {
    return absl::PermissionDeniedError(
        "upload_id: the upload is for another trial");
  }
  return core_->CheckUploader(lease, upload.checkpoint, who);
}

grpc::ServerUnaryReactor* CheckpointServiceImpl::CommitUpload(
    grpc::CallbackServerContext* ctx, const v1::CommitUploadRequest* request,
    v1::CommitUploadResponse* response) {
  return OnIoThread(ctx, [this, request, response](
                             grpc::ServerUnaryReactor* reactor,
                             const auth::Principal& who) {
    const v1::TrialLease& lease = request->lease();
    auto finish = [reactor](absl::Status s) {
      reactor->Finish(ToGrpcStatus(s));
    };
    absl::Status allowed = CheckOwnUpload(lease, request->upload_id(), who);
    if (!allowed.ok()) return finish(allowed);
    auto committed = depot_->Commit(request->upload_id());
    if (!committed.ok()) return finish(committed.status());
    Reply<bool> reply = core_->CheckpointUploaded(lease, committed->step,
                                                  committed->checkpoint, who);
    response->set_checkpoint(committed->checkpoint);
    if (reply.ok()) response->set_restore_point(*reply);
    const absl::Status status = reply.status();
    core_->WhenDurable(reply.ticket(), [reactor, status](absl::Status durable) {
      reactor->Finish(ToGrpcStatus(durable.ok() ? status : durable));
    });
  });
}

grpc::ServerUnaryReactor* CheckpointServiceImpl::AbortUpload(
    grpc::CallbackServerContext* ctx, const v1::AbortUploadRequest* request,
    v1::AbortUploadResponse* response) {
  return OnIoThread(ctx, [this, request](grpc::ServerUnaryReactor* reactor,
                                         const auth::Principal& who) {
    absl::Status allowed =
        CheckOwnUpload(request->lease(), request->upload_id(), who);
    reactor->Finish(ToGrpcStatus(
        allowed.ok() ? depot_->Abort(request->upload_id()) : allowed));
  });
}

grpc::ServerWriteReactor<v1::DownloadCheckpointResponse>*
CheckpointServiceImpl::DownloadCheckpoint(
    grpc::CallbackServerContext* ctx,
    const v1::DownloadCheckpointRequest* request) {
  return new DownloadReactor(this, Authenticate(tokens_, *ctx), request);
}

}  // namespace dial::scheduler
