// CheckpointTransfer: moves checkpoints between a host's own checkpoint
// root and the scheduler's store over CheckpointService, for workers with
// --checkpoint-cache and for dialctl (docs/checkpoint-transfer.md). Both
// directions ride out a bad network: each call has a deadline, retryable
// failures (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED)
// are retried with backoff until `give_up_after`, and a retry resumes: an
// upload sends only the chunks the scheduler still lacks, a download asks
// for the chunks after the last one it wrote. Every chunk is checked
// against its SHA-256. Thread-safe: calls share the channel only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_channel.h"
#include "dial/v1/service.pb.h"

namespace grpc {
class Channel;
}

namespace dial::transfer {

struct TransferStats {
  int64_t bytes_total = 0;  // the checkpoint's size
  int64_t bytes_sent = 0;   // chunk bytes that crossed the network
  int64_t chunks_total = 0;
  int64_t chunks_sent = 0;
  int attempts = 0;            // StartUpload / DownloadCheckpoint calls
  bool restore_point = false;  // Upload: the trial now restores from it
};

class CheckpointTransfer {
 public:
  virtual ~CheckpointTransfer() = default;
  // Uploads <root>/<id> (reported by `lease`'s attempt at `step`) and
  // commits it. `bases` are checkpoints it derives from, whose chunks the
  // scheduler already has. Fencing errors (FAILED_PRECONDITION, NOT_FOUND,
  // PERMISSION_DENIED) and bad checkpoints (INVALID_ARGUMENT) end it at
  // once; retryable ones after give_up_after (their last status).
  virtual absl::StatusOr<TransferStats> Upload(
      const v1::TrialLease& lease, int64_t step, const std::string& root,
      const std::string& id, const std::vector<std::string>& bases) = 0;
  // Downloads checkpoint `id` of `study` to `dest` (a file or directory
  // path, replaced atomically; its parent is created). Same errors.
  virtual absl::StatusOr<TransferStats> Download(const std::string& study,
                                                 const std::string& id,
                                                 const std::string& dest) = 0;
};

struct GrpcCheckpointTransferOptions {
  std::shared_ptr<grpc::Channel> channel;  // required
  std::string token;                       // bearer token; empty: none
  absl::Duration call_timeout = absl::Seconds(30);
  // A stream's deadline is call_timeout plus its bytes at this rate.
  int64_t min_bytes_per_second = 1 << 20;
  absl::Duration give_up_after = absl::Minutes(30);
  absl::Duration max_backoff = absl::Seconds(5);
  // Waits between retries; returns false to give up at once (shutdown).
  // Default: sleeps.
  std::function<bool(absl::Duration)> sleep;
};

std::unique_ptr<CheckpointTransfer> NewGrpcCheckpointTransfer(
    const GrpcCheckpointTransferOptions& options);
// The same over a channel of its own to `connect` (options.channel is
// ignored): bulk transfers never queue up behind or ahead of reports.
// Errors as MakeChannel.
absl::StatusOr<std::unique_ptr<CheckpointTransfer>> ConnectCheckpointTransfer(
    const ConnectOptions& connect, GrpcCheckpointTransferOptions options);

// Whether a failed transfer call is worth retrying.
bool IsRetryableTransferError(const absl::Status& status);

}  // namespace dial::transfer
