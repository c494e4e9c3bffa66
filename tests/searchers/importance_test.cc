// PED-ANOVA parameter importance: finds the parameters a function depends
// on (continuous, integer, categorical, conditional), ignores the rest, and
// refuses what it cannot answer.
#include "searchers/importance.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "common/spec.h"

namespace dial::searchers {
namespace {

SearchSpace Space(const std::string& search_space) {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 1000}\nsearch_space:\n" +
      search_space);
  EXPECT_TRUE(spec.ok()) << spec.status();
  FillSpecDefaults(1, *spec);
  auto space = SearchSpace::Create(*spec);
  EXPECT_TRUE(space.ok()) << space.status();
  return *space;
}

std::map<std::string, double> ByName(const ImportanceResult& r) {
  std::map<std::string, double> out;
  for (const auto& p : r.params) out[p.name] = p.importance;
  return out;
}

constexpr char kEight[] = R"(
  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}
  - {name: x1, float: {min: 0, max: 1}}
  - {name: x2, float: {min: 0, max: 1}}
  - {name: x3, float: {min: 0, max: 1}}
  - {name: x4, float: {min: 0, max: 1}}
  - {name: units, int: {min: 1, max: 1000}}
  - {name: depth, int: {min: 1, max: 8}}
  - {name: optimizer, categorical: {values: [sgd, adam, rmsprop]}}
)";

// The loss depends on lr (in log space), the optimizer and, less, x1;
// not on x2, x3, x4, units or depth.
std::vector<ScoredTrial> Sample(const SearchSpace& space, int n,
                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ScoredTrial> trials;
  for (int t = 0; t < n; ++t) {
    ScoredTrial s;
    s.params = space.Sample(rng);
    const double lr = std::log10(s.params.at("lr").double_value());
    const double x1 = s.params.at("x1").double_value();
    const bool adam = s.params.at("optimizer").string_value() == "adam";
    s.loss =
        4 * (lr + 2) * (lr + 2) + (adam ? 0 : 3) + 20 * (x1 - 0.5) * (x1 - 0.5);
    trials.push_back(std::move(s));
  }
  return trials;
}

TEST(PedAnovaTest, RanksTheParametersTheLossDependsOn) {
  const SearchSpace space = Space(kEight);
  auto r = PedAnovaImportance(space, Sample(space, 2000, 1), 0.1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->trials, 2000);
  EXPECT_EQ(r->top_trials, 200);
  ASSERT_EQ(r->params.size(), 8u);
  auto imp = ByName(*r);
  // Most important first, shares summing to 1.
  double sum = 0;
  for (size_t i = 0; i < r->params.size(); ++i) {
    sum += r->params[i].importance;
    if (i > 0) {
      EXPECT_GE(r->params[i - 1].importance, r->params[i].importance);
    }
  }
  EXPECT_NEAR(sum, 1.0, 1e-9);
  // lr and the optimizer decide the best trials, x1 still counts, the
  // rest is noise.
  EXPECT_THAT((std::vector<std::string>{r->params[0].name, r->params[1].name}),
              ::testing::UnorderedElementsAre("lr", "optimizer"));
  EXPECT_EQ(r->params[2].name, "x1");
  EXPECT_GT(imp["lr"] + imp["optimizer"], 0.8);
  for (const char* noise : {"x2", "x3", "x4", "units", "depth"}) {
    EXPECT_LT(imp[noise], 0.03) << noise;
    EXPECT_GT(imp["x1"], 3 * imp[noise]) << noise;
  }
}

TEST(PedAnovaTest, TheOrderOfTrialsDoesNotMatter) {
  const SearchSpace space = Space(kEight);
  auto trials = Sample(space, 500, 2);
  auto a = PedAnovaImportance(space, trials, 0.2);
  std::mt19937_64 rng(3);
  std::shuffle(trials.begin(), trials.end(), rng);
  auto b = PedAnovaImportance(space, trials, 0.2);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ia = ByName(*a), ib = ByName(*b);
  for (const auto& [name, v] : ia) EXPECT_NEAR(v, ib[name], 1e-12) << name;
}

TEST(PedAnovaTest, InactiveParametersCountOnlyWhereActive) {
  const SearchSpace space = Space(R"(
  - {name: optimizer, categorical: {values: [sgd, adam]}}
  - {name: momentum, float: {min: 0, max: 1}, when: {optimizer: [sgd]}}
  - {name: noise, float: {min: 0, max: 1}}
)");
  std::mt19937_64 rng(4);
  std::vector<ScoredTrial> trials;
  for (int t = 0; t < 1000; ++t) {
    ScoredTrial s;
    s.params = space.Sample(rng);
    // Among sgd trials only momentum matters, and sgd is never the best.
    const auto m = s.params.find("momentum");
    s.loss = m == s.params.end() ? 0.0
                                 : 1 + std::abs(m->second.double_value() - 0.2);
    trials.push_back(std::move(s));
  }
  auto r = PedAnovaImportance(space, trials, 0.1);
  ASSERT_TRUE(r.ok()) << r.status();
  auto imp = ByName(*r);
  EXPECT_EQ(r->params[0].name, "optimizer");
  EXPECT_LT(imp["noise"], 0.1);
}

TEST(PedAnovaTest, RefusesWhatItCannotAnswer) {
  const SearchSpace space = Space(kEight);
  auto few = Sample(space, 3, 5);
  EXPECT_EQ(PedAnovaImportance(space, few, 0.1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Trials without a finite loss do not count.
  auto some = Sample(space, 5, 6);
  some[0].loss = std::nan("");
  some[1].loss = HUGE_VAL;
  EXPECT_EQ(PedAnovaImportance(space, some, 0.1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto enough = Sample(space, 10, 7);
  for (double q : {0.0, 1.0, -0.5, std::nan("")}) {
    EXPECT_EQ(PedAnovaImportance(space, enough, q).status().code(),
              absl::StatusCode::kInvalidArgument)
        << q;
  }
  EXPECT_TRUE(PedAnovaImportance(space, enough, 0.1).ok());
}

}  // namespace
}  // namespace dial::searchers
