#include "transfer/checkpoint_depot.h"

#include <filesystem>
#include <random>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dial::transfer {
namespace {

namespace fs = std::filesystem;

constexpr char kUploads[] = ".uploads";

std::string NewUploadId() {
  std::random_device rd;
  std::string bytes;
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = rd();
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  return Hex(bytes);
}

void RemoveQuietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointDepot>> CheckpointDepot::Create(
    const CheckpointDepotOptions& options) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("checkpoint root: must not be empty");
  }
  const std::string uploads = (fs::path(options.root) / kUploads).string();
  std::error_code ec;
  fs::remove_all(uploads, ec);
  fs::create_directories(uploads, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", uploads, ": ", ec.message()));
  }
  return std::unique_ptr<CheckpointDepot>(new CheckpointDepot(options));
}

std::vector<std::string> CheckpointDepot::ExpireLocked() {
  std::vector<std::string> stale;
  const absl::Time now = absl::Now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    const Session& s = *it->second;
    if (!s.committing && now - s.touched > options_.idle_upload_limit) {
      stale.push_back(s.staging);
      by_checkpoint_.erase(absl::StrCat(s.upload.study, "/", s.upload.trial,
                                        "/", s.upload.checkpoint));
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  return stale;
}

absl::StatusOr<CheckpointDepot::Upload> CheckpointDepot::Start(
    const std::string& study, int64_t trial, int64_t step,
    const v1::CheckpointManifest& manifest,
    const std::vector<std::string>& bases, const std::string& principal,
    const std::string& attempt) {
  DIAL_RETURN_IF_ERROR(CheckManifest(manifest));
  for (const std::string& base : bases) {
    if (!SafeRelativePath(base) || !absl::StartsWith(base, study + "/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bases: '", base, "' is not a checkpoint of study ", study));
    }
  }
  std::string bytes;
  manifest.SerializeToString(&bytes);
  const std::string key =
      absl::StrCat(study, "/", trial, "/", manifest.checkpoint());
  std::shared_ptr<Session> session;
  std::vector<std::string> stale;
  bool prepare = false;
  {
    absl::MutexLock lock(&mu_);
    stale = ExpireLocked();
    auto known = by_checkpoint_.find(key);
    if (known != by_checkpoint_.end()) {
      auto it = sessions_.find(known->second);
      if (it != sessions_.end() && !it->second->committing &&
          it->second->manifest_bytes == bytes &&
          it->second->upload.step == step) {
        session = it->second;  // resumed
      } else if (it != sessions_.end() && !it->second->committing) {
        // The same path with other contents: the newer upload wins.
        stale.push_back(it->second->staging);
        sessions_.erase(it);
      }
    }
    if (!session) {
      if (static_cast<int>(sessions_.size()) >= options_.max_uploads) {
        return absl::ResourceExhaustedError(
            absl::StrCat(options_.max_uploads,
                         " checkpoint uploads are open, the most "
                         "allowed; retry later"));
      }
      // Security round two, M1: a trial that reported a checkpoint and
      // deleted it at once left a session open each time, and 265 rounds
      // filled the global cap for an hour. Each principal and attempt
      // holds a few sessions only.
      int of_principal = 0, of_attempt = 0;
      for (const auto& [id, s] : sessions_) {
        of_principal += s->principal == principal;
        of_attempt += !attempt.empty() && s->attempt == attempt;
      }
      if (of_attempt >= options_.max_uploads_per_attempt) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "attempt ", attempt, " has ", of_attempt,
            " checkpoint uploads open, the most one attempt may; commit "
            "or abort one"));
      }
      if (of_principal >= options_.max_uploads_per_principal) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "'", principal, "' has ", of_principal,
            " checkpoint uploads open, the most one principal may; commit "
            "or abort one"));
      }
      session = std::make_shared<Session>();
      session->principal = principal;
      session->attempt = attempt;
      session->upload.upload_id = NewUploadId();
      session->upload.study = study;
      session->upload.trial = trial;
      session->upload.step = step;
      session->upload.checkpoint = manifest.checkpoint();
      session->manifest = manifest;
      session->manifest_bytes = bytes;
      session->chunks = Chunks(session->manifest);
      session->received.assign(session->chunks.size(), false);
      session->staging =
          (fs::path(options_.root) / kUploads / session->upload.upload_id)
              .string();
      sessions_[session->upload.upload_id] = session;
      by_checkpoint_[key] = session->upload.upload_id;
    }
    session->touched = absl::Now();
    prepare = !session->prepared;
    session->prepared = true;
  }
  for (const std::string& path : stale) RemoveQuietly(path);

  Upload answer = session->upload;
  if (prepare) {
    absl::Status made = Preallocate(session->staging, session->manifest);
    if (!made.ok()) {
      absl::MutexLock lock(&mu_);
      sessions_.erase(session->upload.upload_id);
      by_checkpoint_.erase(key);
      return made;
    }
    // What is already here (the earlier version of this path, the bases)
    // is copied, not sent.
    std::vector<v1::CheckpointManifest> sources;
    auto previous = ReadSidecar(options_.root, manifest.checkpoint());
    if (previous.ok()) sources.push_back(std::move(*previous));
    for (const std::string& base : bases) {
      auto held = ReadSidecar(options_.root, base);
      if (held.ok()) sources.push_back(std::move(*held));
    }
    answer.copied_bytes = CopyKnownChunks(*session, sources);
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < session->chunks.size(); ++i) {
    if (session->received[i]) continue;
    answer.missing.push_back(static_cast<int64_t>(i));
    answer.missing_bytes += session->chunks[i].length;
  }
  return answer;
}

int64_t CheckpointDepot::CopyKnownChunks(
    Session& session, const std::vector<v1::CheckpointManifest>& sources) {
  struct Where {
    std::string path;
    int64_t offset;
    int64_t length;
  };
  std::unordered_map<std::string, Where> known;
  for (const v1::CheckpointManifest& m : sources) {
    const std::string base =
        (fs::path(options_.root) / m.checkpoint()).string();
    for (const ChunkRef& ref : Chunks(m)) {
      known.emplace(*ref.hash,
                    Where{FilePath(base, m, ref.file), ref.offset, ref.length});
    }
  }
  int64_t copied = 0;
  for (size_t i = 0; i < session.chunks.size(); ++i) {
    const ChunkRef& ref = session.chunks[i];
    auto it = known.find(*ref.hash);
    if (it == known.end() || it->second.length != ref.length) continue;
    auto data = ReadRange(options_.root, it->second.path, it->second.offset,
                          ref.length);
    // A kept manifest is a hint: the bytes are checked before they count.
    if (!data.ok() || Sha256(*data) != *ref.hash) continue;
    if (!WriteRange(options_.root,
                    FilePath(session.staging, session.manifest, ref.file),
                    ref.offset, *data)
             .ok()) {
      continue;
    }
    absl::MutexLock lock(&mu_);
    session.received[i] = true;
    copied += ref.length;
  }
  return copied;
}

absl::StatusOr<std::shared_ptr<CheckpointDepot::Session>>
CheckpointDepot::OpenLocked(const std::string& upload_id) const {
  auto it = sessions_.find(upload_id);
  if (it == sessions_.end() || it->second->committing) {
    return absl::AbortedError(
        absl::StrCat("upload ", upload_id, " is not open (start it again)"));
  }
  return it->second;
}

absl::Status CheckpointDepot::Put(const std::string& upload_id, int64_t index,
                                  absl::string_view data) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    DIAL_ASSIGN_OR_RETURN(session, OpenLocked(upload_id));
    session->touched = absl::Now();
  }
  if (index < 0 || index >= static_cast<int64_t>(session->chunks.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "index: ", index, " is not a chunk of ", session->upload.checkpoint));
  }
  const ChunkRef& ref = session->chunks[index];
  if (static_cast<int64_t>(data.size()) != ref.length ||
      Sha256(data) != *ref.hash) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: chunk ", index, " of ", session->upload.checkpoint,
                     " does not match its SHA-256 in the manifest"));
  }
  DIAL_RETURN_IF_ERROR(WriteRange(
      options_.root, FilePath(session->staging, session->manifest, ref.file),
      ref.offset, data));
  absl::MutexLock lock(&mu_);
  session->received[index] = true;
  return absl::OkStatus();
}

size_t CheckpointDepot::OpenUploads() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::Status CheckpointDepot::Abort(const std::string& upload_id) {
  std::string staging;
  {
    absl::MutexLock lock(&mu_);
    DIAL_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                          OpenLocked(upload_id));
    staging = session->staging;
    by_checkpoint_.erase(absl::StrCat(session->upload.study, "/",
                                      session->upload.trial, "/",
                                      session->upload.checkpoint));
    sessions_.erase(upload_id);
  }
  RemoveQuietly(staging);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointDepot::Upload> CheckpointDepot::Find(
    const std::string& upload_id) const {
  absl::MutexLock lock(&mu_);
  DIAL_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                        OpenLocked(upload_id));
  return session->upload;
}

absl::StatusOr<CheckpointDepot::Upload> CheckpointDepot::Commit(
    const std::string& upload_id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    DIAL_ASSIGN_OR_RETURN(session, OpenLocked(upload_id));
    int64_t missing = 0;
    for (bool r : session->received) missing += r ? 0 : 1;
    if (missing > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("upload of ", session->upload.checkpoint, ": ", missing,
                       " chunks are still missing"));
    }
    session->committing = true;
  }
  auto finish = [&](absl::Status status) -> absl::Status {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      sessions_.erase(upload_id);
      by_checkpoint_.erase(absl::StrCat(session->upload.study, "/",
                                        session->upload.trial, "/",
                                        session->upload.checkpoint));
    } else {
      session->committing = false;
    }
    return status;
  };
  absl::Status synced = SyncAll(session->staging, session->manifest);
  if (!synced.ok()) return finish(synced);
  const std::string target =
      (fs::path(options_.root) / session->upload.checkpoint).string();
  absl::Status installed = Install(options_.root, session->staging, target);
  if (!installed.ok()) return finish(installed);
  // Kept for dedup and downloads; a lost one is computed again.
  (void)WriteSidecar(options_.root, session->manifest);
  DIAL_RETURN_IF_ERROR(finish(absl::OkStatus()));
  return session->upload;
}

absl::StatusOr<v1::CheckpointManifest> CheckpointDepot::Manifest(
    const std::string& id) {
  auto kept = ReadSidecar(options_.root, id);
  if (kept.ok()) return kept;
  return Describe(options_.root, id);
}

absl::StatusOr<std::string> CheckpointDepot::ReadChunk(
    const v1::CheckpointManifest& m, const ChunkRef& ref) {
  const std::string base = (fs::path(options_.root) / m.checkpoint()).string();
  auto data = ReadRange(options_.root, FilePath(base, m, ref.file), ref.offset,
                        ref.length);
  if (data.ok() && Sha256(*data) == *ref.hash) return data;
  std::error_code ec;
  fs::remove(SidecarPath(options_.root, m), ec);
  if (!data.ok() && absl::IsNotFound(data.status())) return data.status();
  return absl::DataLossError(
      absl::StrCat("checkpoint ", m.checkpoint(),
                   " changed on the scheduler while it was "
                   "read; download it again"));
}

}  // namespace dial::transfer
