// Early-stopping schedulers on hand-made report sequences.
#include "searchers/early_stopping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "common/spec.h"

namespace dial::searchers {
namespace {

using ::testing::HasSubstr;

v1::StudySpec Spec(const std::string& scheduler,
                   const char* goal = "MAXIMIZE") {
  auto spec = ParseStudySpec(
      std::string("name: t\nobjective: {metric: acc, goal: ") + goal +
      "}\nbudget: {max_trials: 100}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "trial: {command: {argv: [train]}}\n"
      "scheduler: " +
      scheduler);
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateStudySpec(*spec).ok());
  return *spec;
}

v1::Trial T(int64_t number) {
  v1::Trial t;
  t.set_number(number);
  return t;
}

Metrics M(double acc) {
  Metrics m;
  m["acc"] = acc;
  return m;
}

v1::Decision::Action Act(TrialScheduler& s, int64_t trial, int64_t step,
                         double acc) {
  return s.OnReport(T(trial), step, M(acc)).action();
}

TEST(MedianStoppingTest, GracePeriodAndMinimumSamples) {
  MedianStoppingScheduler s(
      Spec("{median: {grace_steps: 20, min_samples: 3}}"));
  // Three good trials reach step 30.
  for (int t = 0; t < 3; ++t) {
    for (int step = 10; step <= 30; step += 10) {
      EXPECT_EQ(Act(s, t, step, 0.8 + 0.01 * t), v1::Decision::CONTINUE);
    }
  }
  // A bad trial: spared in its grace period, stopped after it.
  EXPECT_EQ(Act(s, 3, 10, 0.1), v1::Decision::CONTINUE);
  auto d = s.OnReport(T(3), 20, M(0.2));
  EXPECT_EQ(d.action(), v1::Decision::STOP);
  EXPECT_THAT(d.reason(), HasSubstr("median"));
  // A good one at the same step goes on.
  EXPECT_EQ(Act(s, 4, 20, 0.9), v1::Decision::CONTINUE);
  // Past the step the others reached, too few samples: go on.
  EXPECT_EQ(Act(s, 5, 40, 0.0), v1::Decision::CONTINUE);
}

TEST(MedianStoppingTest, UsesTheBestSoFarAndRunningAverages) {
  MedianStoppingScheduler s(Spec("{median: {grace_steps: 0, min_samples: 2}}"));
  // Others: running averages at step 2 are 0.5 and 0.6.
  Act(s, 0, 1, 0.4);
  Act(s, 0, 2, 0.6);
  Act(s, 1, 1, 0.5);
  Act(s, 1, 2, 0.7);
  // Median of averages is 0.55: a trial whose best is 0.6 survives even
  // though its latest value is 0.3.
  Act(s, 2, 1, 0.6);
  EXPECT_EQ(Act(s, 2, 2, 0.3), v1::Decision::CONTINUE);
  // Now the averages at step 2 are 0.5, 0.6 and 0.45 (trial 2): median 0.5.
  Act(s, 3, 1, 0.45);
  EXPECT_EQ(Act(s, 3, 2, 0.46), v1::Decision::STOP);
}

TEST(MedianStoppingTest, MinimisationIsOriented) {
  MedianStoppingScheduler s(Spec("{median: {min_samples: 2}}", "MINIMIZE"));
  Act(s, 0, 1, 1.0);
  Act(s, 1, 1, 1.2);
  EXPECT_EQ(Act(s, 2, 1, 5.0), v1::Decision::STOP);  // higher loss: worse
  EXPECT_EQ(Act(s, 3, 1, 0.5), v1::Decision::CONTINUE);
}

TEST(AshaTest, RungsAndCutOffs) {
  AshaScheduler s(
      Spec("{asha: {min_steps: 1, max_steps: 27, reduction_factor: 3}}"), 1, 27,
      3);
  EXPECT_EQ(s.rungs(), (std::vector<int64_t>{1, 3, 9}));
  // The first trial at a rung always goes on.
  EXPECT_EQ(Act(s, 0, 1, 0.5), v1::Decision::CONTINUE);
  // Below the 2/3 quantile of {0.5, 0.2}: stopped.
  EXPECT_EQ(Act(s, 1, 1, 0.2), v1::Decision::STOP);
  EXPECT_EQ(Act(s, 2, 1, 0.9), v1::Decision::CONTINUE);
  // A trial records once per rung: later reports between rungs pass.
  EXPECT_EQ(Act(s, 0, 2, 0.1), v1::Decision::CONTINUE);
  // Trial 0 reaches rung 3 first, then trial 2 does, better.
  EXPECT_EQ(Act(s, 0, 3, 0.6), v1::Decision::CONTINUE);
  EXPECT_EQ(Act(s, 2, 3, 0.95), v1::Decision::CONTINUE);
  // A third at rung 3 below the cut-off of {0.6, 0.95, x}.
  EXPECT_EQ(Act(s, 3, 1, 0.95), v1::Decision::CONTINUE);
  EXPECT_EQ(Act(s, 3, 3, 0.61), v1::Decision::STOP);
}

TEST(AshaTest, OneReportCanCrossSeveralRungs) {
  AshaScheduler s(
      Spec("{asha: {min_steps: 1, max_steps: 27, reduction_factor: 3}}"), 1, 27,
      3);
  Act(s, 0, 1, 0.9);
  Act(s, 0, 3, 0.9);
  // Trial 1 reports first at step 5: it is recorded at rungs 1 and 3, and
  // stopped at rung 1 already.
  auto d = s.OnReport(T(1), 5, M(0.1));
  EXPECT_EQ(d.action(), v1::Decision::STOP);
  EXPECT_THAT(d.reason(), HasSubstr("rung 1"));
}

TEST(AshaTest, SameReportsSameDecisions) {
  auto spec =
      Spec("{asha: {min_steps: 2, max_steps: 50, reduction_factor: 2}}");
  AshaScheduler a(spec, 2, 50, 2), b(spec, 2, 50, 2);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 300; ++i) {
    const int64_t trial = i % 17, step = 1 + i / 17 * 3;
    const double acc = u(rng);
    EXPECT_EQ(Act(a, trial, step, acc), Act(b, trial, step, acc));
  }
}

TEST(AshaPromotionTest, PausesAtRungsAndPromotesTheTopThird) {
  auto spec = Spec(
      "{asha: {min_steps: 1, max_steps: 27, reduction_factor: 3, "
      "promotion: true}}");
  AshaScheduler s(spec, 1, 27, 3, /*promotion=*/true);
  EXPECT_FALSE(s.HasPromotion());
  EXPECT_EQ(Act(s, 0, 1, 0.5), v1::Decision::PAUSE);
  EXPECT_EQ(Act(s, 1, 1, 0.9), v1::Decision::PAUSE);
  EXPECT_EQ(Act(s, 2, 1, 0.1), v1::Decision::PAUSE);
  // Three at rung 1: the top third (one) is trial 1.
  ASSERT_TRUE(s.HasPromotion());
  EXPECT_EQ(s.NextPromotion(), std::optional<int64_t>(1));
  EXPECT_FALSE(s.NextPromotion().has_value());
  // Trial 1 resumes, goes on between rungs, pauses at rung 3.
  EXPECT_EQ(Act(s, 1, 2, 0.9), v1::Decision::CONTINUE);
  EXPECT_EQ(Act(s, 1, 3, 0.92), v1::Decision::PAUSE);
  EXPECT_FALSE(s.NextPromotion().has_value());  // 1 at rung 3: top third is 0
  // Three more at rung 1: the top two are 3 (new) and 1 (already promoted).
  Act(s, 3, 1, 0.95);
  Act(s, 4, 1, 0.3);
  Act(s, 5, 1, 0.2);
  EXPECT_EQ(s.NextPromotion(), std::optional<int64_t>(3));
  EXPECT_FALSE(s.NextPromotion().has_value());
}

TEST(AshaPromotionTest, ReplayedReportsRestorePromotions) {
  auto spec = Spec(
      "{asha: {min_steps: 1, max_steps: 27, reduction_factor: 3, "
      "promotion: true}}");
  AshaScheduler s(spec, 1, 27, 3, true);
  // As a restarted scheduler replays: trial 1 was already past rung 1.
  Act(s, 0, 1, 0.5);
  Act(s, 1, 1, 0.9);
  Act(s, 2, 1, 0.1);
  Act(s, 1, 2, 0.9);
  EXPECT_FALSE(s.NextPromotion().has_value());
}

TEST(AsyncHyperbandTest, BracketsDelayTheFirstCut) {
  auto spec =
      Spec("{hyperband: {min_steps: 1, max_steps: 27, reduction_factor: 3}}");
  AsyncHyperbandScheduler s(spec);
  EXPECT_EQ(s.brackets(), 3);  // first rungs at 1, 3, 9
  // Bracket 0 (trials 0, 3, ...) cuts at step 1; bracket 2 (trials 2, 5)
  // not before step 9.
  Act(s, 0, 1, 0.9);
  EXPECT_EQ(Act(s, 3, 1, 0.1), v1::Decision::STOP);
  Act(s, 2, 1, 0.9);
  EXPECT_EQ(Act(s, 5, 1, 0.1), v1::Decision::CONTINUE);
  EXPECT_EQ(Act(s, 5, 3, 0.1), v1::Decision::CONTINUE);
  Act(s, 2, 9, 0.9);
  EXPECT_EQ(Act(s, 5, 9, 0.1), v1::Decision::STOP);
}

TEST(SyncHyperbandTest, RoundsWaitForTheWholeBracket) {
  // 6 trials, first rungs 1 and 3: bracket 0 = {0, 2, 4} with rungs 1, 3;
  // bracket 1 = {1, 3, 5} with rung 3.
  auto spec = Spec(
      "{hyperband: {min_steps: 1, max_steps: 9, reduction_factor: 3, "
      "synchronous: true}}");
  spec.mutable_budget()->set_max_trials(6);
  SyncHyperbandScheduler s(spec);
  ASSERT_EQ(s.brackets(), 2);
  EXPECT_EQ(Act(s, 0, 1, 0.5), v1::Decision::PAUSE);
  EXPECT_EQ(Act(s, 2, 1, 0.9), v1::Decision::PAUSE);
  EXPECT_FALSE(s.HasPromotion());  // trial 4 has not reached rung 1
  EXPECT_EQ(Act(s, 4, 1, 0.1), v1::Decision::PAUSE);
  EXPECT_EQ(s.NextPromotion(), std::optional<int64_t>(2));  // top third
  EXPECT_FALSE(s.NextPromotion().has_value());
  // Trial 2 goes on to rung 3, pauses, and as the round's only entrant is
  // promoted to the end.
  EXPECT_EQ(Act(s, 2, 2, 0.9), v1::Decision::CONTINUE);
  EXPECT_EQ(Act(s, 2, 3, 0.93), v1::Decision::PAUSE);
  EXPECT_EQ(s.NextPromotion(), std::optional<int64_t>(2));
  EXPECT_EQ(Act(s, 2, 6, 0.95), v1::Decision::CONTINUE);
  // Bracket 1's first cut is at rung 3, once 1, 3 and 5 are all there (5
  // ended early, failed).
  EXPECT_EQ(Act(s, 1, 1, 0.2), v1::Decision::CONTINUE);
  EXPECT_EQ(Act(s, 1, 3, 0.6), v1::Decision::PAUSE);
  EXPECT_EQ(Act(s, 3, 3, 0.7), v1::Decision::PAUSE);
  EXPECT_FALSE(s.HasPromotion());
  v1::Trial failed;
  failed.set_number(5);
  s.OnTrialFinished(failed);
  EXPECT_EQ(s.NextPromotion(), std::optional<int64_t>(3));
  EXPECT_FALSE(s.NextPromotion().has_value());
}

TEST(FactoryTest, EveryVariantIsBuilt) {
  EXPECT_TRUE(
      CreateTrialScheduler(
          Spec("{asha: {min_steps: 1, max_steps: 9, reduction_factor: 3}}"))
          .ok());
  EXPECT_TRUE(
      CreateTrialScheduler(Spec("{asha: {min_steps: 1, max_steps: 9, "
                                "reduction_factor: 3, promotion: true}}"))
          .ok());
  EXPECT_TRUE(
      CreateTrialScheduler(Spec("{hyperband: {min_steps: 1, max_steps: 9, "
                                "reduction_factor: 3, synchronous: true}}"))
          .ok());
}

}  // namespace
}  // namespace dial::searchers
