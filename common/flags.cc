#include "common/flags.h"

#include <filesystem>

namespace dial {

std::vector<std::string> DashesToUnderscores(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    const size_t start = a[1] == '-' ? 2 : 1;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t j = start; j < end; ++j) {
      if (a[j] == '-') a[j] = '_';
    }
  }
  for (size_t i = 0; i < args.size(); ++i) argv[i] = args[i].data();
  return args;
}

std::string DefaultTrainerPath() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  fs::path sibling = self.parent_path() / "dial-train";
  fs::path built = self.parent_path().parent_path() / "trainer" / "dial-train";
  if (!ec && fs::exists(sibling)) return sibling.string();
  if (!ec && fs::exists(built)) return built.string();
  return "dial-train";
}

}  // namespace dial
