#include "common/flags.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/ascii.h"

namespace dial {

namespace {

void Rewrite(std::string& a) {
  if (a.size() < 2 || a[0] != '-') return;
  const size_t start = a[1] == '-' ? 2 : 1;
  const size_t end = std::min(a.find('='), a.size());
  for (size_t j = start; j < end; ++j) {
    if (a[j] == '-') a[j] = '_';
  }
}

// The flags of a flag file: one per line; blank lines and lines starting
// with '#' are skipped. nullopt when it cannot be read.
std::optional<std::vector<std::string>> ReadFlagFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::vector<std::string> flags;
  std::string line;
  while (std::getline(in, line)) {
    std::string flag(absl::StripAsciiWhitespace(line));
    if (!flag.empty() && flag[0] != '#') flags.push_back(flag);
  }
  return flags;
}

// Appends `in` to `out`, rewritten, with each readable --flagfile expanded
// in place (nested up to `depth` levels). An unreadable one stays for
// Abseil to report; one nested deeper becomes an unknown flag that names
// the problem.
void Expand(const std::vector<std::string>& in, int depth,
            std::vector<std::string>* out) {
  bool done = false;
  for (size_t i = 0; i < in.size(); ++i) {
    std::string a = in[i];
    if (a == "--") done = true;
    if (done) {
      out->push_back(a);
      continue;
    }
    Rewrite(a);
    std::optional<std::string> path;
    if (a.rfind("--flagfile=", 0) == 0) path = a.substr(11);
    if (a.rfind("-flagfile=", 0) == 0) path = a.substr(10);
    if ((a == "--flagfile" || a == "-flagfile") && i + 1 < in.size()) {
      path = in[++i];
      a = "--flagfile=" + *path;
    }
    std::optional<std::vector<std::string>> flags;
    if (path && depth == 0) {
      // Abseil would follow a cycle forever: make it an error it names.
      out->push_back("--flagfile_nested_too_deep=" + *path);
      continue;
    }
    if (path) flags = ReadFlagFile(*path);
    if (flags) {
      Expand(*flags, depth - 1, out);
    } else {
      out->push_back(a);
    }
  }
}

}  // namespace

std::vector<std::string> DashesToUnderscores(int& argc, char**& argv) {
  std::vector<std::string> args;
  if (argc > 0) args.push_back(argv[0]);
  Expand(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), 8,
         &args);
  static std::vector<std::vector<char*>> pointers;  // alive until exit
  pointers.emplace_back();
  for (auto& a : args) pointers.back().push_back(a.data());
  pointers.back().push_back(nullptr);
  argc = static_cast<int>(args.size());
  argv = pointers.back().data();
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
