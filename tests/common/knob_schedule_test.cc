#include "common/knob_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "google/protobuf/util/message_differencer.h"

namespace dial {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Key;

google::protobuf::Struct Knobs(double lr) {
  google::protobuf::Struct s;
  (*s.mutable_fields())["lr"].set_number_value(lr);
  return s;
}

bool SameSchedule(const KnobSchedule& a, const KnobSchedule& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    if (i->first != j->first) return false;
    if (!google::protobuf::util::MessageDifferencer::Equals(i->second,
                                                            j->second)) {
      return false;
    }
  }
  return true;
}

TEST(KnobScheduleTest, RoundTrip) {
  KnobSchedule schedule;
  schedule[0] = Knobs(0.1);
  auto& mixed = *schedule[250].mutable_fields();
  mixed["lr"].set_number_value(0.0125);
  mixed["momentum"].set_number_value(0.9);
  mixed["optimizer"].set_string_value("sgd");
  schedule[1000] = google::protobuf::Struct();  // no overrides

  auto text = EncodeKnobSchedule(schedule);
  ASSERT_TRUE(text.ok()) << text.status();
  auto decoded = DecodeKnobSchedule(*text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(SameSchedule(*decoded, schedule)) << *text;
}

TEST(KnobScheduleTest, EncodesTheDocumentedFormat) {
  KnobSchedule schedule;
  schedule[0] = Knobs(0.5);
  schedule[20] = Knobs(0.25);
  EXPECT_EQ(EncodeKnobSchedule(schedule).value(),
            "0:{\"lr\":0.5};20:{\"lr\":0.25}");
  EXPECT_EQ(EncodeKnobSchedule({}).value(), "");
}

TEST(KnobScheduleTest, SemicolonInsideAStringRoundTrips) {
  KnobSchedule schedule;
  (*schedule[3].mutable_fields())["note"].set_string_value("a;b;;c");
  schedule[7] = Knobs(1);
  auto text = EncodeKnobSchedule(schedule);
  ASSERT_TRUE(text.ok()) << text.status();
  // The separator between the two entries is the only ';' left.
  EXPECT_EQ(std::count(text->begin(), text->end(), ';'), 1) << *text;
  auto decoded = DecodeKnobSchedule(*text);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(SameSchedule(*decoded, schedule)) << *text;
}

TEST(KnobScheduleTest, EncoderOrdersByStepNumerically) {
  KnobSchedule schedule;
  schedule[100] = Knobs(3);
  schedule[9] = Knobs(2);
  schedule[10] = Knobs(1);
  EXPECT_EQ(EncodeKnobSchedule(schedule).value(),
            "9:{\"lr\":2};10:{\"lr\":1};100:{\"lr\":3}");
}

TEST(KnobScheduleTest, DecoderAcceptsAnyOrderAndSortsBySteps) {
  auto decoded = DecodeKnobSchedule("100:{\"lr\":3};9:{\"lr\":2};10:{}");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(*decoded, ElementsAre(Key(9), Key(10), Key(100)));
  EXPECT_EQ(decoded->at(100).fields().at("lr").number_value(), 3);
}

TEST(KnobScheduleTest, LaterEntryForTheSameStepWins) {
  auto decoded = DecodeKnobSchedule("5:{\"lr\":1};5:{\"lr\":2}");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ(decoded->at(5).fields().at("lr").number_value(), 2);
}

TEST(KnobScheduleTest, EmptyEntriesAndSpacesAreSkipped) {
  auto empty = DecodeKnobSchedule("");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  auto decoded = DecodeKnobSchedule(" 1 : {\"lr\": 1} ;; 2:{} ;");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(*decoded, ElementsAre(Key(1), Key(2)));
}

TEST(KnobScheduleTest, MalformedEntriesNameTheEntry) {
  struct Case {
    const char* text;
    const char* part;  // the entry the message names
    const char* why;
  };
  for (const Case& c : {
           Case{"0:{};lr=0.1", "entry 2 'lr=0.1'", "has no ':'"},
           Case{"x:{}", "entry 1 'x:{}'", "step 'x'"},
           Case{":{}", "entry 1 ':{}'", "step ''"},
           Case{"-3:{}", "entry 1 '-3:{}'", "step '-3'"},
           Case{"1.5:{}", "entry 1 '1.5:{}'", "step '1.5'"},
           Case{"99999999999999999999:{}", "entry 1", "step '9999"},
           Case{"0:{};4:{\"lr\":", "entry 2 '4:{\"lr\":'", "not a JSON object"},
           Case{"4:[1,2]", "entry 1 '4:[1,2]'", "not a JSON object"},
           Case{"4:", "entry 1 '4:'", "not a JSON object"},
           Case{"4:0.1", "entry 1 '4:0.1'", "not a JSON object"},
       }) {
    SCOPED_TRACE(c.text);
    auto decoded = DecodeKnobSchedule(c.text);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(decoded.status().message()),
        AllOf(HasSubstr(c.part), HasSubstr(c.why), HasSubstr("STEP:{json}")));
  }
}

TEST(KnobScheduleTest, LongEntriesAreCutInMessages) {
  const std::string entry = "7:{\"note\":\"" + std::string(500, 'z') + "\"";
  auto decoded = DecodeKnobSchedule(entry);
  ASSERT_FALSE(decoded.ok());
  EXPECT_LT(decoded.status().message().size(), 400u);
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("...'"));
}

TEST(KnobScheduleTest, EncoderRefusesWhatTheFormatCannotHold) {
  KnobSchedule negative;
  negative[-1] = Knobs(0.1);
  auto text = EncodeKnobSchedule(negative);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("step -1"));

  KnobSchedule nan;
  nan[0] = Knobs(0.1);
  nan[12] = Knobs(std::nan(""));
  text = EncodeKnobSchedule(nan);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("step 12"));

  KnobSchedule nested;
  (*nested[4].mutable_fields())["betas"]
      .mutable_list_value()
      ->add_values()
      ->set_number_value(INFINITY);
  text = EncodeKnobSchedule(nested);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()),
              AllOf(HasSubstr("betas"), HasSubstr("step 4")));
}

}  // namespace
}  // namespace dial
