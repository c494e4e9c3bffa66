#include "client/lineage.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "client/format.h"

namespace dial::client {
namespace {

using ::testing::HasSubstr;

v1::Trial TrialFromText(const std::string& text) {
  v1::Trial trial;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &trial))
      << text;
  return trial;
}

// A study's trials by number, as GetTrial would return them.
class FakeStudy {
 public:
  void Add(const std::string& text) {
    v1::Trial t = TrialFromText(text);
    trials_[t.number()] = t;
  }
  TrialLookup Lookup() {
    return [this](int64_t number) -> absl::StatusOr<v1::Trial> {
      ++lookups_;
      auto it = trials_.find(number);
      if (it == trials_.end()) {
        return absl::NotFoundError(
            absl::StrCat("trial ", number, " of study 'pbt' not found"));
      }
      return it->second;
    };
  }
  const v1::Trial& at(int64_t number) const { return trials_.at(number); }
  int lookups() const { return lookups_; }

 private:
  std::map<int64_t, v1::Trial> trials_;
  int lookups_ = 0;
};

double Lr(const ScheduleSegment& s) { return s.params.at("lr").double_value(); }

// A PBT population: trial 0 never exploited; trial 1 copied trial 0 at
// step 200; trial 2 copied trial 1 twice (at its steps 100 and 300); trial 3
// copied trial 1 before trial 1's own exploit.
FakeStudy Population() {
  FakeStudy study;
  study.Add(R"pb(
    number: 0
    last_step: 400
    params {
      key: "lr"
      value { double_value: 0.1 }
    }
  )pb");
  study.Add(R"pb(
    number: 1
    last_step: 400
    params {
      key: "lr"
      value { double_value: 0.12 }
    }
    lineage {
      step: 200
      source_trial: 0
      source_step: 200
      old_params {
        key: "lr"
        value { double_value: 0.05 }
      }
      new_params {
        key: "lr"
        value { double_value: 0.12 }
      }
    }
  )pb");
  study.Add(R"pb(
    number: 2
    last_step: 450
    params {
      key: "lr"
      value { double_value: 0.08 }
    }
    lineage {
      step: 100
      source_trial: 1
      source_step: 150
      old_params {
        key: "lr"
        value { double_value: 0.01 }
      }
      new_params {
        key: "lr"
        value { double_value: 0.15 }
      }
    }
    lineage {
      step: 300
      source_trial: 1
      source_step: 300
      old_params {
        key: "lr"
        value { double_value: 0.15 }
      }
      new_params {
        key: "lr"
        value { double_value: 0.08 }
      }
    }
  )pb");
  study.Add(R"pb(
    number: 3
    last_step: 100
    params {
      key: "lr"
      value { double_value: 0.2 }
    }
    lineage {
      step: 50
      source_trial: 1
      source_step: 150
      old_params {
        key: "lr"
        value { double_value: 0.3 }
      }
      new_params {
        key: "lr"
        value { double_value: 0.2 }
      }
    }
  )pb");
  return study;
}

TEST(PbtScheduleTest, ATrialThatNeverExploitedIsOneSegmentOfItsOwnParams) {
  FakeStudy study = Population();
  auto segments = PbtSchedule(study.at(0), study.Lookup());
  ASSERT_TRUE(segments.ok()) << segments.status();
  ASSERT_EQ(segments->size(), 1u);
  EXPECT_EQ((*segments)[0].from, 0);
  EXPECT_EQ((*segments)[0].to, 400);
  EXPECT_EQ((*segments)[0].trial, 0);
  EXPECT_DOUBLE_EQ(Lr((*segments)[0]), 0.1);
  EXPECT_EQ(study.lookups(), 0);
}

TEST(PbtScheduleTest, FollowsTheLastExploitBackThroughEverySource) {
  FakeStudy study = Population();
  auto segments = PbtSchedule(study.at(2), study.Lookup());
  ASSERT_TRUE(segments.ok()) << segments.status();
  // Trial 2 at 450 took trial 1's weights at 300, which took trial 0's at
  // 200: trial 0's 200 steps, trial 1's 100 more, then trial 2's 150.
  ASSERT_EQ(segments->size(), 3u);
  const auto& s = *segments;
  EXPECT_EQ(s[0].from, 0);
  EXPECT_EQ(s[0].to, 200);
  EXPECT_EQ(s[0].trial, 0);
  EXPECT_DOUBLE_EQ(Lr(s[0]), 0.1);
  EXPECT_EQ(s[1].from, 200);
  EXPECT_EQ(s[1].to, 300);
  EXPECT_EQ(s[1].trial, 1);
  EXPECT_DOUBLE_EQ(Lr(s[1]), 0.12);
  EXPECT_EQ(s[2].from, 300);
  EXPECT_EQ(s[2].to, 450);
  EXPECT_EQ(s[2].trial, 2);
  EXPECT_DOUBLE_EQ(Lr(s[2]), 0.08);
  // Only the two sources were fetched.
  EXPECT_EQ(study.lookups(), 2);

  EXPECT_EQ(FormatSchedule(s),
            "STEPS    TRIAL  PARAMS\n"
            "0-200    0      lr=0.1\n"
            "200-300  1      lr=0.12\n"
            "300-450  2      lr=0.08\n");
}

TEST(PbtScheduleTest, ASourceCopiedBeforeItsOwnExploitRanItsOldParams) {
  FakeStudy study = Population();
  auto segments = PbtSchedule(study.at(3), study.Lookup());
  ASSERT_TRUE(segments.ok()) << segments.status();
  // Trial 1 at step 150 had not exploited yet: it ran lr=0.05 (its
  // old_params), not the 0.12 its params say now.
  ASSERT_EQ(segments->size(), 2u);
  EXPECT_EQ((*segments)[0].from, 0);
  EXPECT_EQ((*segments)[0].to, 150);
  EXPECT_EQ((*segments)[0].trial, 1);
  EXPECT_DOUBLE_EQ(Lr((*segments)[0]), 0.05);
  EXPECT_EQ((*segments)[1].from, 150);
  EXPECT_EQ((*segments)[1].to, 200);
  EXPECT_EQ((*segments)[1].trial, 3);
  EXPECT_DOUBLE_EQ(Lr((*segments)[1]), 0.2);
}

TEST(PbtScheduleTest, AnExploitAtTheLastStepCountsWithNoStepsOfItsOwn) {
  FakeStudy study = Population();
  study.Add(R"pb(
    number: 4
    last_step: 300
    lineage {
      step: 300
      source_trial: 0
      source_step: 400
      new_params {
        key: "lr"
        value { double_value: 0.09 }
      }
    }
  )pb");
  auto segments = PbtSchedule(study.at(4), study.Lookup());
  ASSERT_TRUE(segments.ok()) << segments.status();
  EXPECT_EQ(FormatSchedule(*segments),
            "STEPS    TRIAL  PARAMS\n"
            "0-400    0      lr=0.1\n"
            "400-400  4      lr=0.09\n");
}

TEST(PbtScheduleTest, AMissingSourceFailsWithTheLookupsError) {
  FakeStudy study;
  study.Add(R"pb(
    number: 5
    last_step: 100
    lineage { step: 50 source_trial: 9 source_step: 50 }
  )pb");
  auto segments = PbtSchedule(study.at(5), study.Lookup());
  EXPECT_EQ(segments.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(segments.status().message(), HasSubstr("trial 9"));
}

TEST(PbtScheduleTest, ACycleOfSourcesIsAnInternalError) {
  FakeStudy study;
  study.Add(R"pb(
    number: 0
    last_step: 10
    lineage { step: 10 source_trial: 1 source_step: 10 }
  )pb");
  study.Add(R"pb(
    number: 1
    last_step: 10
    lineage { step: 10 source_trial: 0 source_step: 10 }
  )pb");
  auto segments = PbtSchedule(study.at(0), study.Lookup());
  EXPECT_EQ(segments.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(segments.status().message(), HasSubstr("cycle"));
}

std::vector<ScheduleSegment> ThreeSegments() {
  std::vector<ScheduleSegment> segments(3);
  segments[0] = {0, 200, 0, {}};
  segments[0].params["lr"].set_double_value(0.1);
  segments[1] = {200, 300, 1, {}};
  segments[1].params["units"].set_int_value(32);
  segments[2] = {300, 450, 2, {}};
  segments[2].params["optimizer"].set_string_value("adam");
  return segments;
}

TEST(KnobScheduleTest, WritesEachSegmentsStartAndKnobs) {
  EXPECT_EQ(KnobSchedule(ThreeSegments()),
            R"(0:{"lr":0.1};200:{"units":32};300:{"optimizer":"adam"})");
  EXPECT_EQ(KnobSchedule({}), "");
}

v1::StudySpec TrainerSpec() {
  v1::StudySpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "pbt"
        objective { metric: "val_loss" goal: MINIMIZE }
        search_space {
          name: "lr"
          float { min: 0.001 max: 0.5 }
        }
        searcher { random {} }
        scheduler { pbt { perturbation_interval: 100 } }
        budget { max_trials: 8 max_parallel_trials: 4 }
        trial {
          trainer {
            fields {
              key: "model"
              value { string_value: "mlp" }
            }
            fields {
              key: "steps"
              value { number_value: 1000 }
            }
          }
        }
      )pb",
      &spec));
  return spec;
}

TEST(ReplaySpecTest, OneGridTrialOfTheScheduleWithTheStudysKnobs) {
  const auto segments = ThreeSegments();
  auto replay = ReplaySpec("pbt", 2, TrainerSpec(), segments);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->name(), "pbt-replay-2");
  EXPECT_EQ(replay->objective().metric(), "val_loss");
  ASSERT_EQ(replay->search_space_size(), 1);
  EXPECT_EQ(replay->search_space(0).name(), "schedule");
  ASSERT_EQ(replay->search_space(0).categorical().values_size(), 1);
  EXPECT_EQ(replay->search_space(0).categorical().values(0),
            KnobSchedule(segments));
  EXPECT_TRUE(replay->searcher().has_grid());
  EXPECT_TRUE(replay->scheduler().has_fifo());
  EXPECT_EQ(replay->budget().max_trials(), 1);
  EXPECT_EQ(replay->budget().max_parallel_trials(), 1);
  const auto& knobs = replay->trial().trainer().fields();
  EXPECT_EQ(knobs.at("model").string_value(), "mlp");
  EXPECT_EQ(knobs.at("steps").number_value(), 450);  // the schedule's end

  // The file dialctl writes: a comment, then the spec as JSON.
  const std::string file = ReplayFile("pbt", 2, *replay);
  const std::string comment =
      "# Replays trial 2 of pbt: its PBT schedule in one trial.\n";
  ASSERT_EQ(file.substr(0, comment.size()), comment);
  v1::StudySpec parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  file.substr(comment.size()), &parsed)
                  .ok());
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(parsed, *replay));
  EXPECT_EQ(file.back(), '\n');
}

TEST(ReplaySpecTest, TheNameIsCutTo64Characters) {
  auto replay =
      ReplaySpec(std::string(60, 's'), 12345, TrainerSpec(), ThreeSegments());
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->name(), std::string(60, 's') + "-rep");
}

TEST(ReplaySpecTest, ACommandStudyCannotBeReplayed) {
  v1::StudySpec spec = TrainerSpec();
  spec.mutable_trial()->mutable_command()->add_argv("python3");
  auto replay = ReplaySpec("pbt", 2, spec, ThreeSegments());
  EXPECT_EQ(replay.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(replay.status().message(), HasSubstr("built-in trainer"));
}

TEST(ReplaySpecTest, AnEmptyScheduleIsInvalid) {
  auto replay = ReplaySpec("pbt", 2, TrainerSpec(), {});
  EXPECT_EQ(replay.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dial::client
