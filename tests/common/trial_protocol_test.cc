// The trial protocol's report parser: what a trial may write as a step.
#include "common/trial_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace dial {
namespace {

using ::testing::HasSubstr;

TEST(ParseReportTest, TakesAnIntegerStepUpTo2To53) {
  auto report =
      ParseReport(R"({"step": 9007199254740992, "metrics": {"loss": 0.5}})");
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->step, int64_t{1} << 53);
  EXPECT_EQ(report->metrics.at("loss"), 0.5);

  auto zero = ParseReport(R"({"step": 0, "metrics": {"loss": 1}})");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->step, 0);
}

// Finding 6b: a step of 1e300 was cast to int64 (undefined behaviour).
TEST(ParseReportTest, AStepPast2To53IsAProtocolError) {
  for (const char* step : {"1e300", "9007199254740994", "1.8e19"}) {
    auto report = ParseReport(std::string(R"({"step": )") + step +
                              R"(, "metrics": {"loss": 1}})");
    ASSERT_FALSE(report.ok()) << step;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(report.status().message(), HasSubstr("at most 2^53")) << step;
  }
}

TEST(ParseReportTest, ANegativeOrFractionalStepIsAProtocolError) {
  for (const char* step : {"-1", "1.5", "-1e300", "\"3\""}) {
    auto report = ParseReport(std::string(R"({"step": )") + step +
                              R"(, "metrics": {"loss": 1}})");
    ASSERT_FALSE(report.ok()) << step;
    EXPECT_THAT(report.status().message(),
                HasSubstr("must be a non-negative integer"))
        << step;
  }
}

// A trial may report the absolute path of the checkpoint it wrote in its
// own DIAL_CHECKPOINT_DIR; the id is that path relative to the root.
// Anything else is left for the scheduler to refuse.
TEST(CheckpointIdOfTest, AnAbsolutePathInTheTrialsDirectoryBecomesItsId) {
  EXPECT_EQ(CheckpointIdOf("/ck/s/3/step-5", "/ck", "s", 3), "s/3/step-5");
  EXPECT_EQ(CheckpointIdOf("/ck//s/3/./a/b.pt", "/ck/", "s", 3), "s/3/a/b.pt");
  EXPECT_EQ(CheckpointIdOf("s/3/7", "/ck", "s", 3), "s/3/7");  // already one
  EXPECT_EQ(CheckpointIdOf("", "/ck", "s", 3), "");
  // Outside it: another trial, another study, another root, a climb out,
  // the directory itself.
  for (const char* outside :
       {"/ck/s/4/x", "/ck/t/3/x", "/other/s/3/x", "/ck/s/3/../4/x",
        "/ck/s/30/x", "/ck/s/3", "/ck/s/3/"}) {
    EXPECT_EQ(CheckpointIdOf(outside, "/ck", "s", 3), outside) << outside;
  }
}

}  // namespace
}  // namespace dial
