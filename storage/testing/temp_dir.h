// ScopedTempDir: a fresh directory under the system's temporary directory,
// named "dial-<prefix>-<pid>-XXXXXX", removed with everything in it when the
// object goes. Tests hold one per test (a member of the fixture, or a local)
// so that nothing is left behind, pass or fail. Not thread-safe.
#pragma once

#include <filesystem>
#include <string>

namespace dial::storage::testing {

class ScopedTempDir {
 public:
  // Crashes if the directory cannot be made (a test cannot go on).
  explicit ScopedTempDir(const std::string& prefix = "test");
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // A path for `name` inside the directory (not created).
  std::string File(const std::string& name) const {
    return (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace dial::storage::testing
