// DashesToUnderscores: both flag spellings, and --flagfile expanded in place.
#include "common/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace dial {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

// Runs DashesToUnderscores on `args` (argv[0] included).
std::vector<std::string> Rewritten(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  char** p = argv.data();
  auto storage = DashesToUnderscores(argc, p);
  std::vector<std::string> out(p, p + argc);
  EXPECT_EQ(out, storage);
  EXPECT_EQ(p[argc], nullptr);
  return out;
}

class FlagFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dial-flags-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST(DashesToUnderscoresTest, RewritesNamesNotValuesAndStopsAtDoubleDash) {
  EXPECT_THAT(Rewritten({"prog", "--checkpoint-root=/a-b", "-worker-lease-ms",
                         "5", "--", "--not-a-flag"}),
              ElementsAre("prog", "--checkpoint_root=/a-b", "-worker_lease_ms",
                          "5", "--", "--not-a-flag"));
}

TEST_F(FlagFileTest, AFlagFileIsExpandedInPlaceWithEitherSpelling) {
  const std::string inner = Write("inner.flags", "--grace-s=90\n");
  const std::string path =
      Write("worker.flags",
            "# comment\n\n  --checkpoint-cache=/var/cache/dial  \n"
            "--trials_per_gpu=2\n--flagfile=" +
                inner + "\n");
  EXPECT_THAT(
      Rewritten(
          {"prog", "--slots=2", "--flagfile=" + path, "--log-level=debug"}),
      ElementsAre("prog", "--slots=2", "--checkpoint_cache=/var/cache/dial",
                  "--trials_per_gpu=2", "--grace_s=90", "--log_level=debug"));
  EXPECT_THAT(Rewritten({"prog", "--flagfile", inner}),
              ElementsAre("prog", "--grace_s=90"));
}

TEST_F(FlagFileTest, AnUnreadableFlagFileIsLeftForAbseilToReport) {
  const std::string missing = (dir_ / "missing.flags").string();
  EXPECT_THAT(Rewritten({"prog", "--flag-file-test", "--flagfile=" + missing}),
              ElementsAre("prog", "--flag_file_test", "--flagfile=" + missing));
}

TEST_F(FlagFileTest, AFlagFileThatIncludesItselfEnds) {
  const std::string path = (dir_ / "loop.flags").string();
  Write("loop.flags", "--slots=1\n--flagfile=" + path + "\n");
  auto out = Rewritten({"prog", "--flagfile=" + path});
  EXPECT_EQ(out.size(), 10u);  // prog, 8 levels, the error
  EXPECT_EQ(out.back(), "--flagfile_nested_too_deep=" + path);
}

}  // namespace
}  // namespace dial
