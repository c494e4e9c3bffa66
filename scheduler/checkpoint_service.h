// CheckpointService: checkpoints between hosts that share no filesystem
// (docs/checkpoint-transfer.md), an adapter over the CheckpointDepot (the
// files) and the core (who may, and the trial's restore point). Uploads are
// for the attempt that holds the trial's lease, as reports are; downloads
// for whoever may read the study and for workers running one of its
// trials. Work that touches a whole checkpoint (copying known chunks,
// fsync and rename, hashing a checkpoint without a kept manifest) runs on
// the service's own I/O threads, and the reactor finishes from there;
// chunk reads and writes (one chunk each) run in the callbacks.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "auth/token_table.h"
#include "dial/v1/service.grpc.pb.h"
#include "scheduler/core.h"
#include "transfer/checkpoint_depot.h"

namespace dial::scheduler {

class CheckpointServiceImpl final
    : public v1::CheckpointService::CallbackService {
 public:
  // Not owned; `tokens` may be null (no authentication).
  CheckpointServiceImpl(SchedulerCore* core, transfer::CheckpointDepot* depot,
                        const auth::TokenTable* tokens, int io_threads = 2);
  // After the server has stopped: runs what is queued, then joins.
  ~CheckpointServiceImpl() override;

  grpc::ServerUnaryReactor* StartUpload(
      grpc::CallbackServerContext* ctx, const v1::StartUploadRequest* request,
      v1::StartUploadResponse* response) override;
  grpc::ServerReadReactor<v1::UploadChunksRequest>* UploadChunks(
      grpc::CallbackServerContext* ctx,
      v1::UploadChunksResponse* response) override;
  grpc::ServerUnaryReactor* CommitUpload(
      grpc::CallbackServerContext* ctx, const v1::CommitUploadRequest* request,
      v1::CommitUploadResponse* response) override;
  grpc::ServerUnaryReactor* AbortUpload(
      grpc::CallbackServerContext* ctx, const v1::AbortUploadRequest* request,
      v1::AbortUploadResponse* response) override;
  grpc::ServerWriteReactor<v1::DownloadCheckpointResponse>* DownloadCheckpoint(
      grpc::CallbackServerContext* ctx,
      const v1::DownloadCheckpointRequest* request) override;

  // Runs `task` on an I/O thread.
  void Run(std::function<void()> task);

  SchedulerCore* core() const { return core_; }
  transfer::CheckpointDepot* depot() const { return depot_; }

 private:
  // OK when `who`, holding `lease`, may commit or abort upload `upload_id`:
  // an uploader, the upload is of the lease's trial, and the lease is its
  // attempt's.
  absl::Status CheckOwnUpload(const v1::TrialLease& lease,
                              const std::string& upload_id,
                              const auth::Principal& who);
  // Authenticates the caller, then runs task(reactor, principal) on an
  // I/O thread; the task finishes the reactor.
  template <typename Task>
  grpc::ServerUnaryReactor* OnIoThread(grpc::CallbackServerContext* ctx,
                                       Task task);

  SchedulerCore* const core_;
  transfer::CheckpointDepot* const depot_;
  const auth::TokenTable* const tokens_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace dial::scheduler
