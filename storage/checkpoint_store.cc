#include "storage/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/beneath.h"
#include "common/spec.h"
#include "common/status.h"

namespace dial::storage {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "MANIFEST";
constexpr char kStagingPrefix[] = ".staging-";

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return IoError("cannot open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return IoError("cannot fsync", path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status WriteFileSynced(const std::string& path, absl::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return IoError("cannot create", path);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = IoError("cannot write", path);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = IoError("cannot fsync", path);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return IoError("cannot close", path);
  return absl::OkStatus();
}

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

uint32_t Crc(absl::string_view data) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()),
            static_cast<uInt>(data.size())));
}

struct ManifestEntry {
  std::string name;
  int64_t size;
  std::string crc;
};

// A checkpoint's files are plain names in its own directory: no '/', no
// leading '.', not the manifest itself.
bool PlainFileName(absl::string_view name) {
  return !name.empty() && name != kManifest && name[0] != '.' &&
         name.find('/') == name.npos && name.find('\0') == name.npos;
}

absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(
    const std::string& text, const std::string& path) {
  std::vector<ManifestEntry> entries;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::MaxSplits(' ', 2));
    int64_t size = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &size)) {
      return absl::DataLossError(absl::StrCat("malformed manifest ", path));
    }
    // A manifest never sends a reader outside its checkpoint.
    if (!PlainFileName(parts[2])) {
      return absl::DataLossError(
          absl::StrCat("manifest ", path, " names '", parts[2].substr(0, 256),
                       "', not a file of the checkpoint"));
    }
    entries.push_back({parts[2], size, parts[1]});
  }
  return entries;
}

// Creates `dir` and returns a fresh name in it for a staging directory or
// file: <dir>/.staging-<tag>-<pid>-<counter>-<random>, never reused.
absl::StatusOr<std::string> NewStagingName(const std::string& dir,
                                           absl::string_view tag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return absl::StrCat(dir, "/", kStagingPrefix, tag, "-", ::getpid(), "-",
                      counter++, "-", rd());
}

}  // namespace

std::string CheckpointStore::MakeId(absl::string_view study, int64_t trial,
                                    int64_t step) {
  return absl::StrCat(study, "/", trial, "/", step);
}

absl::StatusOr<std::unique_ptr<FileCheckpointStore>>
FileCheckpointStore::Create(const FileCheckpointStoreOptions& options) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("checkpoint root: must not be empty");
  }
  std::error_code ec;
  fs::create_directories(options.root, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create checkpoint root ", options.root, ": ", ec.message()));
  }
  std::string root = fs::canonical(options.root, ec).string();
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve checkpoint root ", options.root, ": ", ec.message()));
  }
  auto store = std::unique_ptr<FileCheckpointStore>(
      new FileCheckpointStore(std::move(root)));
  store->PurgeRetired();  // what a crash left of deleted studies
  return store;
}

absl::Status FileCheckpointStore::RetireStudy(absl::string_view study) {
  auto status = ValidateName("checkpoint study", study);
  if (!status.ok()) return absl::InvalidArgumentError(status.message());
  const std::string dir = absl::StrCat(root_, "/", study);
  const std::string retired = absl::StrCat(root_, "/.retired-", study, "-",
                                           absl::ToUnixNanos(absl::Now()));
  // The name itself is renamed (a link is renamed, never followed).
  if (::rename(dir.c_str(), retired.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return IoError("cannot retire", dir);
  }
  return FsyncPath(root_, true);
}

absl::StatusOr<int64_t> FileCheckpointStore::SizeOf(
    absl::string_view id) const {
  if (id.empty() || id[0] == '/' ||
      !RelativeBeneath(root_, std::string(id)).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", id.substr(0, 256), "': not a path"));
  }
  const std::string path = absl::StrCat(root_, "/", id);
  DIAL_RETURN_IF_ERROR(CheckNoLinksBeneath(root_, path));
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(path, ec))) {
    const auto size = fs::file_size(path, ec);
    if (ec) return absl::NotFoundError(absl::StrCat(path, " not found"));
    return static_cast<int64_t>(size);
  }
  int64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) {
      total += static_cast<int64_t>(it->file_size(ec));
    }
  }
  return total;
}

void FileCheckpointStore::PurgeRetired() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".retired-", 0) != 0) continue;
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);  // does not follow links
  }
}

absl::StatusOr<std::string> FileCheckpointStore::TrialDir(
    absl::string_view study, int64_t trial) const {
  auto status = ValidateName("checkpoint study", study);
  if (!status.ok()) return absl::InvalidArgumentError(status.message());
  if (trial < 0) {
    return absl::InvalidArgumentError("checkpoint trial: must be >= 0");
  }
  std::string dir = absl::StrCat(root_, "/", study, "/", trial);
  // Security round two, H2: a study or trial directory that is a link
  // (planted by a trial on a shared root) would make copies, retention's
  // renames and deletes, and reads act outside the root.
  absl::Status plain = CheckNoLinksBeneath(root_, dir);
  if (absl::IsPermissionDenied(plain)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory ", plain.message()));
  }
  return dir;
}

absl::Status CheckpointStore::CheckOwnId(absl::string_view id,
                                         absl::string_view study,
                                         int64_t trial) {
  const std::string prefix = absl::StrCat(study, "/", trial, "/");
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", id.substr(0, 256), "' ", why, " (expected '", prefix,
        "<step>' or a path under '", prefix,
        "' relative to the checkpoint root; a worker-run trial may also give "
        "the absolute path of what it wrote in its DIAL_CHECKPOINT_DIR)"));
  };
  if (id.size() > 1024) return refuse("is longer than 1024 characters");
  auto parsed = ParseId(id);
  if (parsed.ok()) {
    if (parsed->study == study && parsed->trial == trial) {
      return absl::OkStatus();
    }
    return refuse("belongs to another trial");
  }
  if (!absl::StartsWith(id, prefix) || id.size() == prefix.size()) {
    return refuse("is not inside this trial's checkpoint directory");
  }
  for (absl::string_view part : absl::StrSplit(id.substr(prefix.size()), '/')) {
    if (part.empty() || part == "." || part == "..") {
      return refuse("has an empty, '.' or '..' path component");
    }
    for (char c : part) {
      if (c == '\0' || c == '\\') return refuse("has a NUL or a backslash");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointId> CheckpointStore::ParseId(absl::string_view id) {
  std::vector<std::string> parts = absl::StrSplit(id, '/');
  auto canonical = [](const std::string& text, int64_t* out) {
    return absl::SimpleAtoi(text, out) && *out >= 0 &&
           text == std::to_string(*out);
  };
  CheckpointId parsed;
  bool ok = parts.size() == 3 && canonical(parts[1], &parsed.trial);
  if (ok && !canonical(parts[2], &parsed.step)) {
    // A copy: from-<trial>-<step>.
    std::vector<std::string> from = absl::StrSplit(parts[2], '-');
    ok = from.size() == 3 && from[0] == "from" &&
         canonical(from[1], &parsed.source_trial) &&
         canonical(from[2], &parsed.step);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint id '", id,
                     "': must be <study>/<trial>/<step> with non-negative "
                     "numbers"));
  }
  parsed.study = std::move(parts[0]);
  return parsed;
}

absl::StatusOr<std::string> FileCheckpointStore::PathOf(
    absl::string_view id) const {
  DIAL_ASSIGN_OR_RETURN(CheckpointId parsed, ParseId(id));
  DIAL_ASSIGN_OR_RETURN(std::string dir, TrialDir(parsed.study, parsed.trial));
  return absl::StrCat(dir, "/", id.substr(id.rfind('/') + 1));
}

absl::StatusOr<std::string> FileCheckpointStore::BeginWrite(
    absl::string_view study, int64_t trial, int64_t step) {
  DIAL_ASSIGN_OR_RETURN(std::string dir, TrialDir(study, trial));
  if (step < 0)
    return absl::InvalidArgumentError("checkpoint step: must be >= 0");
  DIAL_ASSIGN_OR_RETURN(std::string staging,
                        NewStagingName(dir, absl::StrCat(step)));
  std::error_code ec;
  if (!fs::create_directory(staging, ec) || ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", staging, ": ", ec.message()));
  }
  return staging;
}

absl::StatusOr<CheckpointInfo> FileCheckpointStore::Commit(
    const std::string& staging, absl::string_view study, int64_t trial,
    int64_t step) {
  DIAL_ASSIGN_OR_RETURN(std::string dir, TrialDir(study, trial));
  return Seal(staging, dir, std::to_string(step), MakeId(study, trial, step));
}

absl::StatusOr<CheckpointInfo> FileCheckpointStore::Seal(
    const std::string& staging, const std::string& dir, const std::string& name,
    const std::string& id) {
  const fs::path staging_path(staging);
  if (staging_path.parent_path().string() != dir ||
      staging_path.filename().string().rfind(kStagingPrefix, 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint staging directory ", staging, " is not one of ", dir));
  }
  const std::string final_path = absl::StrCat(dir, "/", name);
  auto fail = [&](absl::Status status) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    return status;
  };
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    return fail(absl::AlreadyExistsError(
        absl::StrCat("checkpoint ", id, " already exists")));
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(staging, ec)) {
    if (!entry.is_regular_file()) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "checkpoint holds a non-file: ", entry.path().string())));
    }
    if (entry.path().filename() != kManifest) {
      names.push_back(entry.path().filename().string());
    }
  }
  if (ec) return fail(absl::UnavailableError(ec.message()));
  std::sort(names.begin(), names.end());
  std::string manifest;
  int64_t total = 0;
  for (const auto& file : names) {
    const std::string path = staging + "/" + file;
    auto data = ReadFile(path);
    if (!data.ok())
      return fail(absl::UnavailableError(data.status().message()));
    auto synced = FsyncPath(path, false);
    if (!synced.ok()) return fail(synced);
    total += static_cast<int64_t>(data->size());
    absl::StrAppend(&manifest, data->size(), " ", Hex32(Crc(*data)), " ", file,
                    "\n");
  }
  auto written = WriteFileSynced(staging + "/" + kManifest, manifest);
  if (!written.ok()) return fail(written);
  auto synced = FsyncPath(staging, true);
  if (!synced.ok()) return fail(synced);
  if (::rename(staging.c_str(), final_path.c_str()) != 0) {
    return fail(errno == ENOTEMPTY || errno == EEXIST
                    ? absl::AlreadyExistsError(
                          absl::StrCat("checkpoint ", id, " already exists"))
                    : IoError("cannot rename to", final_path));
  }
  DIAL_RETURN_IF_ERROR(FsyncPath(dir, true));
  return CheckpointInfo{id, total, Hex32(Crc(manifest))};
}

absl::StatusOr<CheckpointInfo> FileCheckpointStore::CopyInto(
    absl::string_view source_id, absl::string_view study, int64_t trial) {
  DIAL_RETURN_IF_ERROR(PathOf(source_id).status());
  DIAL_ASSIGN_OR_RETURN(CheckpointId source, ParseId(source_id));
  if (source.study != study) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", source_id, " belongs to another study than ", study));
  }
  if (source.is_copy()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", source_id, " is itself a copy"));
  }
  const std::string name =
      absl::StrCat("from-", source.trial, "-", source.step);
  const std::string id = absl::StrCat(study, "/", trial, "/", name);
  auto existing = Verify(id);
  if (existing.ok()) return existing;  // copied before
  DIAL_ASSIGN_OR_RETURN(auto files, Read(source_id));
  DIAL_ASSIGN_OR_RETURN(std::string dir, TrialDir(study, trial));
  DIAL_ASSIGN_OR_RETURN(std::string staging, Stage(study, trial, 0, files));
  return Seal(staging, dir, name, id);
}

absl::StatusOr<CheckpointInfo> FileCheckpointStore::CopyPathInto(
    absl::string_view source_id, int64_t source_trial, int64_t source_step,
    absl::string_view study, int64_t trial) {
  DIAL_RETURN_IF_ERROR(CheckOwnId(source_id, study, source_trial));
  if (source_step < 0) {
    return absl::InvalidArgumentError("checkpoint step: must be >= 0");
  }
  DIAL_ASSIGN_OR_RETURN(std::string source_dir, TrialDir(study, source_trial));
  DIAL_ASSIGN_OR_RETURN(std::string dir, TrialDir(study, trial));
  std::error_code ec;
  // Inside the source trial's directory, reached through no link at all.
  const fs::path source = fs::path(root_) / std::string(source_id);
  absl::Status plain = CheckNoLinksBeneath(source_dir, source.string());
  if (absl::IsPermissionDenied(plain) || absl::IsInvalidArgument(plain)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", source_id, " is not a plain path in ",
                     source_dir, ": ", plain.message()));
  }
  if (!fs::exists(source, ec)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", source_id, " not found"));
  }
  const std::string name =
      absl::StrCat("from-", source_trial, "-", source_step);
  const std::string id = absl::StrCat(study, "/", trial, "/", name);
  const std::string final_path = absl::StrCat(dir, "/", name);
  if (fs::exists(final_path, ec)) return CheckpointInfo{id, 0, ""};
  DIAL_ASSIGN_OR_RETURN(const std::string staging, NewStagingName(dir, "copy"));
  auto fail = [&](absl::Status status) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    return status;
  };
  // Links inside are copied as links (never followed); downloads and
  // uploads refuse them.
  fs::copy(source, staging,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) {
    return fail(absl::UnavailableError(absl::StrCat(
        "cannot copy ", source.string(), " to ", staging, ": ", ec.message())));
  }
  int64_t total = 0;
  if (fs::is_directory(staging, ec)) {
    for (auto it = fs::recursive_directory_iterator(staging, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_symlink()) continue;
      const bool is_dir = it->is_directory();
      if (!is_dir) total += static_cast<int64_t>(it->file_size());
      auto synced = FsyncPath(it->path().string(), is_dir);
      if (!synced.ok()) return fail(synced);
    }
    if (ec) {
      return fail(absl::UnavailableError(
          absl::StrCat("cannot list ", staging, ": ", ec.message())));
    }
    auto synced = FsyncPath(staging, true);
    if (!synced.ok()) return fail(synced);
  } else {
    total = static_cast<int64_t>(fs::file_size(staging, ec));
    auto synced = FsyncPath(staging, false);
    if (!synced.ok()) return fail(synced);
  }
  if (::rename(staging.c_str(), final_path.c_str()) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST) {
      // A concurrent copy of the same source won: the same checkpoint.
      (void)fail(absl::OkStatus());
      return CheckpointInfo{id, total, ""};
    }
    return fail(IoError("cannot rename to", final_path));
  }
  DIAL_RETURN_IF_ERROR(FsyncPath(dir, true));
  return CheckpointInfo{id, total, ""};
}

absl::StatusOr<CheckpointInfo> FileCheckpointStore::Write(
    absl::string_view study, int64_t trial, int64_t step,
    const std::map<std::string, std::string>& files) {
  DIAL_ASSIGN_OR_RETURN(std::string staging, Stage(study, trial, step, files));
  return Commit(staging, study, trial, step);
}

absl::StatusOr<std::string> FileCheckpointStore::Stage(
    absl::string_view study, int64_t trial, int64_t step,
    const std::map<std::string, std::string>& files) {
  DIAL_ASSIGN_OR_RETURN(std::string staging, BeginWrite(study, trial, step));
  for (const auto& [name, data] : files) {
    if (!PlainFileName(name)) {
      std::error_code ec;
      fs::remove_all(staging, ec);
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint file name '", name, "' is not allowed"));
    }
    auto status = WriteFileSynced(staging + "/" + name, data);
    if (!status.ok()) {
      std::error_code ec;
      fs::remove_all(staging, ec);
      return status;
    }
  }
  return staging;
}

absl::StatusOr<CheckpointInfo> FileCheckpointStore::Verify(
    absl::string_view id) const {
  DIAL_ASSIGN_OR_RETURN(std::string dir, PathOf(id));
  auto manifest = ReadFile(dir + "/" + kManifest);
  if (!manifest.ok()) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not found"));
  }
  DIAL_ASSIGN_OR_RETURN(auto entries, ParseManifest(*manifest, dir));
  int64_t total = 0;
  for (const auto& e : entries) {
    auto data = ReadFile(dir + "/" + e.name);
    if (!data.ok() || int64_t(data->size()) != e.size ||
        Hex32(Crc(*data)) != e.crc) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", id, ": file ", e.name, " is missing or corrupt"));
    }
    total += e.size;
  }
  return CheckpointInfo{std::string(id), total, Hex32(Crc(*manifest))};
}

absl::StatusOr<std::map<std::string, std::string>> FileCheckpointStore::Read(
    absl::string_view id) const {
  DIAL_RETURN_IF_ERROR(Verify(id).status());
  DIAL_ASSIGN_OR_RETURN(std::string dir, PathOf(id));
  DIAL_ASSIGN_OR_RETURN(std::string manifest, ReadFile(dir + "/" + kManifest));
  DIAL_ASSIGN_OR_RETURN(auto entries, ParseManifest(manifest, dir));
  std::map<std::string, std::string> files;
  for (const auto& e : entries) {
    DIAL_ASSIGN_OR_RETURN(files[e.name], ReadFile(dir + "/" + e.name));
  }
  return files;
}

absl::Status FileCheckpointStore::Delete(absl::string_view id) {
  std::string dir;
  if (ParseId(id).ok()) {
    DIAL_ASSIGN_OR_RETURN(dir, PathOf(id));
  } else {
    // A path a command trial (or an ask/tell client) reported: inside its
    // trial's directory, reached through no link.
    std::vector<std::string> parts =
        absl::StrSplit(id, absl::MaxSplits('/', 2));
    int64_t trial = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &trial)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint '", id.substr(0, 256), "' is not a trial's checkpoint"));
    }
    DIAL_RETURN_IF_ERROR(CheckOwnId(id, parts[0], trial));
    DIAL_ASSIGN_OR_RETURN(std::string trial_dir, TrialDir(parts[0], trial));
    dir = absl::StrCat(root_, "/", id);
    absl::Status plain =
        CheckNoLinksBeneath(trial_dir, fs::path(dir).parent_path().string());
    if (absl::IsPermissionDenied(plain)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", id, ": ", plain.message()));
    }
  }
  // Rename first so a crash mid-delete never leaves a half checkpoint that
  // looks whole.
  const std::string doomed =
      absl::StrCat(fs::path(dir).parent_path().string(), "/", kStagingPrefix,
                   "deleted-", fs::path(dir).filename().string());
  if (::rename(dir.c_str(), doomed.c_str()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not found"));
    }
    return IoError("cannot delete", dir);
  }
  std::error_code ec;
  fs::remove_all(doomed, ec);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> FileCheckpointStore::ListSteps(
    absl::string_view study, int64_t trial) const {
  DIAL_ASSIGN_OR_RETURN(std::string dir, TrialDir(study, trial));
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step;
    if (entry.is_directory() &&
        absl::SimpleAtoi(entry.path().filename().string(), &step) &&
        fs::exists(entry.path() / kManifest)) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace dial::storage
