#include "transfer/manifest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/beneath.h"
#include "common/status.h"

namespace dial::transfer {
namespace {

namespace fs = std::filesystem;

constexpr char kSidecar[] = ".dial-chunks";

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status FsyncPath(const std::string& path, bool directory) {
  Fd fd(::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY));
  if (fd.fd < 0) return IoError("cannot open", path);
  if (::fsync(fd.fd) != 0) return IoError("cannot fsync", path);
  return absl::OkStatus();
}

std::string Parent(const std::string& path) {
  return fs::path(path).parent_path().string();
}

// Hashes one file below `root` chunk by chunk into `file`.
absl::Status HashFile(const std::string& root, const std::string& path,
                      int64_t chunk_size, v1::CheckpointFile* file) {
  auto opened = OpenBeneath(root, path, O_RDONLY);
  if (!opened.ok()) return opened.status();
  Fd fd(opened->release());
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return IoError("cannot stat", path);
  file->set_size(st.st_size);
  std::string buffer(static_cast<size_t>(chunk_size), '\0');
  for (int64_t offset = 0; offset < st.st_size; offset += chunk_size) {
    const int64_t want = std::min<int64_t>(chunk_size, st.st_size - offset);
    int64_t got = 0;
    while (got < want) {
      const ssize_t n = ::pread(fd.fd, buffer.data() + got,
                                static_cast<size_t>(want - got), offset + got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError("cannot read", path);
      if (n == 0) {
        return absl::UnavailableError(
            absl::StrCat(path, " shrank while it was being read"));
      }
      got += n;
    }
    file->add_chunks(Sha256(absl::string_view(buffer.data(), want)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Sha256(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(digest), length);
}

std::string Hex(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

bool IsSidecarName(absl::string_view name) {
  return name == kSidecar || (name.size() > sizeof(kSidecar) &&
                              name[0] == '.' && absl::EndsWith(name, kSidecar));
}

std::string SidecarPath(const std::string& root,
                        const v1::CheckpointManifest& m) {
  const fs::path path = fs::path(root) / m.checkpoint();
  if (m.directory()) return (path / kSidecar).string();
  return (path.parent_path() /
          absl::StrCat(".", path.filename().string(), kSidecar))
      .string();
}

bool SafeRelativePath(absl::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != path.npos) {
    return false;
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

absl::StatusOr<v1::CheckpointManifest> Describe(const std::string& root,
                                                const std::string& id,
                                                int64_t chunk_size) {
  if (!SafeRelativePath(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", id, "': not a relative path"));
  }
  const std::string base = (fs::path(root) / id).string();
  // Security round two, H2: `ln -s / <trial dir>/r` made <trial>/r/etc/...
  // a checkpoint id; no component below the root may be a link.
  absl::Status plain = CheckNoLinksBeneath(root, id);
  if (absl::IsPermissionDenied(plain)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", id, ": ", plain.message()));
  }
  struct stat st {};
  if (!plain.ok() || ::lstat(base.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not found"));
  }
  v1::CheckpointManifest m;
  m.set_checkpoint(id);
  m.set_chunk_size(chunk_size);
  if (S_ISREG(st.st_mode)) {
    DIAL_RETURN_IF_ERROR(HashFile(root, base, chunk_size, m.add_files()));
    return m;
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", id, " is neither a file nor a directory"));
  }
  m.set_directory(true);
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(base, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::file_status status = it->symlink_status();
    const std::string name = fs::relative(it->path(), base).string();
    if (fs::is_directory(status)) continue;
    if (!fs::is_regular_file(status)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", id, ": ", name, " is not a regular file"));
    }
    if (IsSidecarName(it->path().filename().string())) continue;
    names.push_back(name);
  }
  if (ec) return IoError("cannot list", base);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    v1::CheckpointFile* file = m.add_files();
    file->set_name(name);
    DIAL_RETURN_IF_ERROR(
        HashFile(root, (fs::path(base) / name).string(), chunk_size, file));
  }
  return m;
}

absl::Status CheckManifest(const v1::CheckpointManifest& m) {
  if (!SafeRelativePath(m.checkpoint())) {
    return absl::InvalidArgumentError(
        "manifest.checkpoint: must be a relative path of plain components");
  }
  if (m.chunk_size() < 4096 || m.chunk_size() > (16 << 20)) {
    return absl::InvalidArgumentError(
        "manifest.chunk_size: must be within [4096, 16 MiB]");
  }
  if (m.files_size() > kMaxCheckpointFiles) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest.files: at most ", kMaxCheckpointFiles, " files"));
  }
  if (!m.directory() && (m.files_size() != 1 || !m.files(0).name().empty())) {
    return absl::InvalidArgumentError(
        "manifest.files: a one-file checkpoint has exactly one unnamed file");
  }
  std::set<std::string> names;
  int64_t total = 0;
  for (int i = 0; i < m.files_size(); ++i) {
    const v1::CheckpointFile& f = m.files(i);
    const std::string field = absl::StrCat("manifest.files[", i, "]");
    if (m.directory() &&
        (!SafeRelativePath(f.name()) ||
         IsSidecarName(fs::path(f.name()).filename().string()) ||
         !names.insert(f.name()).second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ".name: must be a distinct relative path of plain components"));
    }
    if (f.size() < 0 || f.size() > kMaxCheckpointBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".size: out of range"));
    }
    total += f.size();
    if (total > kMaxCheckpointBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: a checkpoint holds at most ",
                       kMaxCheckpointBytes >> 30, " GiB"));
    }
    const int64_t chunks = (f.size() + m.chunk_size() - 1) / m.chunk_size();
    if (f.chunks_size() != chunks) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".chunks: ", f.chunks_size(), " hashes for ",
                       chunks, " chunks"));
    }
    for (const std::string& hash : f.chunks()) {
      if (hash.size() != 32) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".chunks: each is a 32-byte SHA-256"));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<ChunkRef> Chunks(const v1::CheckpointManifest& m) {
  std::vector<ChunkRef> chunks;
  for (int f = 0; f < m.files_size(); ++f) {
    const v1::CheckpointFile& file = m.files(f);
    for (int k = 0; k < file.chunks_size(); ++k) {
      const int64_t offset = k * m.chunk_size();
      chunks.push_back({f, offset,
                        std::min<int64_t>(m.chunk_size(), file.size() - offset),
                        &file.chunks(k)});
    }
  }
  return chunks;
}

int64_t TotalBytes(const v1::CheckpointManifest& m) {
  int64_t total = 0;
  for (const auto& f : m.files()) total += f.size();
  return total;
}

std::string FilePath(const std::string& base, const v1::CheckpointManifest& m,
                     int file) {
  if (!m.directory()) return base;
  return (fs::path(base) / m.files(file).name()).string();
}

absl::StatusOr<std::string> ReadRange(const std::string& root,
                                      const std::string& path, int64_t offset,
                                      int64_t length) {
  auto opened = OpenBeneath(root, path, O_RDONLY);
  if (!opened.ok()) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", opened.status().message()));
  }
  Fd fd(opened->release());
  std::string data(static_cast<size_t>(length), '\0');
  int64_t got = 0;
  while (got < length) {
    const ssize_t n = ::pread(fd.fd, data.data() + got,
                              static_cast<size_t>(length - got), offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot read", path);
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, " is shorter than ", offset + length, " bytes"));
    }
    got += n;
  }
  return data;
}

absl::Status WriteRange(const std::string& root, const std::string& path,
                        int64_t offset, absl::string_view data) {
  auto opened = OpenBeneath(root, path, O_WRONLY | O_CREAT, 0644);
  if (!opened.ok()) return opened.status();
  Fd fd(opened->release());
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd.fd, data.data() + done, data.size() - done,
                               offset + static_cast<int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("cannot write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status Preallocate(const std::string& base,
                         const v1::CheckpointManifest& m) {
  // Everything is made below the staging path's parent, never through a
  // link a trial put there.
  const std::string root = Parent(base);
  if (m.directory()) DIAL_RETURN_IF_ERROR(MakeDirsBeneath(root, base));
  for (int f = 0; f < m.files_size(); ++f) {
    const std::string path = FilePath(base, m, f);
    DIAL_RETURN_IF_ERROR(MakeDirsBeneath(root, Parent(path)));
    auto opened = OpenBeneath(root, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!opened.ok()) return opened.status();
    Fd fd(opened->release());
    if (::ftruncate(fd.fd, m.files(f).size()) != 0) {
      return IoError("cannot size", path);
    }
  }
  return absl::OkStatus();
}

absl::Status SyncAll(const std::string& base, const v1::CheckpointManifest& m) {
  std::set<std::string> dirs;
  for (int f = 0; f < m.files_size(); ++f) {
    const std::string path = FilePath(base, m, f);
    DIAL_RETURN_IF_ERROR(FsyncPath(path, false));
    if (m.directory()) dirs.insert(Parent(path));
  }
  for (const std::string& dir : dirs) {
    DIAL_RETURN_IF_ERROR(FsyncPath(dir, true));
  }
  return absl::OkStatus();
}

absl::Status Install(const std::string& root, const std::string& staging,
                     const std::string& target) {
  const std::string parent = Parent(target);
  DIAL_RETURN_IF_ERROR(MakeDirsBeneath(root, parent));
  // Both names are looked up in descriptors of directories reached without
  // links: a link a trial put in place of a name is renamed, never followed.
  auto to_dir = OpenBeneath(root, parent, O_RDONLY | O_DIRECTORY);
  if (!to_dir.ok()) return to_dir.status();
  auto from_dir = OpenBeneath(root, Parent(staging), O_RDONLY | O_DIRECTORY);
  if (!from_dir.ok()) return from_dir.status();
  const std::string from = fs::path(staging).filename().string();
  const std::string to = fs::path(target).filename().string();
  if (::renameat(from_dir->get(), from.c_str(), to_dir->get(), to.c_str()) !=
      0) {
    if (errno != ENOTEMPTY && errno != EEXIST) {
      return IoError("cannot rename into", target);
    }
    // A directory of the same id is there (the same path reported again):
    // swap in one step, then delete the old one.
    if (::renameat2(from_dir->get(), from.c_str(), to_dir->get(), to.c_str(),
                    RENAME_EXCHANGE) != 0) {
      return IoError("cannot exchange into", target);
    }
    std::error_code ec;
    fs::remove_all(staging, ec);
  }
  if (::fsync(to_dir->get()) != 0) return IoError("cannot fsync", parent);
  return absl::OkStatus();
}

absl::StatusOr<v1::CheckpointManifest> ReadSidecar(const std::string& root,
                                                   const std::string& id) {
  if (!SafeRelativePath(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", id, "': not a relative path"));
  }
  const std::string base = (fs::path(root) / id).string();
  std::error_code ec;
  v1::CheckpointManifest probe;
  probe.set_checkpoint(id);
  probe.set_directory(fs::is_directory(base, ec));
  const std::string path = SidecarPath(root, probe);
  const auto size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError("no sidecar");
  auto bytes = ReadRange(root, path, 0, static_cast<int64_t>(size));
  if (!bytes.ok()) return absl::NotFoundError("no sidecar");
  v1::CheckpointManifest m;
  if (!m.ParseFromString(*bytes) || !CheckManifest(m).ok() ||
      m.directory() != probe.directory()) {
    return absl::NotFoundError("sidecar unreadable");
  }
  m.set_checkpoint(id);  // a copied directory keeps its source's sidecar
  for (int f = 0; f < m.files_size(); ++f) {
    const auto actual = fs::file_size(FilePath(base, m, f), ec);
    if (ec || static_cast<int64_t>(actual) != m.files(f).size()) {
      return absl::NotFoundError("sidecar out of date");
    }
  }
  return m;
}

absl::Status WriteSidecar(const std::string& root,
                          const v1::CheckpointManifest& m) {
  const std::string path = SidecarPath(root, m);
  const fs::path p(path);
  const std::string temp =
      (p.parent_path() /
       absl::StrCat(".tmp", std::random_device()(), "-", p.filename().string()))
          .string();
  std::string bytes;
  m.SerializeToString(&bytes);
  {
    Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    if (fd.fd < 0) return IoError("cannot create", temp);
    if (::write(fd.fd, bytes.data(), bytes.size()) !=
        static_cast<ssize_t>(bytes.size())) {
      return IoError("cannot write", temp);
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::error_code ec;
    fs::remove(temp, ec);
    return IoError("cannot rename", path);
  }
  return absl::OkStatus();
}

}  // namespace dial::transfer
