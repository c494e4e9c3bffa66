#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/params.h"
#include "common/spec.h"
#include "searchers/searcher.h"
#include "searchers/space.h"
#include "searchers/trial_scheduler.h"

namespace dial::searchers {
namespace {

v1::StudySpec Spec(const std::string& search_space,
                   const std::string& extra = "") {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 1000}\nsearch_space:\n" +
      search_space + "\n" + extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  FillSpecDefaults(1, *spec);
  return *spec;
}

constexpr char kMixed[] = R"(
  - {name: lr, float: {min: 1.0e-4, max: 0.3, scale: LOG}}
  - {name: x, float: {min: -2, max: 3}}
  - {name: units, int: {min: 32, max: 512}}
  - {name: width, int: {min: 1, max: 1024, scale: LOG}}
  - {name: optimizer, categorical: {values: [sgd, adam, rmsprop]}}
  - {name: momentum, float: {min: 0.5, max: 0.99}, when: {optimizer: [sgd, rmsprop]}}
  - {name: nesterov, categorical: {values: ["yes", "no"]}, when: {optimizer: [sgd]}}
  - {name: batch, discrete: {values: [16, 32, 64, 128]}}
)";

std::string Key(const Params& p) {
  std::map<std::string, std::string> sorted;
  for (const auto& [k, v] : p) sorted[k] = ParamValueToString(v);
  std::string key;
  for (const auto& [k, v] : sorted) key += k + "=" + v + ";";
  return key;
}

TEST(SearchSpaceTest, EveryTypeRoundTripsThroughTheUnitCube) {
  auto space = SearchSpace::Create(Spec(kMixed));
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(5);
  for (int n = 0; n < 500; ++n) {
    Params p = space->Sample(rng);
    std::vector<double> unit = space->Encode(p);
    for (int i = 0; i < space->size(); ++i) {
      if (p.count(space->param(i).name())) {
        EXPECT_GE(unit[i], 0.0);
        EXPECT_LE(unit[i], 1.0);
      } else {
        EXPECT_TRUE(std::isnan(unit[i]));
      }
    }
    Params back = space->Decode(unit);
    // Floats may move by rounding in exp/log; categories and ints must not.
    ASSERT_EQ(back.size(), p.size());
    for (const auto& [name, value] : p) {
      const auto& b = back.at(name);
      if (value.has_double_value()) {
        EXPECT_NEAR(b.double_value(), value.double_value(),
                    1e-9 * std::max(1.0, std::abs(value.double_value())));
      } else {
        EXPECT_EQ(ParamValueToString(b), ParamValueToString(value)) << name;
      }
    }
  }
}

TEST(SearchSpaceTest, IntsAndCategoriesOwnEqualBuckets) {
  auto space = SearchSpace::Create(Spec(kMixed));
  ASSERT_TRUE(space.ok());
  const int units = 2, opt = 4, width = 3;
  for (int64_t v = 32; v <= 512; ++v) {
    v1::ParamValue pv;
    pv.set_int_value(v);
    EXPECT_EQ(space->FromUnit(units, space->ToUnit(units, pv)).int_value(), v);
  }
  for (int64_t v = 1; v <= 1024; ++v) {
    v1::ParamValue pv;
    pv.set_int_value(v);
    EXPECT_EQ(space->FromUnit(width, space->ToUnit(width, pv)).int_value(), v);
  }
  EXPECT_EQ(space->FromUnit(opt, 0.0).string_value(), "sgd");
  EXPECT_EQ(space->FromUnit(opt, 0.34).string_value(), "adam");
  EXPECT_EQ(space->FromUnit(opt, 1.0).string_value(), "rmsprop");
  EXPECT_EQ(space->FromUnit(units, 0.0).int_value(), 32);
  EXPECT_EQ(space->FromUnit(units, 1.0).int_value(), 512);
}

TEST(SearchSpaceTest, LogScaleSamplesEvenlyInLogSpace) {
  auto space = SearchSpace::Create(
      Spec("  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}"));
  ASSERT_TRUE(space.ok());
  std::mt19937_64 rng(9);
  int below = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    double lr = space->Sample(rng).at("lr").double_value();
    ASSERT_GE(lr, 1e-4);
    ASSERT_LE(lr, 1.0);
    below += lr < 1e-2;  // half of the log range
  }
  EXPECT_NEAR(double(below) / n, 0.5, 0.05);
}

TEST(SearchSpaceTest, ConditionalParametersAppearOnlyWhenActive) {
  auto space = SearchSpace::Create(Spec(kMixed));
  ASSERT_TRUE(space.ok());
  std::mt19937_64 rng(11);
  std::set<std::string> optimizers;
  for (int i = 0; i < 300; ++i) {
    Params p = space->Sample(rng);
    const std::string opt = p.at("optimizer").string_value();
    optimizers.insert(opt);
    EXPECT_EQ(p.count("momentum"), opt == "adam" ? 0u : 1u);
    EXPECT_EQ(p.count("nesterov"), opt == "sgd" ? 1u : 0u);
    for (int j = 0; j < space->size(); ++j) {
      auto it = p.find(space->param(j).name());
      if (it != p.end()) {
        EXPECT_TRUE(space->Contains(j, it->second));
      }
    }
  }
  EXPECT_EQ(optimizers.size(), 3u);
  // Decode drops a coordinate whose parameter is inactive.
  std::vector<double> unit(space->size(), 0.5);
  unit[4] = 0.5;  // adam
  Params decoded = space->Decode(unit);
  EXPECT_EQ(decoded.at("optimizer").string_value(), "adam");
  EXPECT_EQ(decoded.count("momentum"), 0u);
}

TEST(SearchSpaceTest, NumericConditionsMatchNumbers) {
  auto space = SearchSpace::Create(Spec(R"(
  - {name: layers, int: {min: 1, max: 3}}
  - {name: width2, int: {min: 8, max: 64}, when: {layers: [2, 3]}})"));
  ASSERT_TRUE(space.ok()) << space.status();
  Params p;
  p["layers"].set_int_value(1);
  EXPECT_FALSE(space->IsActive(1, p));
  p["layers"].set_int_value(3);
  EXPECT_TRUE(space->IsActive(1, p));
}

TEST(RandomSearcherTest, SameSeedSameSequenceAnyCallOrder) {
  auto spec = Spec(kMixed, "searcher: {random: {seed: 17}}");
  auto a = RandomSearcher::Create(spec);
  auto b = RandomSearcher::Create(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::string> first;
  for (int n = 0; n < 20; ++n) first.push_back(Key(*(*a)->Suggest(n)));
  // A fresh searcher (as after a restart) asked from trial 10 on agrees.
  for (int n = 10; n < 20; ++n) EXPECT_EQ(Key(*(*b)->Suggest(n)), first[n]);
  std::set<std::string> distinct(first.begin(), first.end());
  EXPECT_EQ(distinct.size(), first.size());

  auto other =
      RandomSearcher::Create(Spec(kMixed, "searcher: {random: {seed: 18}}"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(Key(*(*other)->Suggest(0)), first[0]);
}

TEST(GridSearcherTest, CartesianProductWithoutRepeats) {
  auto spec = Spec(R"(
  - {name: x, float: {min: 0, max: 1, grid_points: 3}}
  - {name: n, int: {min: 1, max: 4}}
  - {name: c, categorical: {values: [a, b]}})",
                   "searcher: {grid: {}}");
  auto grid = GridSearcher::Create(spec);
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ((*grid)->grid_size(), 3 * 4 * 2);
  std::set<std::string> seen;
  std::set<double> xs;
  for (int n = 0; n < 24; ++n) {
    auto p = (*grid)->Suggest(n);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(seen.insert(Key(*p)).second) << Key(*p);
    xs.insert(p->at("x").double_value());
  }
  EXPECT_EQ(xs, (std::set<double>{0.0, 0.5, 1.0}));
  EXPECT_EQ((*grid)->Suggest(24).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(GridSearcherTest, ConditionalBranchesOnlyWhereActive) {
  auto spec = Spec(R"(
  - {name: opt, categorical: {values: [sgd, adam]}}
  - {name: momentum, discrete: {values: [0.5, 0.9, 0.99]}, when: {opt: [sgd]}}
  - {name: lr, float: {min: 0.001, max: 0.1, scale: LOG, grid_points: 2}})",
                   "searcher: {grid: {}}");
  auto grid = GridSearcher::Create(spec);
  ASSERT_TRUE(grid.ok()) << grid.status();
  // sgd: 3 momenta x 2 lr; adam: 2 lr.
  EXPECT_EQ((*grid)->grid_size(), 8);
  std::set<std::string> seen;
  for (int n = 0; n < 8; ++n) {
    auto p = (*grid)->Suggest(n);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(seen.insert(Key(*p)).second);
    EXPECT_EQ(p->count("momentum"), p->at("opt").string_value() == "sgd");
  }
}

TEST(GridSearcherTest, ExhaustiveNeedsMaxTrialsToMatch) {
  const char* space = "  - {name: c, categorical: {values: [a, b, c]}}";
  auto status =
      GridSearcher::Create(Spec(space, "searcher: {grid: {exhaustive: true}}"))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), ::testing::HasSubstr("grid has 3 points"));
  // Without exhaustive, a small grid simply ends early.
  auto grid = GridSearcher::Create(Spec(space, "searcher: {grid: {}}"));
  ASSERT_TRUE(grid.ok());
  EXPECT_TRUE((*grid)->Suggest(2).ok());
  EXPECT_FALSE((*grid)->Suggest(3).ok());
  // With a matching budget it is fine.
  auto exact = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 3}\nsearcher: {grid: {exhaustive: true}}\n"
      "search_space:\n" +
      std::string(space));
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(GridSearcher::Create(*exact).ok());
}

TEST(GridSearcherTest, ShuffleIsASeededPermutation) {
  const char* space = R"(
  - {name: x, float: {min: 0, max: 1, grid_points: 5}}
  - {name: y, int: {min: 0, max: 5, grid_points: 6}})";
  auto a = GridSearcher::Create(
      Spec(space, "searcher: {grid: {shuffle: true, seed: 4}}"));
  auto b = GridSearcher::Create(
      Spec(space, "searcher: {grid: {shuffle: true, seed: 4}}"));
  auto plain = GridSearcher::Create(Spec(space, "searcher: {grid: {}}"));
  ASSERT_TRUE(a.ok() && b.ok() && plain.ok());
  std::set<std::string> shuffled, ordered;
  bool differs = false;
  for (int n = 0; n < 30; ++n) {
    std::string ka = Key(*(*a)->Suggest(n));
    EXPECT_EQ(ka, Key(*(*b)->Suggest(n)));
    std::string kp = Key(*(*plain)->Suggest(n));
    differs |= ka != kp;
    shuffled.insert(ka);
    ordered.insert(kp);
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(shuffled, ordered);
}

// The grid as the searcher enumerated it before it was made lazy: every
// point materialised, depth first, first parameter slowest. The lazy grid
// must visit the same points in the same order, so studies created before
// keep their sequence.
void EagerGrid(const SearchSpace& space,
               const std::vector<std::vector<v1::ParamValue>>& values, int i,
               Params& params, std::vector<std::string>& out) {
  if (i == space.size()) {
    out.push_back(Key(params));
    return;
  }
  if (!space.IsActive(i, params))
    return EagerGrid(space, values, i + 1, params, out);
  for (const auto& v : values[i]) {
    params[space.param(i).name()] = v;
    EagerGrid(space, values, i + 1, params, out);
  }
  params.erase(space.param(i).name());
}

std::vector<std::string> EagerOrder(const v1::StudySpec& spec) {
  auto space = SearchSpace::Create(spec);
  EXPECT_TRUE(space.ok());
  // Each parameter's list, read off the lazy grid itself would be circular:
  // take them from single-parameter grids instead.
  std::vector<std::vector<v1::ParamValue>> values;
  for (int i = 0; i < space->size(); ++i) {
    v1::StudySpec one = spec;
    one.clear_search_space();
    auto* p = one.add_search_space();
    *p = spec.search_space(i);
    p->clear_when();
    one.mutable_budget()->set_max_trials(1000000);
    auto grid = GridSearcher::Create(one);
    EXPECT_TRUE(grid.ok()) << grid.status();
    std::vector<v1::ParamValue>& list = values.emplace_back();
    for (int64_t n = 0; n < (*grid)->grid_size(); ++n) {
      list.push_back((*grid)->Suggest(n)->at(p->name()));
    }
  }
  std::vector<std::string> out;
  Params scratch;
  EagerGrid(*space, values, 0, scratch, out);
  return out;
}

TEST(GridSearcherTest, LazyGridKeepsTheEagerOrder) {
  const char* nested = R"(
  - {name: opt, categorical: {values: [sgd, adam, rmsprop]}}
  - {name: width, int: {min: 1, max: 1024, scale: LOG, grid_points: 4}}
  - {name: momentum, discrete: {values: [0.5, 0.9]}, when: {opt: [sgd, rmsprop]}}
  - {name: nesterov, categorical: {values: ["yes", "no"]}, when: {opt: [sgd]}}
  - {name: damp, float: {min: 0, max: 1, grid_points: 3}, when: {nesterov: ["no"]}}
  - {name: lr, float: {min: 0.001, max: 0.1, scale: LOG, grid_points: 3}}
  - {name: units, int: {min: 1, max: 3}})";
  for (const char* space : {kMixed, nested}) {
    const v1::StudySpec spec =
        Spec(space, "searcher: {grid: {default_points: 3}}");
    const std::vector<std::string> eager = EagerOrder(spec);
    auto grid = GridSearcher::Create(spec);
    ASSERT_TRUE(grid.ok()) << grid.status();
    ASSERT_EQ((*grid)->grid_size(), int64_t(eager.size()));
    const int64_t used = std::min<int64_t>(eager.size(), 1000);
    for (int64_t n = 0; n < used; ++n) {
      ASSERT_EQ(Key(*(*grid)->Suggest(n)), eager[n]) << "point " << n;
    }
  }
}

std::string TwoValueInts(int count) {
  std::string space;
  for (int i = 0; i < count; ++i) {
    absl::StrAppend(&space, "  - {name: p", i, ", int: {min: 0, max: 1}}\n");
  }
  return space;
}

// Finding: a 356-byte grid spec (30 two-value ints, max_trials 200k)
// allocated 567 MB, and UpdateStudy rebuilt it under the core lock for
// 1.9 s. The grid is now decoded point by point: creating it allocates in
// proportion to its parameters, and its size is counted exactly (the old
// grid stopped counting past 10^6).
TEST(GridSearcherTest, HugeGridCostsMemoryOfItsParametersOnly) {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 200000}\nsearcher: {grid: {}}\nsearch_space:\n" +
      TwoValueInts(30));
  ASSERT_TRUE(spec.ok()) << spec.status();
  FillSpecDefaults(1, *spec);
  const size_t before = mallinfo2().uordblks;
  auto grid = GridSearcher::Create(*spec);
  ASSERT_TRUE(grid.ok()) << grid.status();
  const size_t after = mallinfo2().uordblks;
  // ~200 bytes per parameter; the materialised grid was ~2.8 KB per point.
  EXPECT_LT(after > before ? after - before : 0, size_t{1} << 20);
  EXPECT_EQ((*grid)->grid_size(), int64_t{1} << 30);
  // Point n is n in binary, first parameter most significant.
  auto last = (*grid)->Suggest(199999);
  ASSERT_TRUE(last.ok());
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(last->at(absl::StrCat("p", i)).int_value(),
              (199999 >> (29 - i)) & 1)
        << i;
  }
  EXPECT_EQ((*grid)->Suggest(200000).status().code(),
            absl::StatusCode::kOutOfRange);
}

// 2^40 points, shuffled: the old grid refused to shuffle more than 10^6
// points (it shuffled a materialised list). The permutation is a bijection,
// so the points it visits never repeat.
TEST(GridSearcherTest, ShufflesAGridOfTwoToTheFortyPoints) {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 1000000}\n"
      "searcher: {grid: {shuffle: true, seed: 9}}\nsearch_space:\n" +
      TwoValueInts(40));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto grid = GridSearcher::Create(*spec);
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ((*grid)->grid_size(), int64_t{1} << 40);
  std::set<std::string> seen;
  int high = 0;  // points whose first parameter is 1: about half
  for (int n = 0; n < 20000; ++n) {
    auto p = (*grid)->Suggest(n);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(seen.insert(Key(*p)).second) << n;
    high += p->at("p0").int_value();
  }
  EXPECT_GT(high, 9000);
  EXPECT_LT(high, 11000);
}

TEST(GridSearcherTest, ShuffleIsAPermutationOfTheWholeGrid) {
  // 7 x 11 x 13 = 1001 points: not a power of two, so the permutation
  // walks cycles; with conditions, branches of unequal size.
  const char* space = R"(
  - {name: a, int: {min: 0, max: 6}}
  - {name: b, int: {min: 0, max: 10}}
  - {name: c, int: {min: 0, max: 12}})";
  const char* conditional = R"(
  - {name: opt, categorical: {values: [sgd, adam, rmsprop]}}
  - {name: momentum, discrete: {values: [0.5, 0.9, 0.95]}, when: {opt: [sgd]}}
  - {name: n, int: {min: 0, max: 40}})";
  for (const char* s : {space, conditional}) {
    v1::StudySpec spec = Spec(s, "searcher: {grid: {}}");
    spec.mutable_budget()->set_max_trials(2000);
    const std::vector<std::string> eager = EagerOrder(spec);
    spec.mutable_searcher()->mutable_grid()->set_shuffle(true);
    spec.mutable_searcher()->mutable_grid()->set_seed(77);
    auto grid = GridSearcher::Create(spec);
    ASSERT_TRUE(grid.ok()) << grid.status();
    std::vector<std::string> order;
    for (int64_t n = 0; n < int64_t(eager.size()); ++n) {
      order.push_back(Key(*(*grid)->Suggest(n)));
    }
    EXPECT_FALSE((*grid)->Suggest(int64_t(eager.size())).ok());
    EXPECT_NE(order, eager);
    std::sort(order.begin(), order.end());
    std::vector<std::string> sorted = eager;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(order, sorted);
  }
}

// Conditions nested on many values branch exponentially; counting them is
// capped instead of taking minutes under the core's lock.
TEST(GridSearcherTest, RefusesConditionsThatBranchTooMuch) {
  std::string space = "  - {name: p0, categorical: {values: [a, b]}}\n";
  for (int i = 1; i < 30; ++i) {
    absl::StrAppend(&space, "  - {name: p", i,
                    ", categorical: {values: [a, b]}, when: {p", i - 1,
                    ": [a, b]}}\n");
  }
  auto grid = GridSearcher::Create(Spec(space, "searcher: {grid: {}}"));
  EXPECT_EQ(grid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(grid.status().message(),
              ::testing::HasSubstr("searcher.grid: the conditional"));
}

TEST(TrialSchedulerTest, FifoAlwaysContinues) {
  FifoScheduler fifo;
  v1::Trial trial;
  Metrics m;
  m["loss"] = 1e9;
  for (int step = 0; step < 5; ++step) {
    EXPECT_EQ(fifo.OnReport(trial, step, m).action(), v1::Decision::CONTINUE);
  }
}

TEST(FactoryTest, EverySearcherAndSchedulerIsBuilt) {
  for (const char* searcher :
       {"{random: {}}", "{grid: {}}", "{bayesian: {}}", "{tpe: {}}"}) {
    auto spec = Spec("  - {name: x, float: {min: 0, max: 1}}",
                     std::string("searcher: ") + searcher);
    auto created = CreateSearcher(spec);
    ASSERT_TRUE(created.ok()) << searcher << ": " << created.status();
    EXPECT_TRUE((*created)->Suggest(0).ok());
  }
  for (const char* scheduler :
       {"{fifo: {}}", "{median: {}}",
        "{asha: {min_steps: 1, max_steps: 9, reduction_factor: 3}}",
        "{asha: {min_steps: 1, max_steps: 9, reduction_factor: 3, promotion: "
        "true}}",
        "{hyperband: {min_steps: 1, max_steps: 9, reduction_factor: 3}}",
        "{hyperband: {min_steps: 1, max_steps: 9, reduction_factor: 3, "
        "synchronous: true}}",
        "{pbt: {perturbation_interval: 5, quantile: 0.25}}"}) {
    auto spec = Spec("  - {name: x, float: {min: 0, max: 1}}",
                     std::string("scheduler: ") + scheduler);
    EXPECT_TRUE(CreateTrialScheduler(spec).ok()) << scheduler;
  }
}

}  // namespace
}  // namespace dial::searchers
