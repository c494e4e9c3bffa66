#include "common/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

constexpr char kValid[] = R"(
name: fmnist-asha
objective: {metric: val_accuracy, goal: MAXIMIZE}
search_space:
  - {name: lr,        float: {min: 1.0e-4, max: 0.3, scale: LOG}}
  - {name: units,     int: {min: 32, max: 512}}
  - {name: optimizer, categorical: {values: [sgd, adam]}}
  - {name: momentum,  float: {min: 0.5, max: 0.99}, when: {optimizer: [sgd]}}
  - {name: batch_size, discrete: {values: [32, 64, 128]}}
searcher:  {random: {seed: 3}}
scheduler: {asha: {min_steps: 200, reduction_factor: 3, max_steps: 5400}}
budget:    {max_trials: 64, max_parallel_trials: 4, max_failures_per_trial: 2}
trial:
  trainer:   {model: mlp, dataset: fashion-mnist, batch_size: 128, eval_every: 200}
  resources: {gpus: 1}
labels: {team: "vision", version: 2}
)";

TEST(SpecTest, ParsesTheDesignSketch) {
  auto spec = ParseStudySpec(kValid);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "fmnist-asha");
  EXPECT_EQ(spec->objective().goal(), v1::MAXIMIZE);
  ASSERT_EQ(spec->search_space_size(), 5);
  EXPECT_EQ(spec->search_space(0).float_().scale(), v1::LOG);
  EXPECT_DOUBLE_EQ(spec->search_space(0).float_().min(), 1e-4);
  EXPECT_EQ(spec->search_space(1).int_().max(), 512);
  EXPECT_EQ(spec->search_space(2).categorical().values(1), "adam");
  EXPECT_EQ(
      spec->search_space(3).when().at("optimizer").values(0).string_value(),
      "sgd");
  EXPECT_EQ(spec->search_space(4).discrete().values_size(), 3);
  EXPECT_EQ(spec->scheduler().asha().max_steps(), 5400);
  EXPECT_EQ(spec->budget().max_failures_per_trial(), 2);
  EXPECT_EQ(spec->trial().trainer().fields().at("model").string_value(), "mlp");
  EXPECT_EQ(spec->trial().trainer().fields().at("batch_size").number_value(),
            128);
  EXPECT_EQ(spec->trial().resources().gpus(), 1);
  // A number given for a string field stays a string.
  EXPECT_EQ(spec->labels().at("version"), "2");
  EXPECT_TRUE(ValidateStudySpec(*spec).ok()) << ValidateStudySpec(*spec);
}

TEST(SpecTest, JsonIsAcceptedToo) {
  auto spec = ParseStudySpec(R"({"name": "j", "objective": {"metric": "loss",
      "goal": "MINIMIZE"}, "search_space": [{"name": "x", "float": {"min": 0,
      "max": 1}}], "budget": {"max_trials": 5}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateStudySpec(*spec).ok());
  EXPECT_EQ(spec->budget().max_trials(), 5);
}

absl::Status ParseError(const std::string& text) {
  return ParseStudySpec(text).status();
}

TEST(SpecTest, UnknownFieldsAreNamedWithTheirPath) {
  auto status = ParseError("name: a\nobjectiv: {metric: x}\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("objectiv: unknown field"));

  status = ParseError("search_space:\n  - {name: x, float: {min: 0, mx: 1}}\n");
  EXPECT_THAT(status.message(),
              HasSubstr("search_space[0].float.mx: unknown field"));
}

TEST(SpecTest, UnknownSearcherAndSchedulerSettingsAreRejected) {
  auto status = ParseError("searcher: {bayesain: {}}\n");
  EXPECT_THAT(status.message(), HasSubstr("searcher.bayesain: unknown field"));
  EXPECT_THAT(status.message(), HasSubstr("bayesian"));
  status = ParseError("scheduler: {asha: {min_step: 3}}\n");
  EXPECT_THAT(status.message(),
              HasSubstr("scheduler.asha.min_step: unknown field"));
}

TEST(SpecTest, WrongTypesAreNamed) {
  auto status = ParseError("budget: {max_trials: many}\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("budget.max_trials: expected a number"));
  status = ParseError("search_space: {name: x}\n");
  EXPECT_THAT(status.message(), HasSubstr("search_space: expected a list"));
  status = ParseError("name: [a, b]\n");
  EXPECT_THAT(status.message(), HasSubstr("name: expected a single value"));
  status = ParseError("objective: {metric: x, goal: UP}\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("UP"));
}

TEST(SpecTest, BrokenYamlIsAClearError) {
  auto status = ParseError("name: [unclosed\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not valid YAML"));
}

// Validation: one case per rule. Each starts from a valid spec and breaks one
// thing.
struct ValidationCase {
  const char* name;
  const char* yaml;
  const char* field;
  const char* reason;
};

constexpr char kBase[] = R"(
name: s
objective: {metric: loss, goal: MINIMIZE}
)";
void PrintTo(const ValidationCase& c, std::ostream* os) { *os << c.name; }

class ValidationTest : public ::testing::TestWithParam<ValidationCase> {};

TEST_P(ValidationTest, NamesFieldAndReason) {
  const ValidationCase& c = GetParam();
  std::string yaml = std::string(kBase) + c.yaml;
  if (yaml.find("budget:") == std::string::npos) {
    yaml += "\nbudget: {max_trials: 10}";
  }
  auto spec = ParseStudySpec(yaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::Status status = ValidateStudySpec(*spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(c.field));
  EXPECT_THAT(status.message(), HasSubstr(c.reason));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, ValidationTest,
    ::testing::Values(
        ValidationCase{"EmptySearchSpace", "", "search_space",
                       "at least one parameter"},
        ValidationCase{"DuplicateNames",
                       "search_space: [{name: x, float: {min: 0, max: 1}}, "
                       "{name: x, int: {min: 0, max: 3}}]",
                       "search_space[1].name", "already used"},
        ValidationCase{"FloatMinNotBelowMax",
                       "search_space: [{name: x, float: {min: 2, max: 1}}]",
                       "search_space[0].float", "less than max"},
        ValidationCase{"IntMinNotBelowMax",
                       "search_space: [{name: n, int: {min: 4, max: 4}}]",
                       "search_space[0].int", "less than max"},
        ValidationCase{"LogWithNonPositiveMin",
                       "search_space: [{name: lr, float: {min: 0, max: 1, "
                       "scale: LOG}}]",
                       "search_space[0].float.min", "> 0 with scale LOG"},
        ValidationCase{"IntLogWithNonPositiveMin",
                       "search_space: [{name: n, int: {min: 0, max: 9, "
                       "scale: LOG}}]",
                       "search_space[0].int.min", "> 0 with scale LOG"},
        ValidationCase{"NoDomain", "search_space: [{name: x}]",
                       "search_space[0]", "one of float, int"},
        ValidationCase{"EmptyCategorical",
                       "search_space: [{name: c, categorical: {values: []}}]",
                       "search_space[0].categorical.values",
                       "must not be empty"},
        ValidationCase{
            "RepeatedCategory",
            "search_space: [{name: c, categorical: {values: [a, a]}}]",
            "search_space[0].categorical.values", "listed twice"},
        ValidationCase{"BadParamName",
                       "search_space: [{name: 'a b', float: {min: 0, max: 1}}]",
                       "search_space[0].name", "only letters"},
        ValidationCase{"ConditionOnMissingParameter",
                       "search_space: [{name: m, float: {min: 0, max: 1}, "
                       "when: {opt: [sgd]}}]",
                       "search_space[0].when.opt", "no parameter named 'opt'"},
        ValidationCase{"ConditionOnLaterParameter",
                       "search_space: [{name: m, float: {min: 0, max: 1}, "
                       "when: {opt: [sgd]}}, {name: opt, categorical: "
                       "{values: [sgd]}}]",
                       "search_space[0].when.opt", "listed before"},
        ValidationCase{"ConditionValueNotInDomain",
                       "search_space: [{name: opt, categorical: {values: "
                       "[sgd, adam]}}, {name: m, float: {min: 0, max: 1}, "
                       "when: {opt: [sgdd]}}]",
                       "search_space[1].when.opt", "'sgdd' is not a value"},
        ValidationCase{"MaxTrialsZero",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "budget: {max_trials: 0}",
                       "budget.max_trials", "between 1 and 1000000"},
        ValidationCase{"ParallelAboveMaxTrials",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "budget: {max_trials: 4, max_parallel_trials: 5}",
                       "budget.max_parallel_trials", "between 0"},
        ValidationCase{"NegativeFailures",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "budget: {max_trials: 4, max_failures_per_trial: -1}",
                       "budget.max_failures_per_trial", "between 0 and 100"},
        ValidationCase{"AshaMaxBelowMin",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "scheduler: {asha: {min_steps: 10, max_steps: 5, "
                       "reduction_factor: 3}}",
                       "scheduler.asha.max_steps", "greater than min_steps"},
        ValidationCase{"AshaReductionFactor",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "scheduler: {asha: {min_steps: 1, max_steps: 9, "
                       "reduction_factor: 1}}",
                       "scheduler.asha.reduction_factor", "greater than 1"},
        // Bounds that keep CreateStudy's work proportional to the spec
        // (each of these used to hang CreateStudy or overflow). The
        // searchers' own settings: tests/searchers/registry_test.cc.
        ValidationCase{"GridPointsHuge",
                       "search_space: [{name: x, float: {min: 0, max: 1, "
                       "grid_points: 10001}}]",
                       "search_space[0].float.grid_points", "at most 10000"},
        ValidationCase{"IntBeyondDoubles",
                       "search_space: [{name: n, int: {min: "
                       "-9223372036854775808, max: 9223372036854775807}}]",
                       "search_space[0].int", "between -2^53 and 2^53"},
        ValidationCase{"AshaReductionFactorNearOne",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "scheduler: {asha: {min_steps: 3, max_steps: 27, "
                       "reduction_factor: 1.0000000000000002}}",
                       "scheduler.asha.reduction_factor",
                       "more than 1000 rungs"},
        ValidationCase{"EmptyCommand",
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
                       "trial: {command: {argv: []}}",
                       "trial.command.argv", "must name the program"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SpecTest, ReductionFactorMustBeFinite) {
  // Text specs cannot spell infinity, but gRPC clients can send it.
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "scheduler: {hyperband: {min_steps: 1, max_steps: 9, "
      "reduction_factor: 3}}\nbudget: {max_trials: 2}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->mutable_scheduler()->mutable_hyperband()->set_reduction_factor(
      std::numeric_limits<double>::infinity());
  EXPECT_THAT(
      ValidateStudySpec(*spec).message(),
      HasSubstr("scheduler.hyperband.reduction_factor: must be finite"));
}

TEST(SpecTest, EnumNumbersWithoutANameAreRefused) {
  // Text specs name enum values, but gRPC clients send numbers.
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: 1, max: 2}}, "
      "{name: n, int: {min: 1, max: 2}}]\nbudget: {max_trials: 2}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateStudySpec(*spec).ok());
  v1::StudySpec goal = *spec;
  goal.mutable_objective()->set_goal(static_cast<v1::Goal>(3));
  EXPECT_THAT(ValidateStudySpec(goal).message(),
              HasSubstr("objective.goal: must be MAXIMIZE or MINIMIZE, got 3"));
  v1::StudySpec scale = *spec;
  scale.mutable_search_space(1)->mutable_int_()->set_scale(
      static_cast<v1::Scale>(-1));
  EXPECT_THAT(ValidateStudySpec(scale).message(),
              HasSubstr("search_space[1].int.scale: must be LINEAR or LOG"));
  scale = *spec;
  scale.mutable_search_space(0)->mutable_float_()->set_scale(
      static_cast<v1::Scale>(9));
  EXPECT_THAT(ValidateStudySpec(scale).message(),
              HasSubstr("search_space[0].float.scale: must be LINEAR or LOG"));
}

TEST(SpecTest, CommandsAndLabelsMustSurviveExecAndJson) {
  auto parsed = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "search_space: [{name: x, float: {min: 1, max: 2}}]\n"
      "budget: {max_trials: 2}\nlabels: {team: a}\n"
      "trial: {command: {argv: [run, --x], env: {PYTHONUNBUFFERED: '1', "
      "my.var-2: x}}}");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(ValidateStudySpec(*parsed).ok()) << ValidateStudySpec(*parsed);
  auto refused = [&](auto change) {
    v1::StudySpec spec = *parsed;
    change(spec);
    return std::string(ValidateStudySpec(spec).message());
  };
  auto env = [](v1::StudySpec& s) {
    return s.mutable_trial()->mutable_command()->mutable_env();
  };
  EXPECT_THAT(refused([&](v1::StudySpec& s) { (*env(s))["A=B"] = "c"; }),
              HasSubstr("trial.command.env: 'A=B' is not a variable name"));
  EXPECT_THAT(refused([&](v1::StudySpec& s) { (*env(s))["9LIVES"] = "c"; }),
              HasSubstr("'9LIVES' is not a variable name"));
  EXPECT_THAT(refused([&](v1::StudySpec& s) { (*env(s))[""] = "c"; }),
              HasSubstr("trial.command.env: names must be 1-128 characters"));
  EXPECT_THAT(refused([&](v1::StudySpec& s) {
                (*env(s))["A"] = std::string("x\0y", 3);
              }),
              HasSubstr("trial.command.env.A: must not contain a NUL"));
  EXPECT_THAT(refused([](v1::StudySpec& s) {
                s.mutable_trial()->mutable_command()->set_argv(
                    1, std::string("--x\0", 4));
              }),
              HasSubstr("trial.command.argv[1]: must not contain a NUL"));
  EXPECT_THAT(refused([](v1::StudySpec& s) {
                (*s.mutable_labels())[std::string(129, 'k')] = "v";
              }),
              HasSubstr("labels: keys must be 1-128 characters"));
}

TEST(SpecTest, ConditionsOnIntsAreCheckedWithoutListingTheRange) {
  const std::string base =
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 2}\n";
  auto spec = [&](const std::string& range, const std::string& value) {
    auto s = ParseStudySpec(base + "search_space: [{name: n, int: " + range +
                            "}, {name: x, float: {min: 0, max: 1}, when: "
                            "{n: [" +
                            value + "]}}]");
    EXPECT_TRUE(s.ok()) << s.status();
    return ValidateStudySpec(*s);
  };
  EXPECT_TRUE(spec("{min: 1, max: 8}", "8").ok());
  EXPECT_THAT(spec("{min: 1, max: 8}", "9").message(),
              HasSubstr("search_space[1].when.n: '9' is not a value of n"));
  EXPECT_THAT(spec("{min: 1, max: 8}", "2.5").message(),
              HasSubstr("'2.5' is not a value of n"));
  EXPECT_TRUE(spec("{min: -10000, max: 0}", "-10000").ok());
  // At the top of the int64 range (before the 2^53 bound existed this
  // looped forever); wider ranges are not checked.
  EXPECT_THAT(
      spec("{min: 9007199254740000, max: 9007199254740992}", "1").message(),
      HasSubstr("'1' is not a value of n"));
  EXPECT_TRUE(spec("{min: 0, max: 100000}", "77777").ok());
}

TEST(SpecTest, TrainerKnobsAreCheckedAtCreation) {
  const std::string base =
      "name: t\nobjective: {metric: val_accuracy, goal: MAXIMIZE}\n"
      "budget: {max_trials: 2}\n";
  auto typo = ParseStudySpec(base +
                             "search_space: [{name: lrr, float: {min: 0.001, "
                             "max: 0.1}}]\ntrial: {trainer: {model: mlp}}");
  ASSERT_TRUE(typo.ok());
  auto status = ValidateStudySpec(*typo);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("search_space[0]: 'lrr' is not a trainer knob"));

  auto range = ParseStudySpec(base +
                              "search_space: [{name: lr, float: {min: -1, "
                              "max: 0.1}}]\ntrial: {trainer: {}}");
  ASSERT_TRUE(range.ok());
  EXPECT_THAT(ValidateStudySpec(*range).message(),
              HasSubstr("search_space[0]: lr must be between"));

  auto knob = ParseStudySpec(base +
                             "search_space: [{name: lr, float: {min: 0.001, "
                             "max: 0.1}}]\ntrial: {trainer: {activation: "
                             "swish}}");
  ASSERT_TRUE(knob.ok());
  EXPECT_THAT(
      ValidateStudySpec(*knob).message(),
      HasSubstr("trial.trainer.activation: activation 'swish' is not one of"));

  auto float_int = ParseStudySpec(base +
                                  "search_space: [{name: units, float: {min: "
                                  "32, max: 64}}]\ntrial: {trainer: {}}");
  ASSERT_TRUE(float_int.ok());
  EXPECT_THAT(ValidateStudySpec(*float_int).message(),
              HasSubstr("'units' is an integer knob"));

  auto good = ParseStudySpec(base +
                             "search_space: [{name: optimizer, categorical: "
                             "{values: [sgd, adam]}}, {name: units, int: "
                             "{min: 32, max: 512}}]\ntrial: {trainer: "
                             "{steps: 100, dataset: synthetic}}");
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(ValidateStudySpec(*good).ok()) << ValidateStudySpec(*good);
}

TEST(SpecTest, PausingSchedulersNeedWorkerRunTrials) {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: acc, goal: MAXIMIZE}\n"
      "budget: {max_trials: 4}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "scheduler: {asha: {min_steps: 1, max_steps: 9, reduction_factor: 3, "
      "promotion: true}}");
  ASSERT_TRUE(spec.ok());
  auto status = ValidateStudySpec(*spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("scheduler.asha.promotion"));
  spec->mutable_trial()->mutable_command()->add_argv("train");
  EXPECT_TRUE(ValidateStudySpec(*spec).ok());
}

TEST(SpecTest, MissingNameAndObjective) {
  v1::StudySpec spec;
  EXPECT_THAT(ValidateStudySpec(spec).message(),
              HasSubstr("name: is required"));
  spec.set_name("ok");
  EXPECT_THAT(ValidateStudySpec(spec).message(),
              HasSubstr("objective.metric: is required"));
  spec.mutable_objective()->set_metric("loss");
  EXPECT_THAT(ValidateStudySpec(spec).message(),
              HasSubstr("objective.goal: is required"));
}

TEST(SpecTest, DefaultsFixSeedAndParallelism) {
  auto spec =
      ParseStudySpec(std::string(kBase) +
                     "budget: {max_trials: 10}\n"
                     "search_space: [{name: x, float: {min: 0, max: 1}}]");
  ASSERT_TRUE(spec.ok());
  FillSpecDefaults(42, *spec);
  EXPECT_TRUE(spec->searcher().has_random());
  EXPECT_EQ(spec->searcher().random().seed(), 42u);
  EXPECT_TRUE(spec->scheduler().has_fifo());
  EXPECT_EQ(spec->budget().max_parallel_trials(), 10);
}

// Finding: a 58-byte spec with max_trials 10^6 and no max_parallel_trials
// (which meant max_trials) made 700k PENDING rows. 0 now means
// min(max_trials, default_parallel_trials), and an explicit value is capped.
TEST(SpecTest, ParallelismDefaultIsSmallAndCapped) {
  auto spec =
      ParseStudySpec(std::string(kBase) +
                     "budget: {max_trials: 1000000}\n"
                     "search_space: [{name: x, float: {min: 0, max: 1}}]");
  ASSERT_TRUE(spec.ok());
  v1::StudySpec filled = *spec;
  FillSpecDefaults(1, filled);
  EXPECT_EQ(filled.budget().max_parallel_trials(), 16);
  SpecLimits limits;
  limits.default_parallel_trials = 3;
  filled = *spec;
  FillSpecDefaults(1, filled, limits);
  EXPECT_EQ(filled.budget().max_parallel_trials(), 3);

  spec->mutable_budget()->set_max_parallel_trials(1024);
  EXPECT_TRUE(ValidateStudySpec(*spec).ok()) << ValidateStudySpec(*spec);
  spec->mutable_budget()->set_max_parallel_trials(1025);
  EXPECT_THAT(ValidateStudySpec(*spec).message(),
              HasSubstr("budget.max_parallel_trials: must be at most 1024"));
  limits.max_parallel_trials = 2000;
  EXPECT_TRUE(ValidateStudySpec(*spec, limits).ok());
  // Specs already stored are not held to the caps.
  spec->mutable_budget()->set_max_parallel_trials(1000000);
  EXPECT_TRUE(ValidateStudySpec(*spec, SpecLimits::None()).ok());
}

// Finding: a study with a 1 MB spec, copied into every event of four
// watchers, took the scheduler from 25 MB to 596 MB; large labels pushed
// answers over gRPC's 64 MiB limit. Specs and labels have size caps, and
// the error names the field and the reason.
TEST(SpecTest, SpecAndLabelSizesAreCapped) {
  auto parsed =
      ParseStudySpec(std::string(kBase) +
                     "budget: {max_trials: 10}\n"
                     "search_space: [{name: x, float: {min: 0, max: 1}}]");
  ASSERT_TRUE(parsed.ok());
  const v1::StudySpec base = *parsed;
  auto refused = [&](auto change, const SpecLimits& limits = SpecLimits{}) {
    v1::StudySpec s = base;
    change(s);
    return std::string(ValidateStudySpec(s, limits).message());
  };
  // 1 MB in one categorical value.
  EXPECT_THAT(refused([](v1::StudySpec& s) {
                s.add_search_space()->set_name("c");
                s.mutable_search_space(1)->mutable_categorical()->add_values(
                    std::string(1 << 20, 'v'));
              }),
              HasSubstr("spec: must be at most 262144 bytes (serialized)"));
  EXPECT_THAT(refused([](v1::StudySpec& s) {
                for (int i = 0; i < 65; ++i) {
                  (*s.mutable_labels())["k" + std::to_string(i)] = "v";
                }
              }),
              HasSubstr("labels: at most 64 labels, got 65"));
  EXPECT_THAT(refused([](v1::StudySpec& s) {
                (*s.mutable_labels())["team"] = std::string(1025, 'v');
              }),
              HasSubstr("labels.team: values must be at most 1024 bytes"));
  EXPECT_THAT(refused([](v1::StudySpec& s) {
                for (int i = 0; i < 20; ++i) {
                  (*s.mutable_labels())["k" + std::to_string(i)] =
                      std::string(1000, 'v');
                }
              }),
              HasSubstr("labels: keys and values must total at most 16384"));
  // At the caps: fine.
  EXPECT_EQ(refused([](v1::StudySpec& s) {
              for (int i = 0; i < 16; ++i) {
                (*s.mutable_labels())[absl::StrCat("k", i)] =
                    std::string(1000, 'v');
              }
            }),
            "");
  // Caps come from the limits the scheduler was given.
  SpecLimits small;
  small.max_spec_bytes = 64;
  EXPECT_THAT(
      refused([](v1::StudySpec& s) { s.set_name(std::string(60, 'n')); },
              small),
      HasSubstr("spec: must be at most 64 bytes"));
  EXPECT_EQ(refused([](v1::StudySpec& s) { s.set_name(std::string(60, 'n')); },
                    SpecLimits::None()),
            "");
}

TEST(SpecTest, NamesArePathSafe) {
  EXPECT_TRUE(ValidateName("f", "my-study_1.v2").ok());
  EXPECT_FALSE(ValidateName("f", "..").ok());
  EXPECT_FALSE(ValidateName("f", "a/b").ok());
  EXPECT_FALSE(ValidateName("f", "").ok());
  EXPECT_FALSE(ValidateName("f", std::string(65, 'a')).ok());
}

}  // namespace
}  // namespace dial

namespace dial {
namespace {

// Every spec in examples/ parses and passes validation, with the defaults
// a new study gets (so `dialctl study create -f` takes each as it is).
TEST(ExampleSpecsTest, EveryExampleIsAValidStudy) {
  int seen = 0;
  for (const auto& file : std::filesystem::directory_iterator(
           std::filesystem::path(DIAL_SOURCE_DIR) / "examples")) {
    if (file.path().extension() != ".yaml") continue;
    ++seen;
    auto spec = LoadStudySpecFile(file.path().string());
    ASSERT_TRUE(spec.ok()) << file.path() << ": " << spec.status();
    FillSpecDefaults(1, *spec);
    EXPECT_TRUE(ValidateStudySpec(*spec).ok())
        << file.path() << ": " << ValidateStudySpec(*spec);
  }
  EXPECT_GE(seen, 7);  // random, Bayesian, ASHA, Hyperband, PBT and more
}

}  // namespace
}  // namespace dial
