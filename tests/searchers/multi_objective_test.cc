// Several objectives, constraints and unique suggestions (issue 20): the
// Pareto math, NSGA-II, MOTPE, ParEGO and constrained EI in the Bayesian
// searcher, MOASHA, the no-duplicates guarantee and spec validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "bench/searchers/functions.h"
#include "common/spec.h"
#include "google/protobuf/util/time_util.h"
#include "searchers/bayesian_searcher.h"
#include "searchers/early_stopping.h"
#include "searchers/pareto.h"
#include "searchers/registry.h"
#include "searchers/searcher.h"

namespace dial::searchers {
namespace {

using ::testing::HasSubstr;

v1::StudySpec Spec(const std::string& yaml) {
  auto spec = ParseStudySpec("name: t\nbudget: {max_trials: 1000}\n" + yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateStudySpec(*spec).ok()) << ValidateStudySpec(*spec);
  FillSpecDefaults(1, *spec);
  return *spec;
}

// ZDT1 in 4 variables: a convex front f2 = 1 - sqrt(f1) at x2..x4 = 0.
constexpr char kZdt1[] = R"(
objectives: [{metric: f1, goal: MINIMIZE}, {metric: f2, goal: MINIMIZE}]
search_space:
  - {name: x1, float: {min: 0, max: 1}}
  - {name: x2, float: {min: 0, max: 1}}
  - {name: x3, float: {min: 0, max: 1}}
  - {name: x4, float: {min: 0, max: 1}}
)";

Metrics Zdt1(const Params& p) {
  const double x1 = p.at("x1").double_value();
  const double g =
      1 + 9 *
              (p.at("x2").double_value() + p.at("x3").double_value() +
               p.at("x4").double_value()) /
              3;
  Metrics m;
  m["f1"] = x1;
  m["f2"] = g * (1 - std::sqrt(x1 / g));
  return m;
}

v1::Trial Finished(int64_t number, const Params& params, const Metrics& m,
                   const v1::StudySpec& spec,
                   v1::TrialState state = v1::COMPLETED) {
  v1::Trial t;
  t.set_number(number);
  t.set_state(state);
  *t.mutable_params() = params;
  *t.mutable_end_time() =
      google::protobuf::util::TimeUtil::MillisecondsToTimestamp(1000 + number);
  if (state == v1::COMPLETED) {
    *t.mutable_final_metrics() = m;
    EXPECT_FALSE(SetObjectiveValues(spec, t).has_value());
  }
  return t;
}

// Runs `trials` sequential trials (warm-started from `prior`, if given);
// returns the trials.
std::vector<v1::Trial> RunStudy(const v1::StudySpec& spec, int trials,
                                const std::function<Metrics(const Params&)>& f,
                                const std::vector<v1::Trial>* prior = nullptr) {
  auto searcher = CreateSearcher(spec);
  EXPECT_TRUE(searcher.ok()) << searcher.status();
  if (prior) {
    for (const auto& t : *prior) (*searcher)->ObservePrior(t);
  }
  std::vector<v1::Trial> out;
  for (int n = 0; n < trials; ++n) {
    auto params = (*searcher)->Suggest(n);
    EXPECT_TRUE(params.ok()) << params.status();
    if (!params.ok()) break;
    out.push_back(Finished(n, *params, f(*params), spec));
    (*searcher)->Observe(out.back());
  }
  return out;
}

double Hv(const v1::StudySpec& spec, const std::vector<v1::Trial>& trials,
          const Point& reference) {
  std::vector<Point> points;
  for (const auto& t : trials) {
    if (!IsFeasible(spec, t.final_metrics())) continue;
    if (auto p = MinimizedObjectives(spec, t)) points.push_back(*p);
  }
  return Hypervolume(points, reference);
}

// Mean hypervolume of `searcher` on ZDT1 over three seeds.
double MeanZdt1Hv(const std::string& searcher, int trials) {
  double total = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    const auto spec = Spec(std::string(kZdt1) + "searcher: {" + searcher +
                           ": {seed: " + std::to_string(seed) + "}}\n");
    total += Hv(spec, RunStudy(spec, trials, Zdt1), {1.1, 11});
  }
  return total / 3;
}

TEST(ParetoTest, DominanceRanksAndCrowding) {
  const std::vector<Point> points = {{1, 5}, {2, 2}, {5, 1}, {3, 3}, {6, 6}};
  EXPECT_TRUE(Dominates({2, 2}, {3, 3}));
  EXPECT_FALSE(Dominates({1, 5}, {5, 1}));
  EXPECT_FALSE(Dominates({2, 2}, {2, 2}));
  EXPECT_THAT(ParetoRanks(points), ::testing::ElementsAre(0, 0, 0, 1, 2));
  EXPECT_THAT(ParetoFront(points), ::testing::ElementsAre(0, 1, 2));
  const auto crowding = CrowdingDistances(points, {0, 1, 2});
  EXPECT_TRUE(std::isinf(crowding[0]));
  EXPECT_TRUE(std::isinf(crowding[2]));
  EXPECT_NEAR(crowding[1], 4.0 / 4 + 4.0 / 4, 1e-12);
  // Constrained domination: the infeasible point ranks after every
  // feasible one however good its objectives.
  const std::vector<double> violation = {0, 0, 0, 0, 0.5};
  const std::vector<Point> with_good_infeasible = {
      {1, 5}, {2, 2}, {5, 1}, {3, 3}, {0, 0}};
  const auto ranks = ParetoRanks(with_good_infeasible, &violation);
  EXPECT_EQ(ranks[4], 2);
  EXPECT_EQ(ParetoOrder(with_good_infeasible, &violation).back(), 4);
}

TEST(ParetoTest, HypervolumeIsExactIn2And3Dimensions) {
  // Boxes of 3x1 and 1x3 overlapping in 1x1.
  EXPECT_DOUBLE_EQ(Hypervolume({{1, 3}, {3, 1}}, {4, 4}), 3 + 3 - 1);
  EXPECT_DOUBLE_EQ(Hypervolume({{0, 0, 0}}, {1, 1, 1}), 1);
  // Union of [0.5,1]x[0,1]x[0,1] and [0,1]x[0.5,1]x[0,1]... minimising:
  // points (0.5,0,0) and (0,0.5,0) with reference (1,1,1): 0.5 + 0.5 -
  // 0.25.
  EXPECT_DOUBLE_EQ(Hypervolume({{0.5, 0, 0}, {0, 0.5, 0}}, {1, 1, 1}), 0.75);
  // Three points of a 3-D front against inclusion-exclusion by hand.
  const double hv =
      Hypervolume({{0, 0.5, 0.5}, {0.5, 0, 0.5}, {0.5, 0.5, 0}}, {1, 1, 1});
  // Each box is 1 x 0.5 x 0.5 = 0.25; pairwise overlaps 0.5^3 = 0.125;
  // the triple overlap 0.125.
  EXPECT_DOUBLE_EQ(hv, 3 * 0.25 - 3 * 0.125 + 0.125);
  // Points outside the reference add nothing; dominated ones change
  // nothing.
  EXPECT_DOUBLE_EQ(
      Hypervolume({{0, 0, 0}, {0.2, 0.2, 0.2}, {2, 0, 0}}, {1, 1, 1}), 1);
}

TEST(ParetoTest, ObjectivesAreMinimisedAndConstraintsMeasured) {
  const auto spec = Spec(R"(
objectives: [{metric: acc, goal: MAXIMIZE}, {metric: ms, goal: MINIMIZE}]
constraints: [{metric: mem, max: 4}, {metric: acc, min: 0.5}]
search_space: [{name: x, float: {min: 0, max: 1}}]
)");
  EXPECT_TRUE(IsMultiObjective(spec));
  EXPECT_EQ(spec.objective().metric(), "acc");  // the first, for old code
  Metrics m;
  m["acc"] = 0.9;
  m["ms"] = 12;
  m["mem"] = 5;
  EXPECT_THAT(*MinimizedObjectives(spec, m), ::testing::ElementsAre(-0.9, 12));
  EXPECT_DOUBLE_EQ(ConstraintViolation(spec, m), 1);
  m["mem"] = 3;
  EXPECT_TRUE(IsFeasible(spec, m));
  m.erase("mem");
  EXPECT_TRUE(std::isinf(ConstraintViolation(spec, m)));
}

TEST(MultiObjectiveSpecTest, InvalidSpecsNameTheField) {
  auto check = [](const std::string& yaml, const std::string& field) {
    auto spec = ParseStudySpec("name: t\nbudget: {max_trials: 10}\n" + yaml);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::Status status = ValidateSpec(*spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(status.message(), HasSubstr(field));
  };
  const std::string space =
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n";
  const std::string two =
      "objectives: [{metric: a, goal: MINIMIZE}, {metric: b, goal: "
      "MAXIMIZE}]\n";
  check(
      "objectives: [{metric: a, goal: MINIMIZE}, {metric: a, goal: "
      "MAXIMIZE}]\n" +
          space,
      "objectives[1].metric");
  check("objectives: [{metric: a, goal: MINIMIZE}, {metric: b}]\n" + space,
        "objectives[1].goal");
  check(two + "objective: {metric: c, goal: MINIMIZE}\n" + space, "objective");
  check(two + space + "scheduler: {median: {}}\n", "scheduler.median");
  check(two + space + "searcher: {cmaes: {}}\n", "searcher.cmaes");
  check(two + space + "constraints: [{metric: m}]\n", "constraints[0]");
  check(two + space + "constraints: [{metric: m, min: 2, max: 1}]\n",
        "constraints[0].min");
  check(two + space + "searcher: {nsga2: {crossover_probability: 2}}\n",
        "searcher.nsga2.crossover_probability");
  // One objective given as a list is the plain single-objective form.
  auto one = Spec("objectives: [{metric: a, goal: MAXIMIZE}]\n" + space);
  EXPECT_FALSE(IsMultiObjective(one));
  EXPECT_EQ(one.objective().metric(), "a");
  EXPECT_EQ(one.objectives_size(), 0);
}

TEST(MultiObjectiveSearchTest, EachSearcherBeatsRandomOnZdt1) {
  const double random = MeanZdt1Hv("random", 150);
  const double nsga2 = MeanZdt1Hv("nsga2", 150);
  const double tpe = MeanZdt1Hv("tpe", 150);
  EXPECT_GT(nsga2, random);
  EXPECT_GT(tpe, random);
  const double bayesian = MeanZdt1Hv("bayesian", 40);
  const double random40 = MeanZdt1Hv("random", 40);
  EXPECT_GT(bayesian, random40);
  // The front's best possible hypervolume for this reference is about
  // 1.1 * 11 - (area above the front), below 12.1.
  EXPECT_LT(nsga2, 12.1);
}

TEST(MultiObjectiveSearchTest, ARestartedSearcherSuggestsTheSame) {
  for (const std::string searcher :
       {"nsga2: {population_size: 8}", "tpe: {}", "bayesian: {}"}) {
    const auto spec = Spec(std::string(kZdt1) +
                           "constraints: [{metric: f1, max: 0.8}]\n"
                           "searcher: {" +
                           searcher + "}\n");
    auto trials = RunStudy(spec, 25, Zdt1);
    auto running = CreateSearcher(spec);
    auto restarted = CreateSearcher(spec);
    ASSERT_TRUE(running.ok() && restarted.ok());
    for (const auto& t : trials) {
      (*running)->Observe(t);
      (*restarted)->Observe(t);
    }
    // The running one has suggested before (and dropped one).
    ASSERT_TRUE((*running)->Suggest(25).ok());
    auto a = (*running)->Suggest(25);
    auto b = (*restarted)->Suggest(25);
    ASSERT_TRUE(a.ok() && b.ok()) << searcher;
    EXPECT_EQ(ParamsKey(*a), ParamsKey(*b)) << searcher;
  }
}

// Constrained Branin: minimise subject to (x1-2.5)^2 + (x2-7.5)^2 <= 50,
// which rules out two of Branin's three minima.
Metrics ConstrainedBranin(const Params& p) {
  const double x1 = p.at("x1").double_value(), x2 = p.at("x2").double_value();
  const double a = x2 - 5.1 / (4 * M_PI * M_PI) * x1 * x1 + 5 / M_PI * x1 - 6;
  Metrics m;
  m["y"] = a * a + 10 * (1 - 1 / (8 * M_PI)) * std::cos(x1) + 10;
  m["c"] = (x1 - 2.5) * (x1 - 2.5) + (x2 - 7.5) * (x2 - 7.5);
  return m;
}

TEST(ConstraintTest, SearchersPreferFeasibleTrials) {
  for (const std::string searcher : {"tpe", "bayesian", "nsga2"}) {
    const auto spec = Spec(
        "objective: {metric: y, goal: MINIMIZE}\n"
        "constraints: [{metric: c, max: 50}]\n"
        "search_space:\n"
        "  - {name: x1, float: {min: -5, max: 10}}\n"
        "  - {name: x2, float: {min: 0, max: 15}}\n"
        "searcher: {" +
        searcher + ": {seed: 4}}\n");
    const int n = searcher == "bayesian" ? 40 : 100;
    auto trials = RunStudy(spec, n, ConstrainedBranin);
    // The second half is mostly feasible, and more so than random draws
    // (about 40% of the box is feasible).
    int feasible = 0;
    for (int i = n / 2; i < n; ++i) {
      feasible += IsFeasible(spec, trials[i].final_metrics());
    }
    EXPECT_GT(feasible, 0.6 * (n / 2)) << searcher;
  }
}

TEST(UniqueSearcherTest, AFiniteSpaceIsVisitedOnceThenExhausted) {
  for (const std::string searcher : {"random", "tpe", "bayesian", "nsga2"}) {
    const auto spec = Spec(
        "objective: {metric: y, goal: MINIMIZE}\n"
        "search_space:\n"
        "  - {name: a, categorical: {values: [x, y, z]}}\n"
        "  - {name: b, int: {min: 1, max: 2}}\n"
        "searcher: {" +
        searcher + ": {seed: 2}}\n");
    auto s = CreateSearcher(spec);
    ASSERT_TRUE(s.ok());
    std::set<std::string> seen;
    for (int n = 0; n < 6; ++n) {
      auto p = (*s)->Suggest(n);
      ASSERT_TRUE(p.ok()) << searcher << ": " << p.status();
      EXPECT_TRUE(seen.insert(ParamsKey(*p)).second) << searcher << " " << n;
      Metrics m;
      m["y"] = p->at("b").int_value();  // b = 1 is best: a model would stay
      (*s)->Observe(Finished(n, *p, m, spec));
    }
    EXPECT_EQ((*s)->Suggest(6).status().code(), absl::StatusCode::kOutOfRange)
        << searcher;
  }
}

TEST(UniqueSearcherTest, PendingAndStoppedTrialsAreNotSuggestedAgain) {
  const auto spec = Spec(
      "objective: {metric: y, goal: MINIMIZE}\n"
      "search_space: [{name: a, int: {min: 1, max: 40}}]\n"
      "searcher: {random: {seed: 9}}\n");
  auto s = CreateSearcher(spec);
  ASSERT_TRUE(s.ok());
  std::vector<Params> pending;
  std::set<std::string> seen;
  for (int n = 0; n < 40; ++n) {
    auto p = (*s)->Suggest(n, pending);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(seen.insert(ParamsKey(*p)).second) << n;
    if (n % 2) {
      pending.push_back(*p);
    } else {
      (*s)->Observe(Finished(n, *p, {}, spec, v1::STOPPED));
    }
  }
  EXPECT_EQ((*s)->Suggest(40, pending).status().code(),
            absl::StatusCode::kOutOfRange);
}

// Issue 34's fleet bench: every new trial of a random study copied the
// params of all its open trials (1,000 with 10,000 workers) for
// UniqueSearcher. Now it needs them once; after that Made() tells it of
// each trial made, queued configurations included.
TEST(UniqueSearcherTest, PendingTrialsAreNeededOnceThenMadeTellsOfEach) {
  const auto spec = Spec(
      "objective: {metric: y, goal: MINIMIZE}\n"
      "search_space: [{name: a, int: {min: 1, max: 6}}]\n"
      "searcher: {random: {seed: 3}}\n");
  auto s = CreateSearcher(spec);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->UsesPending()) << "it must learn what exists first";
  Params before;
  before["a"].set_int_value(1);  // made before a restart, still running
  auto first = (*s)->Suggest(0, {before});
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE((*s)->UsesPending());
  (*s)->Made(*first);
  Params queued;
  queued["a"].set_int_value(first->at("a").int_value() == 2 ? 3 : 2);
  (*s)->Made(queued);  // from the study's queue, never suggested
  std::set<int64_t> seen = {1, first->at("a").int_value(),
                            queued.at("a").int_value()};
  for (int n = 1; n <= 3; ++n) {
    auto p = (*s)->Suggest(n, {});
    ASSERT_TRUE(p.ok()) << n << ": " << p.status();
    EXPECT_TRUE(seen.insert(p->at("a").int_value()).second)
        << "suggested " << p->at("a").int_value() << " again";
    (*s)->Made(*p);
  }
  EXPECT_EQ((*s)->Suggest(4, {}).status().code(),
            absl::StatusCode::kOutOfRange);

  // A searcher that spreads suggestions over pending ones still gets them.
  auto gp =
      CreateSearcher(Spec("objective: {metric: y, goal: MINIMIZE}\n"
                          "search_space: [{name: a, float: {min: 0, max: 1}}]\n"
                          "searcher: {bayesian: {seed: 3}}\n"));
  ASSERT_TRUE(gp.ok());
  ASSERT_TRUE((*gp)->Suggest(0, {}).ok());
  EXPECT_TRUE((*gp)->UsesPending());
}

// Issue 20's defect: a Bayesian + ASHA study suggested dropout=0 lr=0.1
// units=215 three times in a row, each stopped at the first rung. Here
// the rung above favours a corner of the space and every new trial is
// stopped at the first rung. Before the fix the GP, fitted on the second
// rung where stopped trials never arrive, proposed the same point (to
// 1e-9) ten times. Now the GP itself moves on (a stopped trial is an
// observation at the worst value), and the searcher as a study gets it
// (behind UniqueSearcher) never repeats.
void ExpectNoRepeatsUnderAsha(Searcher& s, const v1::StudySpec& spec) {
  ASSERT_TRUE(s.WantsReports());
  auto loss = [](const Params& p, double at) {
    // Best at a corner of the space (lr and units at their maximum,
    // dropout 0), where a model's optimum lands exactly again and again.
    Metrics m;
    m["loss"] = at - 5 * p.at("lr").double_value() +
                p.at("dropout").double_value() -
                0.2 * std::log(double(p.at("units").int_value()));
    return m;
  };
  auto space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  std::vector<std::vector<double>> seen;
  auto near_seen = [&](const Params& p) {
    const std::vector<double> u = space->Encode(p);
    for (const auto& v : seen) {
      double d = 0;
      for (size_t i = 0; i < u.size(); ++i) d += (u[i] - v[i]) * (u[i] - v[i]);
      if (d < 1e-6) return true;
    }
    seen.push_back(u);
    return false;
  };
  // Six trials reach the second rung (300): the model fits there.
  for (int n = 0; n < 6; ++n) {
    Params p;
    p["lr"].set_double_value(1e-4 * std::pow(10, 0.5 * n));
    p["units"].set_int_value(32 + 60 * n);
    p["dropout"].set_double_value(0.05 * n);
    near_seen(p);
    v1::Trial t = Finished(n, p, {}, spec, v1::RUNNING);
    s.ObserveReport(t, 100, loss(p, 1.0));
    s.ObserveReport(t, 300, loss(p, 0.8));
  }
  for (int n = 6; n < 16; ++n) {
    auto p = s.Suggest(n);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(near_seen(*p))
        << "trial " << n << " repeats " << ParamsKey(*p);
    v1::Trial t = Finished(n, *p, {}, spec, v1::RUNNING);
    s.ObserveReport(t, 100, loss(*p, 3.0));  // stopped at the first rung
    s.Observe(Finished(n, *p, {}, spec, v1::STOPPED));
  }
}

TEST(UniqueSearcherTest, BayesianUnderAshaNeverRepeatsAStoppedTrial) {
  const auto spec = Spec(R"(
objective: {metric: loss, goal: MINIMIZE}
search_space:
  - {name: lr, float: {min: 1.0e-4, max: 0.1, scale: LOG}}
  - {name: units, int: {min: 32, max: 512, scale: LOG}}
  - {name: dropout, float: {min: 0, max: 0.5}}
searcher: {bayesian: {seed: 3}}
scheduler: {asha: {min_steps: 100, max_steps: 900, reduction_factor: 3}}
)");
  auto gp = BayesianSearcher::Create(spec);
  ASSERT_TRUE(gp.ok());
  ExpectNoRepeatsUnderAsha(**gp, spec);
  auto study = CreateSearcher(spec);
  ASSERT_TRUE(study.ok());
  ExpectNoRepeatsUnderAsha(**study, spec);
}

TEST(MoashaTest, DominatedTrialsStopAtARungAndTheFrontGoesOn) {
  const auto spec = Spec(R"(
objectives: [{metric: a, goal: MINIMIZE}, {metric: b, goal: MINIMIZE}]
search_space: [{name: x, float: {min: 0, max: 1}}]
scheduler: {asha: {min_steps: 1, max_steps: 9, reduction_factor: 3}}
)");
  AshaScheduler asha(spec, 1, 9, 3);
  auto report = [&](int64_t number, double a, double b) {
    v1::Trial t;
    t.set_number(number);
    Metrics m;
    m["a"] = a;
    m["b"] = b;
    return asha.OnReport(t, 1, m).action();
  };
  // A front of three trade-offs goes on; each new trial dominated by all
  // of them is outside the first ceil(n/3) and stops.
  EXPECT_EQ(report(0, 1, 3), v1::Decision::CONTINUE);
  EXPECT_EQ(report(1, 3, 1), v1::Decision::CONTINUE);
  EXPECT_EQ(report(2, 2, 2), v1::Decision::CONTINUE);
  EXPECT_EQ(report(3, 4, 4), v1::Decision::STOP);
  EXPECT_EQ(report(4, 5, 5), v1::Decision::STOP);
  // A new extreme of the front is kept (crowding: extremes first).
  EXPECT_EQ(report(5, 0.5, 6), v1::Decision::CONTINUE);
}

}  // namespace
}  // namespace dial::searchers

namespace dial::searchers {
namespace {

// A warm start from trials of a shifted copy beats a cold start at the
// same small budget, for the searchers that take a prior.
TEST(WarmStartTest, APriorFromAShiftedCopyHelpsEarly) {
  auto f = [](const Params& p, double shift) {
    double y = 0;
    for (const char* k : {"a", "b", "c"}) {
      const double v = p.at(k).double_value() - 0.3 - shift;
      y += v * v;
    }
    Metrics m;
    m["y"] = y;
    return m;
  };
  for (const std::string searcher : {"bayesian", "tpe"}) {
    double cold_total = 0, warm_total = 0;
    for (int seed = 1; seed <= 3; ++seed) {
      const auto spec = Spec(
          "objective: {metric: y, goal: MINIMIZE}\n"
          "search_space:\n"
          "  - {name: a, float: {min: -2, max: 2}}\n"
          "  - {name: b, float: {min: -2, max: 2}}\n"
          "  - {name: c, float: {min: -2, max: 2}}\n"
          "searcher: {" +
          searcher + ": {seed: " + std::to_string(seed) + "}}\n");
      // The prior: 40 random trials of the copy shifted by 0.1.
      auto source =
          CreateSearcher(Spec("objective: {metric: y, goal: MINIMIZE}\n"
                              "search_space:\n"
                              "  - {name: a, float: {min: -2, max: 2}}\n"
                              "  - {name: b, float: {min: -2, max: 2}}\n"
                              "  - {name: c, float: {min: -2, max: 2}}\n"
                              "searcher: {random: {seed: 7}}\n"));
      ASSERT_TRUE(source.ok());
      std::vector<v1::Trial> prior;
      for (int n = 0; n < 40; ++n) {
        auto p = (*source)->Suggest(n);
        ASSERT_TRUE(p.ok());
        prior.push_back(Finished(n, *p, f(*p, 0.1), spec));
      }
      std::sort(prior.begin(), prior.end(), [](const auto& a, const auto& b) {
        return a.objective_value() < b.objective_value();
      });
      auto best_of = [&](bool warm) {
        auto s = CreateSearcher(spec);
        EXPECT_TRUE(s.ok());
        if (warm) {
          for (const auto& t : prior) (*s)->ObservePrior(t);
        }
        double best = 1e300;
        for (int n = 0; n < 8; ++n) {
          auto p = (*s)->Suggest(n);
          EXPECT_TRUE(p.ok());
          const Metrics m = f(*p, 0);
          best = std::min(best, m.at("y"));
          (*s)->Observe(Finished(n, *p, m, spec));
        }
        return best;
      };
      cold_total += best_of(false);
      warm_total += best_of(true);
    }
    EXPECT_LT(warm_total, cold_total) << searcher;
  }
}

}  // namespace
}  // namespace dial::searchers

namespace dial::searchers {
namespace {

// Found measuring warm start (bench/README.md): the stacked GP read the
// earlier study's results and the study's own on two different scales,
// and with hyperparameters fitted on a study crowded near its optimum it
// expected surprises everywhere, so it spent trial after trial at the
// bounds of the space. Warm-started from trials of the very same
// function, crowded near its optimum as a finished search leaves them,
// it now stays near that optimum and improves on it.
TEST(WarmStartTest, APriorCrowdedNearItsOptimumKeepsTheStudyThere) {
  const std::string space =
      "objective: {metric: y, goal: MINIMIZE}\n"
      "search_space:\n"
      "  - {name: a, float: {min: -2, max: 2}}\n"
      "  - {name: b, float: {min: -2, max: 2}}\n"
      "  - {name: c, float: {min: -2, max: 2}}\n";
  auto f = [](const Params& p) {
    double y = 0;
    for (const char* k : {"a", "b", "c"}) {
      const double v = p.at(k).double_value() - 0.3;
      y += v * v;
    }
    Metrics m;
    m["y"] = y;
    return m;
  };
  const auto spec = Spec(space + "searcher: {bayesian: {seed: 5}}\n");
  // The prior: 20 random trials, then 60 near the optimum.
  std::vector<v1::Trial> prior;
  auto random = CreateSearcher(Spec(space + "searcher: {random: {seed: 7}}\n"));
  ASSERT_TRUE(random.ok());
  std::mt19937_64 rng(11);
  std::normal_distribution<double> near(0.3, 0.15);
  for (int n = 0; n < 80; ++n) {
    auto p = (*random)->Suggest(n);
    ASSERT_TRUE(p.ok());
    if (n >= 20) {
      for (const char* k : {"a", "b", "c"}) {
        (*p)[k].set_double_value(std::clamp(near(rng), -2.0, 2.0));
      }
    }
    prior.push_back(Finished(n, *p, f(*p), spec));
  }
  double prior_best = 1e300;
  for (const auto& t : prior) {
    prior_best = std::min(prior_best, t.objective_value());
  }
  auto s = CreateSearcher(spec);
  ASSERT_TRUE(s.ok());
  for (const auto& t : prior) (*s)->ObservePrior(t);
  int at_bounds = 0;
  double best = 1e300;
  for (int n = 0; n < 30; ++n) {
    auto p = (*s)->Suggest(n);
    ASSERT_TRUE(p.ok());
    for (const char* k : {"a", "b", "c"}) {
      if (std::abs(p->at(k).double_value()) > 1.99) {
        ++at_bounds;
        break;
      }
    }
    const Metrics m = f(*p);
    best = std::min(best, m.at("y"));
    (*s)->Observe(Finished(n, *p, m, spec));
  }
  EXPECT_LE(at_bounds, 1);
  EXPECT_LT(best, prior_best);
  EXPECT_LT(best, 3e-4);
}

}  // namespace
}  // namespace dial::searchers

namespace dial::searchers {
namespace {

// Hartmann6 studies of a seed: cold ones, and ones warm-started from
// `prior` trials of a copy shifted by 0.05.
struct Hartmann6Studies {
  explicit Hartmann6Studies(int seed)
      : fn(bench::kFunctions[1]),
        spec(Spec(std::string("objective: {metric: y, goal: MINIMIZE}\n"
                              "search_space:\n") +
                  fn.space_yaml + "searcher: {bayesian: {seed: " +
                  std::to_string(seed) + "}}\n")) {
    EXPECT_STREQ(fn.name, "hartmann6");
  }
  Metrics F(const Params& p) const {
    Metrics m;
    m["y"] = fn.f(p);
    return m;
  }
  std::vector<v1::Trial> Cold(int trials) const {
    return RunStudy(spec, trials, [&](const Params& p) { return F(p); });
  }
  std::vector<v1::Trial> Warm(int prior, int trials) const {
    const auto source = RunStudy(spec, prior, [&](Params p) {
      for (auto& [k, v] : p)
        v.set_double_value(std::max(0.0, v.double_value() - 0.05));
      return F(p);
    });
    return RunStudy(
        spec, trials, [&](const Params& p) { return F(p); }, &source);
  }
  double Regret(const v1::Trial& t) const {
    return t.objective_value() - fn.optimum;
  }
  double BestRegret(const std::vector<v1::Trial>& trials) const {
    double best = 1e300;
    for (const auto& t : trials) best = std::min(best, Regret(t));
    return best;
  }
  const bench::Function& fn;
  v1::StudySpec spec;
};

// Regrets on Hartmann6 after `cold` trials of a cold study and `warm`
// trials of one warm-started from `prior` trials of a copy shifted by 0.05.
std::pair<double, double> Hartmann6ColdAndWarm(int seed, int prior, int cold,
                                               int warm) {
  const Hartmann6Studies h(seed);
  return {h.BestRegret(h.Cold(cold)), h.BestRegret(h.Warm(prior, warm))};
}

// Found measuring warm start on Hartmann6 (bench/README.md): the prior's
// hyperparameters were fitted on 40 of its trials whatever the number of
// parameters, too few for six length scales, and four of the six came out
// at the cap (parameters judged irrelevant). The warm study found the
// basin at once and then refined it more slowly than a cold study.
// Warm-started from a finished study of a shifted copy, it must now refine
// at least as far in 30 trials as the cold study does in 60.
TEST(WarmStartTest, ASixDimensionalPriorLetsTheStudyRefineQuickly) {
  // Seeds whose earlier study ended in the global basin (in others both
  // studies can end in Hartmann6's local minimum). Before the fix the warm
  // study was behind in seed 6: 2.9e-3 against 2.1e-3.
  for (int seed : {2, 6, 7}) {
    const auto [cold, warm] = Hartmann6ColdAndWarm(seed, 80, 60, 30);
    EXPECT_LE(warm, cold) << "seed " << seed;
  }
}

// Found measuring warm start on Hartmann6 (bench/README.md): the model of
// the study's own results (residuals from the earlier study's) was fitted
// on residuals a fifth of the unit scale its noise floor is set for, so
// it could not tell results apart below about 1e-4. The warm study found
// the basin at once, then spent trial after trial within 0.002 of its
// incumbent without improving on it. It must now reach the cold study's
// 100-trial regret in half the trials, as the issue asks (here without
// the bench's queued top 5, and with the searcher's own seeds). Before
// the fix: seed 1 5.9e-5 against 1.9e-5, seed 6 8.4e-5 against 1.8e-5.
TEST(WarmStartTest, AWarmStudyRefinesBelowTheResidualsScale) {
  for (int seed : {1, 6}) {
    const auto [cold, warm] = Hartmann6ColdAndWarm(seed, 100, 100, 50);
    EXPECT_LE(warm, cold) << "seed " << seed;
  }
}

}  // namespace
}  // namespace dial::searchers

namespace dial::searchers {
namespace {

// Found measuring warm start on Hartmann6 (bench/README.md): in its second
// basin (regret 0.119206 at its minimum) two of the six parameters matter
// a hundredth as much as the others. The stacked model took them for
// irrelevant and stopped varying them, and a warm study that started
// there stalled up to 2e-3 above the basin's minimum (seed
// 5: 0.121, seed 8: 0.120 after 50 trials), where a cold study refines to
// 1e-5. With quadratic steps fitted on its own best results it now gets
// within 1e-4 of that minimum in 50 trials.
TEST(WarmStartTest, AWarmStudyRefinesAFlatBasin) {
  for (int seed : {5, 8}) {
    const Hartmann6Studies h(seed);
    const double regret = h.BestRegret(h.Warm(100, 50));
    EXPECT_NEAR(regret, 0.119206, 1e-4) << "seed " << seed;
  }
}

// Found measuring warm start on Hartmann6 (bench/README.md): once a warm
// study had found the global basin, its model was so sharp near the
// incumbent that every candidate of the acquisition's search fell outside
// the region where expected improvement is high, and it settled for the
// bounds of the space: in seed 6, 13 of the 40 trials after trial 20 had
// regrets above 1 (most at corners of the cube), none of them useful. With
// candidates closer to the incumbent it stays in the basin.
TEST(WarmStartTest, AWarmStudyInItsBasinDoesNotWanderToTheBounds) {
  const Hartmann6Studies h(6);
  const auto warm = h.Warm(100, 60);
  int far = 0;
  for (size_t i = 20; i < warm.size(); ++i) far += h.Regret(warm[i]) > 1.0;
  EXPECT_LE(far, 2);
  EXPECT_LT(h.BestRegret(warm), 1e-5);
}

}  // namespace
}  // namespace dial::searchers
