#include "storage/testing/temp_dir.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace dial::storage::testing {

ScopedTempDir::ScopedTempDir(const std::string& prefix) {
  std::string pattern =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("dial-", prefix, "-", ::getpid(), "-XXXXXX"))
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror(("mkdtemp " + pattern).c_str());
    std::abort();
  }
  path_ = pattern;
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace dial::storage::testing
