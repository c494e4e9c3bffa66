// The searcher registry: every kind of the SearcherSpec oneof has exactly
// one entry, which checks its own settings (naming the field), fills its
// defaults, gives its seed and makes the searcher; the common validation
// knows none of them.
#include "searchers/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/spec.h"

namespace dial::searchers {
namespace {

using ::testing::HasSubstr;

v1::StudySpec Spec(const std::string& searcher,
                   const std::string& space =
                       "search_space: [{name: x, float: {min: 0, max: 1}}]\n") {
  auto spec = ParseStudySpec(
      "name: r\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 20}\n" +
      space + "searcher: " + searcher + "\n");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::StudySpec());
}

TEST(SearcherRegistryTest, EveryKindOfTheProtoHasOneEntry) {
  const auto* oneof = v1::SearcherSpec::descriptor()->FindOneofByName("kind");
  ASSERT_NE(oneof, nullptr);
  std::set<int> kinds;
  std::set<std::string> names;
  for (const SearcherKind& k : SearcherKinds()) {
    EXPECT_TRUE(kinds.insert(k.kind).second) << k.name;
    EXPECT_TRUE(names.insert(std::string(k.name)).second) << k.name;
    // The entry's name is the oneof field's, as specs spell it.
    const auto* field =
        v1::SearcherSpec::descriptor()->FindFieldByNumber(k.kind);
    ASSERT_NE(field, nullptr) << k.name;
    EXPECT_EQ(field->name(), k.name);
    EXPECT_NE(k.validate, nullptr);
    EXPECT_NE(k.seed, nullptr);
    EXPECT_NE(k.create, nullptr);
  }
  EXPECT_EQ(int(kinds.size()), oneof->field_count());
}

TEST(SearcherRegistryTest, EachKindIsMadeWithItsSeed) {
  for (const SearcherKind& k : SearcherKinds()) {
    v1::StudySpec spec = Spec("{" + std::string(k.name) + ": {}}");
    FillDefaults(11, spec);
    ASSERT_TRUE(ValidateSpec(spec).ok()) << k.name << ValidateSpec(spec);
    const SearcherKind* found = FindSearcherKind(spec.searcher());
    ASSERT_EQ(found, &k);
    EXPECT_EQ(found->seed(spec.searcher()), 11u) << k.name;
    EXPECT_EQ(SearcherSeed(spec), 11u) << k.name;
    auto searcher = CreateSearcher(spec);
    ASSERT_TRUE(searcher.ok()) << k.name << searcher.status();
    auto params = (*searcher)->Suggest(0, {});
    ASSERT_TRUE(params.ok()) << k.name << params.status();
    EXPECT_TRUE(params->count("x")) << k.name;
  }
}

TEST(SearcherRegistryTest, NoKindMeansRandom) {
  v1::StudySpec spec = Spec("{}");
  spec.clear_searcher();
  ASSERT_NE(FindSearcherKind(spec.searcher()), nullptr);
  EXPECT_EQ(FindSearcherKind(spec.searcher())->name, "random");
  FillDefaults(3, spec);
  EXPECT_TRUE(spec.searcher().has_random());
  EXPECT_EQ(spec.searcher().random().seed(), 3u);
}

TEST(SearcherRegistryTest, AKindsDefaultsAreItsOwn) {
  v1::StudySpec grid = Spec("{grid: {}}");
  FillSpecDefaults(5, grid);  // the common defaults alone
  EXPECT_EQ(grid.searcher().grid().default_points(), 0);
  EXPECT_EQ(grid.searcher().grid().seed(), 5u);
  FillDefaults(5, grid);
  EXPECT_EQ(grid.searcher().grid().default_points(), 5);
  // A seed given is kept.
  v1::StudySpec seeded = Spec("{tpe: {seed: 42}}");
  FillDefaults(5, seeded);
  EXPECT_EQ(seeded.searcher().tpe().seed(), 42u);
}

// Each kind's own settings are checked by its entry alone, naming the field;
// the common validation lets them through.
TEST(SearcherRegistryTest, BadSettingsNameTheField) {
  struct Case {
    std::string searcher, space, field, reason;
  };
  const std::string cond =
      "search_space: [{name: a, categorical: {values: [p, q]}},\n"
      "  {name: x, float: {min: 0, max: 1}, when: {a: [p]}}]\n";
  const std::vector<Case> cases = {
      {"{grid: {default_points: 1}}", "", "searcher.grid.default_points",
       "at least 2"},
      {"{grid: {default_points: 2147483647}}", "",
       "searcher.grid.default_points", "at most 10000"},
      {"{bayesian: {initial_trials: -1}}", "",
       "searcher.bayesian.initial_trials", ">= 0"},
      {"{tpe: {initial_trials: -2}}", "", "searcher.tpe.initial_trials",
       ">= 0"},
      {"{nsga2: {population_size: 20000}}", "",
       "searcher.nsga2.population_size", "10000"},
      {"{nsga2: {mutation_probability: 1.5}}", "",
       "searcher.nsga2.mutation_probability", "[0, 1]"},
      {"{cmaes: {population_size: 1}}", "", "searcher.cmaes.population_size",
       "2..10000"},
      {"{cmaes: {sigma0: 2}}", "", "searcher.cmaes.sigma0", "[0, 1]"},
      {"{cmaes: {max_restarts: 101}}", "", "searcher.cmaes.max_restarts",
       "100"},
      {"{cmaes: {}}", cond, "searcher.cmaes", "conditional parameters ('x')"},
  };
  for (const Case& c : cases) {
    v1::StudySpec spec =
        c.space.empty() ? Spec(c.searcher) : Spec(c.searcher, c.space);
    EXPECT_TRUE(ValidateStudySpec(spec).ok())
        << c.searcher << ": the common checks know no searcher";
    absl::Status status = ValidateSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.searcher;
    EXPECT_THAT(status.message(), HasSubstr(c.field + ": ")) << c.searcher;
    EXPECT_THAT(status.message(), HasSubstr(c.reason)) << c.searcher;
    // Creating the searcher checks the same rules (one place: the entry).
    FillDefaults(1, spec);
    EXPECT_FALSE(CreateSearcher(spec).ok()) << c.searcher;
  }
}

}  // namespace
}  // namespace dial::searchers
