// CheckpointDepot: the scheduler's end of checkpoint transfer, over the
// checkpoint root it owns (docs/checkpoint-transfer.md). An upload is a
// session: Start takes the checkpoint's manifest and answers which chunks
// it lacks, after copying here every chunk that the checkpoint's earlier
// version or its bases (the checkpoints it derives from) already hold; Put
// writes one chunk after checking its SHA-256; Commit fsyncs the whole
// checkpoint and renames it into place, so <root>/<id> is always a whole
// checkpoint or absent. Sessions live in memory: a Start with the same
// manifest resumes one (an interrupted upload sends only what is left); a
// restarted scheduler starts them over. Downloads read a checkpoint's
// manifest (kept beside it, or computed) and its chunks, each checked
// before it leaves. No gRPC, no lease checks: the service checks who may
// call. Thread-safe: one mutex over the sessions; file I/O runs outside it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dial/v1/service.pb.h"
#include "transfer/manifest.h"

namespace dial::transfer {

struct CheckpointDepotOptions {
  std::string root;       // the scheduler's --checkpoint-root
  int max_uploads = 256;  // sessions at once
  // Sessions one principal (a worker token) may hold at once, and one
  // attempt: well below max_uploads, so that one trial that reports and
  // deletes checkpoints in a loop cannot fill the depot for everyone.
  int max_uploads_per_principal = 64;
  int max_uploads_per_attempt = 4;
  // A session untouched this long is dropped (its worker is gone or gave
  // up without AbortUpload).
  absl::Duration idle_upload_limit = absl::Minutes(5);
};

class CheckpointDepot {
 public:
  // Removes the staging of sessions of an earlier run.
  static absl::StatusOr<std::unique_ptr<CheckpointDepot>> Create(
      const CheckpointDepotOptions& options);

  struct Upload {
    std::string upload_id;
    std::string study;
    int64_t trial = 0;
    int64_t step = 0;
    std::string checkpoint;
    std::vector<int64_t> missing;  // Start only
    int64_t missing_bytes = 0;     // Start only
    int64_t copied_bytes = 0;      // Start only: found here, not sent
  };

  // Opens (or resumes) the upload of `manifest` for trial `trial` of
  // `study` at `step`. INVALID_ARGUMENT for a bad manifest or base id (a
  // base must be a safe path inside `study`); RESOURCE_EXHAUSTED when
  // max_uploads sessions are open; UNAVAILABLE on I/O errors.
  // `principal` and `attempt` (e.g. "<worker id>/<attempt>") are whom the
  // session counts against: RESOURCE_EXHAUSTED naming the cap when either
  // holds its most.
  absl::StatusOr<Upload> Start(const std::string& study, int64_t trial,
                               int64_t step,
                               const v1::CheckpointManifest& manifest,
                               const std::vector<std::string>& bases,
                               const std::string& principal = "",
                               const std::string& attempt = "");
  // Ends an upload without committing it and removes its staging. ABORTED
  // for an upload not open (or committing).
  absl::Status Abort(const std::string& upload_id);
  // Sessions open now.
  size_t OpenUploads() const;
  // Writes chunk `index` of an upload. ABORTED for an upload not open;
  // INVALID_ARGUMENT for an index out of range or data whose SHA-256 is
  // not the manifest's (nothing is written); UNAVAILABLE on I/O errors.
  absl::Status Put(const std::string& upload_id, int64_t index,
                   absl::string_view data);
  // The upload's identity (for the caller's lease checks). ABORTED.
  absl::StatusOr<Upload> Find(const std::string& upload_id) const;
  // Seals the upload at <root>/<checkpoint> (replacing an earlier version
  // of the same path) and ends the session. ABORTED for an upload not
  // open; FAILED_PRECONDITION naming how many chunks are still missing;
  // UNAVAILABLE on I/O errors (the session stays, to retry).
  absl::StatusOr<Upload> Commit(const std::string& upload_id);

  // The manifest of checkpoint `id` (a path relative to the root): the one
  // kept beside it, else computed by hashing it. NOT_FOUND if absent.
  absl::StatusOr<v1::CheckpointManifest> Manifest(const std::string& id);
  // Chunk `ref` of checkpoint `m`, checked against its hash. DATA_LOSS if
  // the bytes on disk differ (the kept manifest is then dropped, so the
  // next download hashes afresh).
  absl::StatusOr<std::string> ReadChunk(const v1::CheckpointManifest& m,
                                        const ChunkRef& ref);

  const std::string& root() const { return options_.root; }

 private:
  struct Session {
    Upload upload;
    v1::CheckpointManifest manifest;
    std::string manifest_bytes;  // to recognise a resumed upload
    std::vector<ChunkRef> chunks;
    std::vector<bool> received;
    std::string staging;
    absl::Time touched;
    bool prepared = false;  // staging made and known chunks copied
    bool committing = false;
    std::string principal, attempt;  // whom it counts against
  };
  explicit CheckpointDepot(const CheckpointDepotOptions& options)
      : options_(options) {}
  // The open session `upload_id`; ABORTED if it is not open.
  absl::StatusOr<std::shared_ptr<Session>> OpenLocked(
      const std::string& upload_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops idle sessions; returns their staging paths to delete.
  std::vector<std::string> ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies into `session`'s staging the chunks that `sources` hold.
  int64_t CopyKnownChunks(Session& session,
                          const std::vector<v1::CheckpointManifest>& sources);

  const CheckpointDepotOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
  // <study>/<trial>/<checkpoint> -> upload id.
  std::map<std::string, std::string> by_checkpoint_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dial::transfer
