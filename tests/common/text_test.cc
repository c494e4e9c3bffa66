// common/text.h: finding and escaping what would drive a terminal, and the
// log formatter that escapes every message (the third security review's
// finding 12: a worker's host forged a line of the scheduler's log).
#include "common/text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "common/logging.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

TEST(TextTest, FindsControlsBidiOverridesAndBytesThatAreNotUtf8) {
  EXPECT_EQ(FindUnsafe("plain, é, 中文, 😀", true), std::nullopt);
  EXPECT_EQ(FindUnsafe("two\nlines\tand a tab", false), std::nullopt);
  EXPECT_THAT(*FindUnsafe("two\nlines", true),
              HasSubstr("control character U+000A at byte 3"));
  EXPECT_THAT(*FindUnsafe("a\x1b[2J", false), HasSubstr("U+001B at byte 1"));
  EXPECT_THAT(*FindUnsafe("a\x7f", false), HasSubstr("U+007F"));
  EXPECT_THAT(*FindUnsafe("csi \xc2\x9b"
                          "2J",
                          false),
              HasSubstr("U+009B"));
  EXPECT_THAT(*FindUnsafe("x\xe2\x80\xae", false),
              HasSubstr("bidirectional control character U+202E"));
  EXPECT_THAT(*FindUnsafe("x\xe2\x81\xa6", false), HasSubstr("U+2066"));
  EXPECT_THAT(*FindUnsafe("x\xe2\x80\x8f", false), HasSubstr("U+200F"));
  EXPECT_THAT(*FindUnsafe("bad \xff", false), HasSubstr("not UTF-8"));
  EXPECT_THAT(*FindUnsafe("overlong \xc0\xaf", false), HasSubstr("not UTF-8"));
  EXPECT_THAT(*FindUnsafe("cut \xe4\xb8", false), HasSubstr("not UTF-8"));
}

TEST(TextTest, PrintableEscapesWhatWouldDriveATerminal) {
  EXPECT_EQ(Printable("title\x1b]0;pwned\x07"), "title\\u001b]0;pwned\\u0007");
  EXPECT_EQ(Printable("csi\xc2\x9b"
                      "6n"),
            "csi\\u009b6n");
  EXPECT_EQ(Printable("rtl\xe2\x80\xae"
                      "exe.txt"),
            "rtl\\u202eexe.txt");
  EXPECT_EQ(Printable("cr\rback"), "cr\\u000dback");
  EXPECT_EQ(Printable("bad \xff\xfe"), "bad \\xff\\xfe");
  EXPECT_EQ(Printable("keeps\nlines\tand é 中文"), "keeps\nlines\tand é 中文");
  EXPECT_EQ(Printable("one\nline", /*strict=*/true), "one\\u000aline");
}

TEST(TextTest, TheFilterJoinsSequencesSplitAcrossWrites) {
  TerminalSafeFilter filter(false);
  std::string out;
  const std::string text = "中\xc2\x9b文";
  for (char c : text) filter.Feed(std::string(1, c), &out);
  filter.Feed("\xe4", &out);  // cut short at the end
  filter.Finish(&out);
  EXPECT_EQ(out, "中\\u009b文\\xe4");
}

TEST(TextTest, LogMessagesAreOneLineWithoutControls) {
  std::ostringstream sink_text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(sink_text);
  sink->set_formatter(SafeLogFormatter());
  spdlog::logger logger("t", sink);
  logger.info("registered worker {}",
              "evil\n2026-12-07T00:00:00.000 info dial-scheduler: forged "
              "\x1b]0;pwned\x07");
  const std::string line = sink_text.str();
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  EXPECT_THAT(line, HasSubstr("info t: registered worker evil\\u000a2026"));
}

}  // namespace
}  // namespace dial
