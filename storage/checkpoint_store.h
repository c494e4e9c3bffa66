// CheckpointStore: trial checkpoints on a filesystem root (local disk or a
// shared NFS/Lustre mount), laid out as <root>/<study>/<trial>/<step>/.
// A checkpoint appears whole or not at all: files are written under a
// temporary name, fsynced, described by a MANIFEST (size and CRC-32 of each
// file), and the directory is renamed into place. Ids are validated, so no id
// reaches outside the root. Thread-safe: no mutable state besides the
// filesystem; concurrent writers of one (trial, step) get ALREADY_EXISTS.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dial::storage {

struct CheckpointInfo {
  std::string id;  // "<study>/<trial>/<step>"
  int64_t size_bytes = 0;
  std::string checksum;  // CRC-32 of the manifest, hex
};

// A checkpoint id taken apart: "<study>/<trial>/<step>", or
// "<study>/<trial>/from-<source_trial>-<step>" for a copy of another
// trial's checkpoint at that step.
struct CheckpointId {
  std::string study;
  int64_t trial = 0;
  int64_t step = 0;
  int64_t source_trial = -1;  // a copy's source; -1 for a trial's own
  bool is_copy() const { return source_trial >= 0; }
};

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;

  static std::string MakeId(absl::string_view study, int64_t trial,
                            int64_t step);
  // The one parser of checkpoint ids. INVALID_ARGUMENT unless the id has
  // three parts with canonical non-negative numbers (the study name is
  // checked where a path is made of it).
  static absl::StatusOr<CheckpointId> ParseId(absl::string_view id);
  // Whether a reported id is trial `trial` of `study`'s own: a store id of
  // it (ParseId: "<study>/<trial>/<step>" or a copy "from-<t>-<s>" in its
  // directory), or a path relative to the checkpoint root inside the
  // trial's directory, "<study>/<trial>/<name>[/...]" (what command trials
  // report), with no empty, "." or ".." component. INVALID_ARGUMENT with
  // the reason otherwise. Absolute paths are never an id.
  static absl::Status CheckOwnId(absl::string_view id, absl::string_view study,
                                 int64_t trial);

  // Directory of a checkpoint id. INVALID_ARGUMENT if the id is malformed
  // (it must be <study>/<trial>/<step>, or <study>/<trial>/from-<t>-<s> for
  // a copy of trial t's step s, with a valid study name and non-negative
  // numbers), which also rules out escaping the root.
  virtual absl::StatusOr<std::string> PathOf(absl::string_view id) const = 0;

  // A new empty staging directory for a writer (e.g. the trainer) to fill
  // with plain files before Commit.
  virtual absl::StatusOr<std::string> BeginWrite(absl::string_view study,
                                                 int64_t trial,
                                                 int64_t step) = 0;
  // Seals a staging directory as checkpoint (study, trial, step).
  // ALREADY_EXISTS if that checkpoint exists; INVALID_ARGUMENT if the
  // staging directory is not one of ours or holds subdirectories;
  // UNAVAILABLE on I/O errors (the staging directory is then removed and
  // earlier checkpoints are untouched).
  virtual absl::StatusOr<CheckpointInfo> Commit(const std::string& staging,
                                                absl::string_view study,
                                                int64_t trial,
                                                int64_t step) = 0;
  // BeginWrite + files + Commit.
  virtual absl::StatusOr<CheckpointInfo> Write(
      absl::string_view study, int64_t trial, int64_t step,
      const std::map<std::string, std::string>& files) = 0;

  // Copies a verified checkpoint into `trial`'s own directory as
  // <study>/<trial>/from-<t>-<s> (PBT exploit), so deleting the source later
  // cannot hurt the copy. Copying the same source again is a no-op.
  virtual absl::StatusOr<CheckpointInfo> CopyInto(absl::string_view source_id,
                                                  absl::string_view study,
                                                  int64_t trial) = 0;

  // Checks every file against the manifest: NOT_FOUND if absent, DATA_LOSS
  // on any mismatch.
  virtual absl::StatusOr<CheckpointInfo> Verify(absl::string_view id) const = 0;
  // The files of a verified checkpoint.
  virtual absl::StatusOr<std::map<std::string, std::string>> Read(
      absl::string_view id) const = 0;
  virtual absl::Status Delete(absl::string_view id) = 0;
  // A deleted study's checkpoints, all of them: RetireStudy moves them out
  // of the study's name at once (a new study of that name starts empty);
  // PurgeRetired removes what was retired (slow: run it off any lock).
  virtual absl::Status RetireStudy(absl::string_view study) {
    return absl::OkStatus();
  }
  virtual void PurgeRetired() {}
  // The bytes checkpoint `id` takes (a store id or a trial's own path; a
  // directory's regular files, links not followed). NOT_FOUND if absent.
  virtual absl::StatusOr<int64_t> SizeOf(absl::string_view id) const {
    return absl::NotFoundError("no sizes in this store");
  }
  // Committed steps of a trial, ascending.
  virtual absl::StatusOr<std::vector<int64_t>> ListSteps(
      absl::string_view study, int64_t trial) const = 0;
};

struct FileCheckpointStoreOptions {
  std::string root;  // created if missing
};

class FileCheckpointStore : public CheckpointStore {
 public:
  static absl::StatusOr<std::unique_ptr<FileCheckpointStore>> Create(
      const FileCheckpointStoreOptions& options);

  absl::StatusOr<std::string> PathOf(absl::string_view id) const override;
  absl::StatusOr<std::string> BeginWrite(absl::string_view study, int64_t trial,
                                         int64_t step) override;
  absl::StatusOr<CheckpointInfo> Commit(const std::string& staging,
                                        absl::string_view study, int64_t trial,
                                        int64_t step) override;
  absl::StatusOr<CheckpointInfo> Write(
      absl::string_view study, int64_t trial, int64_t step,
      const std::map<std::string, std::string>& files) override;
  absl::StatusOr<CheckpointInfo> CopyInto(absl::string_view source_id,
                                          absl::string_view study,
                                          int64_t trial) override;
  // Renames <root>/<study> to <root>/.retired-<study>-<nanos> and fsyncs
  // the root; NotFound-free (a study without checkpoints is fine).
  absl::Status RetireStudy(absl::string_view study) override;
  // Removes every .retired-* directory (also those a crash left).
  void PurgeRetired() override;
  absl::StatusOr<int64_t> SizeOf(absl::string_view id) const override;
  // PBT exploit of a command trial: copies the file or directory that
  // trial `source_trial` reported as its checkpoint of `source_step`
  // (`source_id`, a path relative to the root inside that trial's
  // directory) into `trial`'s directory as <study>/<trial>/from-<t>-<s>; a
  // file stays a file, a directory a directory (symbolic links inside it
  // are copied as links). Written under a staging name, fsynced and
  // renamed, so the copy appears whole or not at all; copying the same
  // source again is a no-op.
  absl::StatusOr<CheckpointInfo> CopyPathInto(absl::string_view source_id,
                                              int64_t source_trial,
                                              int64_t source_step,
                                              absl::string_view study,
                                              int64_t trial);
  absl::StatusOr<CheckpointInfo> Verify(absl::string_view id) const override;
  absl::StatusOr<std::map<std::string, std::string>> Read(
      absl::string_view id) const override;
  // Deletes a checkpoint: a store id, or a path a command trial reported
  // inside its trial's directory (CheckOwnId), renamed away first and
  // never reached through a link. NOT_FOUND when it is not there.
  absl::Status Delete(absl::string_view id) override;
  absl::StatusOr<std::vector<int64_t>> ListSteps(absl::string_view study,
                                                 int64_t trial) const override;

  const std::string& root() const { return root_; }

 private:
  explicit FileCheckpointStore(std::string root) : root_(std::move(root)) {}
  absl::StatusOr<std::string> TrialDir(absl::string_view study,
                                       int64_t trial) const;
  // A staging directory holding `files` (plain names only), fsynced.
  absl::StatusOr<std::string> Stage(
      absl::string_view study, int64_t trial, int64_t step,
      const std::map<std::string, std::string>& files);
  // Seals `staging` as <trial dir>/<name> with id `id`.
  absl::StatusOr<CheckpointInfo> Seal(const std::string& staging,
                                      const std::string& dir,
                                      const std::string& name,
                                      const std::string& id);
  std::string root_;
};

}  // namespace dial::storage
