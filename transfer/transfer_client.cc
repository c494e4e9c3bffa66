#include "transfer/transfer_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "dial/v1/service.grpc.pb.h"
#include "transfer/manifest.h"

namespace dial::transfer {
namespace {

namespace fs = std::filesystem;

bool SameManifest(const v1::CheckpointManifest& a,
                  const v1::CheckpointManifest& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

class GrpcCheckpointTransfer final : public CheckpointTransfer {
 public:
  explicit GrpcCheckpointTransfer(const GrpcCheckpointTransferOptions& options)
      : options_(options),
        stub_(v1::CheckpointService::NewStub(options.channel)) {
    if (!options_.sleep) {
      options_.sleep = [](absl::Duration d) {
        absl::SleepFor(d);
        return true;
      };
    }
  }

  absl::StatusOr<TransferStats> Upload(
      const v1::TrialLease& lease, int64_t step, const std::string& root,
      const std::string& id, const std::vector<std::string>& bases) override {
    DIAL_ASSIGN_OR_RETURN(v1::CheckpointManifest manifest, Describe(root, id));
    const std::vector<ChunkRef> chunks = Chunks(manifest);
    const std::string base = (fs::path(root) / id).string();
    TransferStats stats;
    stats.bytes_total = TotalBytes(manifest);
    stats.chunks_total = static_cast<int64_t>(chunks.size());
    return Retrying([&]() -> absl::StatusOr<TransferStats> {
      ++stats.attempts;
      v1::StartUploadRequest start;
      *start.mutable_lease() = lease;
      start.set_step(step);
      *start.mutable_manifest() = manifest;
      for (const auto& b : bases) start.add_bases(b);
      v1::StartUploadResponse started;
      {
        grpc::ClientContext ctx;
        Prepare(ctx, 0);
        DIAL_RETURN_IF_ERROR(
            FromGrpcStatus(stub_->StartUpload(&ctx, start, &started)));
      }
      if (started.missing_size() > 0) {
        grpc::ClientContext ctx;
        Prepare(ctx, started.missing_bytes());
        v1::UploadChunksResponse response;
        auto writer = stub_->UploadChunks(&ctx, &response);
        v1::UploadChunksRequest piece;
        piece.set_upload_id(started.upload_id());
        for (int64_t index : started.missing()) {
          if (index < 0 || index >= static_cast<int64_t>(chunks.size())) {
            return absl::InternalError("the scheduler asked for no chunk");
          }
          const ChunkRef& ref = chunks[index];
          auto data = ReadRange(root, FilePath(base, manifest, ref.file),
                                ref.offset, ref.length);
          if (!data.ok()) {
            ctx.TryCancel();
            (void)writer->Finish();
            // The checkpoint went (the trial deleted it): the session
            // goes too, rather than hold one of the scheduler's upload
            // slots until it expires.
            Abort(lease, started.upload_id());
            return data.status();
          }
          *piece.mutable_data() = std::move(*data);
          piece.set_index(index);
          if (!writer->Write(piece)) break;  // Finish says why
          ++stats.chunks_sent;
          stats.bytes_sent += ref.length;
          piece.clear_upload_id();
        }
        writer->WritesDone();
        DIAL_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
      }
      v1::CommitUploadRequest commit;
      *commit.mutable_lease() = lease;
      commit.set_upload_id(started.upload_id());
      v1::CommitUploadResponse committed;
      grpc::ClientContext ctx;
      Prepare(ctx, 0);
      DIAL_RETURN_IF_ERROR(
          FromGrpcStatus(stub_->CommitUpload(&ctx, commit, &committed)));
      stats.restore_point = committed.restore_point();
      return stats;
    });
  }

  absl::StatusOr<TransferStats> Download(const std::string& study,
                                         const std::string& id,
                                         const std::string& dest) override {
    const fs::path target(dest);
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    const std::string staging =
        (target.parent_path() / absl::StrCat(".download-",
                                             std::random_device()(), "-",
                                             target.filename().string()))
            .string();
    TransferStats stats;
    std::optional<v1::CheckpointManifest> manifest;
    std::vector<ChunkRef> chunks;
    int64_t next = 0;
    auto result = Retrying([&]() -> absl::StatusOr<TransferStats> {
      ++stats.attempts;
      v1::DownloadCheckpointRequest request;
      request.set_study(study);
      request.set_checkpoint(id);
      request.set_from_chunk(next);
      grpc::ClientContext ctx;
      Prepare(ctx, manifest ? TotalBytes(*manifest) : 0);
      auto reader = stub_->DownloadCheckpoint(&ctx, request);
      v1::DownloadCheckpointResponse piece;
      // Ends the call early (gRPC wants every stream finished).
      auto abandon = [&](absl::Status status) {
        ctx.TryCancel();
        while (reader->Read(&piece)) {
        }
        (void)reader->Finish();
        return status;
      };
      bool first = true;
      while (reader->Read(&piece)) {
        if (first) {
          first = false;
          const v1::CheckpointManifest& got = piece.manifest();
          absl::Status valid = CheckManifest(got);
          if (!valid.ok()) return abandon(valid);
          if (got.checkpoint() != id) {
            return abandon(
                absl::DataLossError("the scheduler sent another checkpoint"));
          }
          if (!manifest || !SameManifest(*manifest, got)) {
            // First contact, or it changed meanwhile: start over.
            manifest = got;
            chunks = Chunks(*manifest);
            stats.bytes_total = TotalBytes(*manifest);
            stats.chunks_total = static_cast<int64_t>(chunks.size());
            fs::remove_all(staging, ec);
            absl::Status made = Preallocate(staging, *manifest);
            if (!made.ok()) return abandon(made);
            if (next != 0) {
              next = 0;
              return abandon(
                  absl::AbortedError("checkpoint changed; starting over"));
            }
          }
          continue;  // the first message is the manifest alone
        }
        if (piece.index() != next ||
            next >= static_cast<int64_t>(chunks.size())) {
          return abandon(absl::DataLossError(
              absl::StrCat("expected chunk ", next, ", got ", piece.index())));
        }
        const ChunkRef& ref = chunks[next];
        if (static_cast<int64_t>(piece.data().size()) != ref.length ||
            Sha256(piece.data()) != *ref.hash) {
          return abandon(absl::DataLossError(absl::StrCat(
              "chunk ", next, " of ", id, " does not match its SHA-256")));
        }
        absl::Status written = WriteRange(
            target.parent_path().string(),
            FilePath(staging, *manifest, ref.file), ref.offset, piece.data());
        if (!written.ok()) return abandon(written);
        stats.bytes_sent += ref.length;
        ++stats.chunks_sent;
        ++next;
      }
      DIAL_RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
      if (!manifest) return absl::DataLossError("no manifest was sent");
      if (next != static_cast<int64_t>(chunks.size())) {
        return absl::UnavailableError("the download ended early");
      }
      DIAL_RETURN_IF_ERROR(SyncAll(staging, *manifest));
      DIAL_RETURN_IF_ERROR(
          Install(target.parent_path().string(), staging, dest));
      return stats;
    });
    if (!result.ok()) fs::remove_all(staging, ec);
    return result;
  }

 private:
  // Best effort: an abort that fails leaves the session to expire.
  void Abort(const v1::TrialLease& lease, const std::string& upload_id) {
    v1::AbortUploadRequest request;
    *request.mutable_lease() = lease;
    request.set_upload_id(upload_id);
    v1::AbortUploadResponse response;
    grpc::ClientContext ctx;
    Prepare(ctx, 0);
    (void)stub_->AbortUpload(&ctx, request, &response);
  }
  void Prepare(grpc::ClientContext& ctx, int64_t bytes) {
    Authorize(ctx, options_.token);
    // Wait for (and so drive) the connection instead of failing at once:
    // a retry after a partition then finds the channel connected.
    ctx.set_wait_for_ready(true);
    const absl::Duration timeout =
        options_.call_timeout +
        absl::Seconds(static_cast<double>(bytes) /
                      static_cast<double>(options_.min_bytes_per_second));
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }

  template <typename Attempt>
  absl::StatusOr<TransferStats> Retrying(Attempt&& attempt) {
    const absl::Time give_up = absl::Now() + options_.give_up_after;
    absl::Duration backoff = absl::Milliseconds(200);
    while (true) {
      absl::StatusOr<TransferStats> result = attempt();
      if (result.ok() || !IsRetryableTransferError(result.status()) ||
          absl::Now() + backoff > give_up || !options_.sleep(backoff)) {
        return result;
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }

  GrpcCheckpointTransferOptions options_;
  std::unique_ptr<v1::CheckpointService::Stub> stub_;
};

}  // namespace

bool IsRetryableTransferError(const absl::Status& s) {
  if (IsCheckpointQuotaRefusal(s)) return false;  // waiting frees no disk
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsResourceExhausted(s) || absl::IsAborted(s) ||
         absl::IsDataLoss(s) || absl::IsCancelled(s);
}

std::unique_ptr<CheckpointTransfer> NewGrpcCheckpointTransfer(
    const GrpcCheckpointTransferOptions& options) {
  return std::make_unique<GrpcCheckpointTransfer>(options);
}

absl::StatusOr<std::unique_ptr<CheckpointTransfer>> ConnectCheckpointTransfer(
    const ConnectOptions& connect, GrpcCheckpointTransferOptions options) {
  DIAL_ASSIGN_OR_RETURN(options.channel,
                        MakeChannel(connect, grpc::ChannelArguments()));
  options.token = connect.token;
  return NewGrpcCheckpointTransfer(options);
}

}  // namespace dial::transfer
