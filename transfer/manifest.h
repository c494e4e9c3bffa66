// Checkpoints as chunked files, the unit of checkpoint transfer between
// hosts (docs/checkpoint-transfer.md): a manifest lists a checkpoint's
// files with their sizes and the SHA-256 of each fixed-size chunk, so two
// checkpoints that share chunks share their names, and every byte that
// crosses the network is checked. A checkpoint id names either a directory
// (a trainer checkpoint, a command trial's directory) or one file, relative
// to a checkpoint root. Thread-safe: plain functions of their arguments and
// the filesystem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dial/v1/service.pb.h"

namespace dial::transfer {

// 1 MiB: small enough that a changed layer re-sends little, large enough
// that a 1 GiB checkpoint is 1,024 names.
inline constexpr int64_t kChunkSize = 1 << 20;
// What a manifest may describe (a hostile one must not make the scheduler
// allocate or write without bound).
inline constexpr int64_t kMaxCheckpointBytes = int64_t{256} << 30;
inline constexpr int kMaxCheckpointFiles = 100000;

// SHA-256 of `data`: 32 raw bytes.
std::string Sha256(absl::string_view data);
// Lower-case hex of raw bytes.
std::string Hex(absl::string_view bytes);

// The file the scheduler keeps beside (for a one-file checkpoint) or inside
// (for a directory) an uploaded checkpoint: its manifest, so later uploads
// of the same trial and downloads need not hash it again. Never part of a
// manifest.
std::string SidecarPath(const std::string& root,
                        const v1::CheckpointManifest& m);
bool IsSidecarName(absl::string_view name);

// Whether `path` is a relative path of plain components: no empty, "." or
// ".." component, no leading '/', no NUL.
bool SafeRelativePath(absl::string_view path);

// Describes <root>/<id>, hashing every chunk: a directory (its regular
// files at any depth, names relative to it and sorted) or one regular file.
// NOT_FOUND if it is absent; INVALID_ARGUMENT for an unsafe id, a symlink
// anywhere below the root (the id's own components included) or another
// kind of file inside; UNAVAILABLE on read errors.
absl::StatusOr<v1::CheckpointManifest> Describe(
    const std::string& root, const std::string& id,
    int64_t chunk_size = kChunkSize);

// Checks a manifest that came over the network: a safe id, a chunk size in
// [4 KiB, 16 MiB], safe distinct file names (exactly one unnamed file when
// it is not a directory), as many 32-byte hashes as each size needs, and at
// most kMaxCheckpointBytes and kMaxCheckpointFiles. INVALID_ARGUMENT naming
// the field otherwise.
absl::Status CheckManifest(const v1::CheckpointManifest& m);

// Where chunk k of a manifest lies.
struct ChunkRef {
  int file = 0;
  int64_t offset = 0;
  int64_t length = 0;
  const std::string* hash = nullptr;  // into the manifest
};
// Every chunk of a (checked) manifest, in chunk-number order.
std::vector<ChunkRef> Chunks(const v1::CheckpointManifest& m);
int64_t TotalBytes(const v1::CheckpointManifest& m);

// The path of file `file` of checkpoint `m` under `base` (the checkpoint's
// own path: <root>/<id>).
std::string FilePath(const std::string& base, const v1::CheckpointManifest& m,
                     int file);

// Reads `length` bytes at `offset` of `path`, a file below `root` reached
// without symbolic links (common/beneath.h). NOT_FOUND if it cannot be
// opened so; DATA_LOSS if it is shorter; UNAVAILABLE on read errors.
absl::StatusOr<std::string> ReadRange(const std::string& root,
                                      const std::string& path, int64_t offset,
                                      int64_t length);
// Writes `data` at `offset` of `path` below `root` (created if missing,
// never truncated; no symbolic link followed). UNAVAILABLE on errors,
// PERMISSION_DENIED for a link on the way.
absl::Status WriteRange(const std::string& root, const std::string& path,
                        int64_t offset, absl::string_view data);
// Creates the empty files and directories of `m` under `base` (a staging
// directory or file), each file at its full size, following no symbolic
// link below base's parent.
absl::Status Preallocate(const std::string& base,
                         const v1::CheckpointManifest& m);
// fsyncs every file of `m` under `base` and the directories holding them.
absl::Status SyncAll(const std::string& base, const v1::CheckpointManifest& m);

// Puts the finished `staging` (file or directory) at `target`, atomically:
// a rename, or for an existing directory an exchange followed by deleting
// the old one. Both are below `root`, reached without symbolic links;
// target's directory is created if missing and fsynced; a link named
// `target` is replaced, never followed.
absl::Status Install(const std::string& root, const std::string& staging,
                     const std::string& target);

// The manifest stored beside <root>/<m.checkpoint()>, if it still describes
// what is there (same files and sizes); nullopt-like NOT_FOUND otherwise.
absl::StatusOr<v1::CheckpointManifest> ReadSidecar(const std::string& root,
                                                   const std::string& id);
absl::Status WriteSidecar(const std::string& root,
                          const v1::CheckpointManifest& m);

}  // namespace dial::transfer
