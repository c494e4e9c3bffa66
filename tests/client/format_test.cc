#include "client/format.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "common/params.h"

namespace dial::client {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
T FromText(const std::string& text) {
  T message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message))
      << text;
  return message;
}

v1::ParamValue Double(double v) {
  v1::ParamValue p;
  p.set_double_value(v);
  return p;
}

TEST(ParamValueToStringTest, ShortestRoundTrippingForm) {
  EXPECT_EQ(ParamValueToString(Double(0.01)), "0.01");
  EXPECT_EQ(ParamValueToString(Double(1e-4)), "0.0001");
  EXPECT_EQ(ParamValueToString(Double(1.0 / 3)), "0.33333333333333331");
  // Subnormal: std::stod would throw out_of_range on the short form.
  EXPECT_EQ(ParamValueToString(Double(4.9406564584124654e-324)),
            "4.94066e-324");
  v1::ParamValue v;
  EXPECT_EQ(ParamValueToString(v), "");
  v.set_int_value(-32);
  EXPECT_EQ(ParamValueToString(v), "-32");
  v.set_string_value("adam");
  EXPECT_EQ(ParamValueToString(v), "adam");
}

TEST(FormatTest, ErrorsAreOneLineWithTheCanonicalCode) {
  EXPECT_EQ(FormatError(
                absl::NotFoundError("trial 99 of study 'quadratic' not found")),
            "dialctl: NOT_FOUND: trial 99 of study 'quadratic' not found\n");
  EXPECT_EQ(FormatError(absl::InvalidArgumentError("search_space[0]: bad")),
            "dialctl: INVALID_ARGUMENT: search_space[0]: bad\n");
}

TEST(FormatTest, UnauthenticatedSaysHowToPassATokenAndKeepsTheReason) {
  EXPECT_EQ(FormatError(absl::UnauthenticatedError("unknown token")),
            "dialctl: UNAUTHENTICATED: no or unknown token: pass --token or "
            "set DIAL_TOKEN (unknown token)\n");
  EXPECT_EQ(FormatError(absl::UnauthenticatedError("")),
            "dialctl: UNAUTHENTICATED: no or unknown token: pass --token or "
            "set DIAL_TOKEN\n");
}

TEST(FormatTest, PermissionDeniedCarriesTheServersMessage) {
  EXPECT_EQ(FormatError(absl::PermissionDeniedError(
                "user 'bob' may not change study 'q' (owned by 'alice')")),
            "dialctl: PERMISSION_DENIED: user 'bob' may not change study 'q' "
            "(owned by 'alice')\n");
}

TEST(FormatTest, NumbersHaveSixSignificantDigits) {
  EXPECT_EQ(FormatNumber(0.7745642), "0.774564");
  EXPECT_EQ(FormatNumber(119476.2), "119476");
  EXPECT_EQ(FormatNumber(1e-5), "1e-05");
  EXPECT_EQ(FormatNumber(-5), "-5");
}

TEST(FormatTest, TimesAreUtcToTheSecondAndUnsetIsADash) {
  EXPECT_EQ(FormatTime(TimeUtil::NanosecondsToTimestamp(0)), "-");
  google::protobuf::Timestamp t;
  ASSERT_TRUE(TimeUtil::FromString("2026-12-02T11:02:45.123Z", &t));
  EXPECT_EQ(FormatTime(t), "2026-12-02 11:02:45");
}

TEST(FormatTest, ParamsAreSortedWithShortDoubles) {
  auto trial = FromText<v1::Trial>(R"pb(
    params {
      key: "units"
      value { int_value: 83 }
    }
    params {
      key: "lr"
      value { double_value: 0.0011042812345 }
    }
    params {
      key: "optimizer"
      value { string_value: "adam" }
    }
  )pb");
  EXPECT_EQ(FormatParams(trial.params()),
            "lr=0.00110428 optimizer=adam units=83");
  EXPECT_EQ(FormatParams({}), "");
}

TEST(FormatTest, TablesAlignColumnsTwoSpacesApart) {
  EXPECT_EQ(FormatTable({"A", "LONGER", "C"}, {{"wide cell", "x", "last"},
                                               {"1", "2", "a long last cell"}}),
            "A          LONGER  C\n"
            "wide cell  x       last\n"
            "1          2       a long last cell\n");
  EXPECT_EQ(FormatTable({"ONLY"}, {}), "ONLY\n");
  // A short row; a row with more cells than the header does not crash.
  EXPECT_EQ(FormatTable({"A", "B"}, {{"x"}, {"1", "2", "3"}}),
            "A  B\n"
            "x\n"
            "1  2  3\n");
}

TEST(FormatTest, TrialTable) {
  std::vector<v1::Trial> trials = {
      FromText<v1::Trial>(R"pb(
        number: 5
        state: COMPLETED
        objective_value: 0.774564
        last_step: 5
        params {
          key: "x"
          value { double_value: 0.403459 }
        }
        params {
          key: "kind"
          value { string_value: "a" }
        }
      )pb"),
      FromText<v1::Trial>(R"pb(
        number: 12
        state: PENDING
        last_step: -1
        params {
          key: "kind"
          value { string_value: "b" }
        }
      )pb"),
  };
  EXPECT_EQ(FormatTrials(trials),
            "TRIAL  STATE      VALUE     STEP  PARAMS\n"
            "5      COMPLETED  0.774564  5     kind=a x=0.403459\n"
            "12     PENDING    -         -     kind=b\n");
}

TEST(FormatTest, OneTrialWithItsHistory) {
  auto trial = FromText<v1::Trial>(R"pb(
    study: "quadratic"
    number: 5
    state: COMPLETED
    objective_value: 0.774564
    client_id: "python-example"
    checkpoint: "quadratic/5/2"
    error: "exit code 1"
    params {
      key: "kind"
      value { string_value: "a" }
    }
    start_time { seconds: 1796210791 }
    final_metrics { key: "loss" value: 0.774564 }
    final_metrics { key: "acc" value: 0.5 }
    metric_history {
      step: 1
      metrics { key: "loss" value: 1.44123 }
    }
    metric_history {
      step: 2
      metrics { key: "loss" value: 1.1079 }
      metrics { key: "acc" value: 0.25 }
    }
  )pb");
  EXPECT_EQ(FormatTrial(trial, "loss"),
            "trial:    5 of quadratic\n"
            "state:    COMPLETED\n"
            "value:    0.774564 (loss)\n"
            "params:   kind=a\n"
            "started:  2026-12-02 11:26:31\n"
            "ended:    -\n"
            "client:   python-example\n"
            "checkpoint: quadratic/5/2\n"
            "error:    exit code 1\n"
            "final:    acc=0.5 loss=0.774564\n"
            "history:\n"
            "STEP  acc   loss\n"
            "1     -     1.44123\n"
            "2     0.25  1.1079\n");
}

TEST(FormatTest, ATrialWithoutOptionalFieldsShowsOnlyTheFixedLines) {
  auto trial = FromText<v1::Trial>(R"pb(
    study: "q" number: 0 state: RUNNING
  )pb");
  EXPECT_EQ(FormatTrial(trial, "objective"),
            "trial:    0 of q\n"
            "state:    RUNNING\n"
            "value:    - (objective)\n"
            "params:   \n"
            "started:  -\n"
            "ended:    -\n");
}

v1::Study Quadratic() {
  return FromText<v1::Study>(R"pb(
    name: "quadratic"
    state: STUDY_COMPLETED
    create_time { seconds: 1796210787 }
    trials_created: 12
    trial_counts { key: "COMPLETED" value: 11 }
    trial_counts { key: "FAILED" value: 1 }
    trial_counts { key: "RUNNING" value: 0 }
    spec {
      objective { metric: "loss" goal: MINIMIZE }
      searcher { random {} }
      scheduler { fifo {} }
      budget { max_trials: 12 max_parallel_trials: 4 }
      search_space {
        name: "x"
        float { min: -5 max: 5 }
      }
      search_space {
        name: "y"
        float { min: 0.001 max: 10 scale: LOG }
      }
      search_space {
        name: "kind"
        categorical { values: "a" values: "b" }
      }
      search_space {
        name: "z"
        int { min: 1 max: 8 }
        when {
          key: "kind"
          value { values { string_value: "b" } }
        }
      }
      search_space {
        name: "batch"
        discrete { values: 16 values: 32 }
      }
    }
  )pb");
}

TEST(FormatTest, StudyList) {
  v1::Study active = Quadratic();
  active.set_name("fmnist");
  active.set_state(v1::STUDY_ACTIVE);
  active.set_trials_created(3);
  active.mutable_spec()->mutable_objective()->set_metric("val_accuracy");
  active.mutable_spec()->mutable_objective()->set_goal(v1::MAXIMIZE);
  active.clear_create_time();
  active.set_owner("alice");
  EXPECT_EQ(
      FormatStudies({Quadratic(), active}),
      "STUDY      OWNER  STATE      TRIALS  OBJECTIVE           CREATED\n"
      "quadratic  -      COMPLETED  12/12   loss (min)          2026-12-02 "
      "11:26:27\n"
      "fmnist     alice  ACTIVE     3/12    val_accuracy (max)  -\n");
}

TEST(FormatTest, OneStudy) {
  EXPECT_EQ(FormatStudy(Quadratic()),
            "study:       quadratic\n"
            "owner:       -\n"
            "state:       COMPLETED\n"
            "priority:    0\n"
            "objective:   loss (MINIMIZE)\n"
            "searcher:    random\n"
            "scheduler:   fifo\n"
            "trials:      12 of 12 created (11 completed, 1 failed), at most 4 "
            "at once\n"
            "created:     2026-12-02 11:26:27\n"
            "parameters:\n"
            "  x: float [-5, 5]\n"
            "  y: float [0.001, 10] log\n"
            "  kind: one of {a, b}\n"
            "  z: int [1, 8]  when kind in {b}\n"
            "  batch: one of {16, 32}\n");
}

TEST(FormatTest, OneStudyShowsItsOwner) {
  v1::Study study = Quadratic();
  study.set_owner("alice");
  EXPECT_THAT(FormatStudy(study), HasSubstr("study:       quadratic\n"
                                            "owner:       alice\n"
                                            "state:       COMPLETED\n"));
}

TEST(FormatTest, OneStudyShowsWhyItWaitsItsPriorityAndSelector) {
  v1::Study study = Quadratic();
  study.set_state(v1::STUDY_ACTIVE);
  study.set_waiting("waiting: no worker matches gpu.model in [A100]");
  study.mutable_spec()->set_priority(7);
  auto& selector = *study.mutable_spec()
                        ->mutable_trial()
                        ->mutable_resources()
                        ->mutable_selector();
  selector["zone"].add_values()->set_string_value("eu");
  selector["gpu.model"].add_values()->set_string_value("A100");
  selector["gpu.model"].add_values()->set_string_value("H100");
  EXPECT_THAT(
      FormatStudy(study),
      HasSubstr("state:       ACTIVE\n"
                "             waiting: no worker matches gpu.model in [A100]\n"
                "priority:    7\n"
                "selector:    gpu.model in [A100, H100], zone in [eu]\n"));
}

TEST(FormatTest, AuditTableNewestFirstWithDashesForEmptyCells) {
  std::vector<v1::AuditEvent> events = {
      FromText<v1::AuditEvent>(R"pb(
        id: 7
        time { seconds: 1796210800 }
        principal: "admin"
        role: "admin"
        action: "BackupDatabase"
        detail: "/var/backups/dial/b1.db"
      )pb"),
      FromText<v1::AuditEvent>(R"pb(
        id: 3
        time { seconds: 1796210787 }
        principal: "alice"
        role: "user"
        action: "CreateStudy"
        study: "quadratic"
      )pb"),
  };
  EXPECT_EQ(FormatAuditEvents(events),
            "TIME                 PRINCIPAL  ROLE   ACTION          STUDY      "
            "DETAIL\n"
            "2026-12-02 11:26:40  admin      admin  BackupDatabase  -          "
            "/var/backups/dial/b1.db\n"
            "2026-12-02 11:26:27  alice      user   CreateStudy     quadratic  "
            "-\n");
  EXPECT_EQ(FormatAuditEvents({}),
            "TIME  PRINCIPAL  ROLE  ACTION  STUDY  DETAIL\n");
}

TEST(FormatTest, AuditCellsCannotBreakTheTableOrTheTerminal) {
  auto event = FromText<v1::AuditEvent>(R"pb(
    principal: "mallory"
    role: "user"
    action: "CreateStudy"
  )pb");
  event.set_detail("line one\nline two \x1b[2J\x7f");
  const std::string text = FormatAuditEvents({event});
  EXPECT_THAT(text, HasSubstr("line one\\x0aline two \\x1b[2J\\x7f\n"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
}

TEST(FormatTest, AStudyWithoutSearcherOrTrialsDoesNotCrash) {
  v1::Study study;
  study.set_name("bare");
  const std::string text = FormatStudy(study);
  EXPECT_THAT(text, HasSubstr("searcher:    -\n"));
  EXPECT_THAT(text, HasSubstr("scheduler:   -\n"));
  EXPECT_THAT(text, HasSubstr("created (none)"));
  EXPECT_EQ(StudyStateName(v1::STUDY_STOPPED), "STOPPED");
}

TEST(FormatTest, ProgressLineCountsFinishedTrialsAndShowsTheBest) {
  v1::StudyEvent event;
  *event.mutable_study() = Quadratic();
  (*event.mutable_study()->mutable_trial_counts())["COMPLETED"] = 5;
  (*event.mutable_study()->mutable_trial_counts())["STOPPED"] = 1;
  (*event.mutable_study()->mutable_trial_counts())["RUNNING"] = 4;
  (*event.mutable_study()->mutable_trial_counts())["PENDING"] = 2;
  EXPECT_EQ(ProgressLine(event),
            "[#################.............] 7/12 done, 4 running, 2 "
            "pending");
  *event.mutable_best_trial() = FromText<v1::Trial>(R"pb(
    number: 3
    objective_value: 0.5
    params {
      key: "x"
      value { double_value: 1.25 }
    }
  )pb");
  EXPECT_EQ(ProgressLine(event),
            "[#################.............] 7/12 done, 4 running, 2 "
            "pending | best loss=0.5 (trial 3: x=1.25)");
}

TEST(FormatTest, JsonUsesProtoFieldNames) {
  auto trial = FromText<v1::Trial>(R"pb(
    study: "q" number: 5 last_step: 7
  )pb");
  const std::string json = ToJson(trial);
  EXPECT_THAT(json, HasSubstr("\"last_step\": \"7\""));
  EXPECT_THAT(json, HasSubstr("\n"));  // indented for people too
  v1::Trial back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.number(), 5);

  v1::StudyEvent event;
  event.set_kind(v1::StudyEvent::TRIAL_CREATED);
  event.mutable_trial()->set_last_step(3);
  EXPECT_EQ(WatchEventJson(event),
            R"({"event":{"kind":"TRIAL_CREATED","trial":{"last_step":"3"}}})");
}

TEST(FormatTest, EvaluationListsNumericMetricsButNotTheTrial) {
  google::protobuf::Struct metrics;
  (*metrics.mutable_fields())["test_accuracy"].set_number_value(0.8555);
  (*metrics.mutable_fields())["trial"].set_number_value(6);
  (*metrics.mutable_fields())["checkpoint"].set_string_value("f/6/1200");
  EXPECT_EQ(FormatEvaluation(6, "f/6/1200", metrics),
            "trial 6  checkpoint f/6/1200\n"
            "  test_accuracy    0.8555\n");
  (*metrics.mutable_fields())["test_examples"].set_number_value(1024);
  EXPECT_THAT(FormatEvaluation(6, "f/6/1200", metrics),
              HasSubstr("  test_examples    1024\n"));
}

TEST(ParseTrialStatesTest, NamesInAnyCaseEmptyPartsSkipped) {
  auto states = ParseTrialStates("completed,RUNNING,,Paused");
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_THAT(*states, ElementsAre(v1::COMPLETED, v1::RUNNING, v1::PAUSED));
  auto none = ParseTrialStates("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(ParseTrialStatesTest, AnUnknownStateIsInvalidAndNamed) {
  for (const char* text : {"COMPLETED,done", "trial_state_unspecified"}) {
    auto states = ParseTrialStates(text);
    EXPECT_EQ(states.status().code(), absl::StatusCode::kInvalidArgument)
        << text;
    EXPECT_THAT(states.status().message(), HasSubstr("--state: unknown"));
  }
  EXPECT_THAT(ParseTrialStates("COMPLETED,done").status().message(),
              HasSubstr("'done'"));
}

TEST(FormatTest, ImportanceListsSharesWithBars) {
  v1::GetParameterImportanceResponse r;
  r.set_method("ped-anova");
  r.set_trials(300);
  r.set_top_trials(30);
  auto* a = r.add_params();
  a->set_name("lr");
  a->set_importance(0.75);
  auto* b = r.add_params();
  b->set_name("dropout");
  b->set_importance(0.25);
  EXPECT_EQ(FormatImportance(r),
            "ped-anova over 300 completed trials (the best 30)\n"
            "PARAM    IMPORTANCE\n"
            "lr        75.0%      ##############################\n"
            "dropout   25.0%      ##########\n");
}

}  // namespace
TEST(FormatTest, WorkersShowSlotsGpusAndRunningTrials) {
  v1::Worker w;
  w.set_id("node1-ab12");
  w.set_host("node1");
  w.mutable_resources()->set_slots(4);
  w.mutable_resources()->add_gpus();
  w.mutable_resources()->add_gpus();
  auto* t = w.add_running();
  t->set_study("asha");
  t->set_number(7);
  t = w.add_running();
  t->set_study("pbt");
  t->set_number(0);
  const std::string text = FormatWorkers({w});
  EXPECT_THAT(text, HasSubstr("ID"));
  EXPECT_THAT(text, HasSubstr("RUNNING"));
  EXPECT_THAT(text, HasSubstr("node1-ab12"));
  EXPECT_THAT(text, HasSubstr("asha/7,pbt/0"));
  EXPECT_THAT(text, ::testing::ContainsRegex("node1 +4 +2 +- "));
  // How it isolates trials, and why not.
  w.mutable_resources()->mutable_isolation()->set_method("none");
  w.mutable_resources()->mutable_isolation()->set_reason("not root");
  EXPECT_THAT(FormatWorkers({w}), HasSubstr("ISOLATION"));
  EXPECT_THAT(FormatWorkers({w}), HasSubstr(" none (not root) "));
  w.mutable_resources()->mutable_isolation()->set_isolated(true);
  w.mutable_resources()->mutable_isolation()->set_method("per-attempt-user");
  w.mutable_resources()->mutable_isolation()->clear_reason();
  EXPECT_THAT(FormatWorkers({w}), HasSubstr(" per-attempt-user "));
}

}  // namespace dial::client

namespace dial::client {
namespace {

TEST(FormatTest, ConfigurationsAreTypedByTheSearchSpace) {
  v1::StudySpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(search_space {
             name: "lr"
             float { min: 0.001 max: 0.1 }
           }
           search_space {
             name: "units"
             int { min: 8 max: 64 }
           }
           search_space {
             name: "opt"
             categorical { values: "adam" }
           })pb",
      &spec));
  auto one =
      ParseConfigurations(spec, R"({"lr": 0.01, "units": 32, "opt": "adam"})");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  const auto& p = (*one)[0].params();
  EXPECT_EQ(p.at("lr").double_value(), 0.01);
  EXPECT_EQ(p.at("units").int_value(), 32);
  EXPECT_EQ(p.at("opt").string_value(), "adam");
  auto two = ParseConfigurations(spec, R"([{"lr": 0.02}, {"units": 9}])");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  EXPECT_THAT(ParseConfigurations(spec, R"({"units": 3.5})").status().message(),
              HasSubstr("--params.units: must be an integer"));
  EXPECT_THAT(
      ParseConfigurations(spec, R"([{"lr": 1}, {"x": 1}])").status().message(),
      HasSubstr("--params[1].x: no such parameter"));
  EXPECT_THAT(ParseConfigurations(spec, "not json").status().message(),
              HasSubstr("not JSON"));
}

TEST(FormatTest, BestShowsTheFrontAndSeedRuns) {
  v1::GetBestTrialsResponse best;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(trials {
             number: 4
             state: COMPLETED
             objective_value: 0.9
             objective_values: 0.9
             objective_values: 12
           }
           hypervolume: 3.5
           reference_point: 0
           reference_point: 20
           front_size: 1
           seed_runs { trial: 4 runs: 3 mean: 0.88 stddev: 0.01 })pb",
      &best));
  const std::string out = FormatBest(best);
  EXPECT_THAT(out, HasSubstr("Pareto front: 1 trials, hypervolume 3.5 "
                             "(reference point 0, 20)"));
  EXPECT_THAT(out, HasSubstr("0.9, 12"));
  EXPECT_THAT(out, HasSubstr("ranked by the mean"));
  EXPECT_THAT(out, HasSubstr("0.88"));
}

TEST(FormatTest, EnsembleComparesWithTheBestSingleTrial) {
  google::protobuf::Struct m;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"test_accuracy": 0.9, "test_loss": 0.3,
                      "test_examples": 100, "member_0_accuracy": 0.85,
                      "member_1_accuracy": 0.87})",
                  &m)
                  .ok());
  const std::string out = FormatEnsemble("test", {7, 2}, m);
  EXPECT_THAT(out, HasSubstr("ensemble of 2: test accuracy 0.9"));
  EXPECT_THAT(out, HasSubstr("best single (trial 2): 0.87; the ensemble is "
                             "+3.00 points better"));
}

}  // namespace
}  // namespace dial::client
