// TrialTableBuilder: the columns TrialTable serves, and for studies with
// several objectives and constraints the per-objective values and
// feasibility the dashboard's Pareto view draws.
#include "scheduler/trial_table.h"

#include <gtest/gtest.h>

#include <cmath>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace dial::scheduler {
namespace {

google::protobuf::Struct Parse(const std::string& json) {
  google::protobuf::Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out);
  EXPECT_TRUE(status.ok()) << status << " in " << json;
  return out;
}

v1::StudySpec Spec(const std::string& text) {
  v1::StudySpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec));
  return spec;
}

v1::Trial Trial(int64_t number, v1::TrialState state,
                std::vector<double> values, double cost) {
  v1::Trial t;
  t.set_number(number);
  t.set_state(state);
  (*t.mutable_params())["x"].set_double_value(0.5 * number);
  if (!values.empty()) {
    t.set_objective_value(values[0]);
    for (double v : values) t.add_objective_values(v);
    (*t.mutable_final_metrics())["acc"] = values[0];
    (*t.mutable_final_metrics())["latency"] = values[1];
    (*t.mutable_final_metrics())["cost"] = cost;
  }
  return t;
}

TEST(TrialTableTest, SeveralObjectivesGetAColumnEachAndFeasibility) {
  const auto spec = Spec(R"pb(
    name: "mo"
    objectives { metric: "acc" goal: MAXIMIZE }
    objectives { metric: "latency" goal: MINIMIZE }
    constraints { metric: "cost" max: 10 }
    search_space {
      name: "x"
      float { min: 0 max: 5 }
    }
  )pb");
  TrialTableBuilder table(spec);
  table.Add(Trial(0, v1::COMPLETED, {0.9, 12.5}, 3));
  table.Add(Trial(1, v1::RUNNING, {}, 0));
  table.Add(Trial(2, v1::COMPLETED, {0.95, 30}, 11));  // infeasible
  const auto f = Parse(table.Finish()).fields();

  const auto& objectives = f.at("objectives").list_value();
  ASSERT_EQ(objectives.values_size(), 2);
  EXPECT_EQ(
      objectives.values(1).struct_value().fields().at("metric").string_value(),
      "latency");
  EXPECT_EQ(
      objectives.values(1).struct_value().fields().at("goal").string_value(),
      "MINIMIZE");
  const auto& values = f.at("values").struct_value().fields();
  const auto& latency = values.at("latency").list_value();
  ASSERT_EQ(latency.values_size(), 3);
  EXPECT_DOUBLE_EQ(latency.values(0).number_value(), 12.5);
  EXPECT_TRUE(latency.values(1).has_null_value());
  EXPECT_DOUBLE_EQ(latency.values(2).number_value(), 30);
  EXPECT_DOUBLE_EQ(values.at("acc").list_value().values(2).number_value(),
                   0.95);
  const auto& feasible = f.at("feasible").list_value();
  ASSERT_EQ(feasible.values_size(), 3);
  EXPECT_TRUE(feasible.values(0).bool_value());
  EXPECT_TRUE(feasible.values(1).has_null_value());
  EXPECT_FALSE(feasible.values(2).bool_value());
  EXPECT_TRUE(feasible.values(2).has_bool_value());
  // The single-objective columns stay as they were.
  EXPECT_DOUBLE_EQ(f.at("value").list_value().values(0).number_value(), 0.9);
  EXPECT_DOUBLE_EQ(f.at("param")
                       .struct_value()
                       .fields()
                       .at("x")
                       .list_value()
                       .values(2)
                       .number_value(),
                   1.0);
}

TEST(TrialTableTest, OneObjectiveHasNeitherValuesNorFeasibility) {
  const auto spec = Spec(R"pb(
    name: "one"
    objective { metric: "loss" goal: MINIMIZE }
    search_space {
      name: "x"
      float { min: 0 max: 5 }
    }
  )pb");
  TrialTableBuilder table(spec);
  v1::Trial t;
  t.set_number(0);
  t.set_state(v1::COMPLETED);
  t.set_objective_value(std::nan(""));
  table.Add(t);
  const auto f = Parse(table.Finish()).fields();
  EXPECT_FALSE(f.contains("objectives"));
  EXPECT_FALSE(f.contains("values"));
  EXPECT_FALSE(f.contains("feasible"));
  EXPECT_TRUE(f.at("value").list_value().values(0).has_null_value());
  EXPECT_TRUE(f.at("param")
                  .struct_value()
                  .fields()
                  .at("x")
                  .list_value()
                  .values(0)
                  .has_null_value());
}

}  // namespace
}  // namespace dial::scheduler
