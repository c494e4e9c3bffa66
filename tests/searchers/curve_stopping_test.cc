// Learning-curve stopping on hand-made curves.
#include "searchers/curve_stopping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "common/spec.h"

namespace dial::searchers {
namespace {

using ::testing::HasSubstr;

v1::StudySpec Spec(const std::string& curve) {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 100}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "trial: {command: {argv: [train]}}\n"
      "scheduler: {curve: " +
      curve + "}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

v1::Trial T(int64_t number, v1::TrialState state = v1::RUNNING) {
  v1::Trial t;
  t.set_number(number);
  t.set_state(state);
  return t;
}

Metrics M(double loss) {
  Metrics m;
  m["loss"] = loss;
  return m;
}

// Fast starters: quick early gains, then flat at 0.3 and above.
double Fast(int trial, int step) {
  return 0.3 + 0.02 * trial + 0.5 * std::exp(-step / 20.0);
}

// Trials 0..n-1 of Fast, finished at step 100 (reports every 10). The
// first three cannot be stopped (too few finished curves); the others, as
// uniformly worse copies of them, would be, so they are replayed.
void Finish(CurveStoppingScheduler& s, int n) {
  for (int t = 0; t < n; ++t) {
    for (int step = 10; step <= 100; step += 10) {
      if (t >= 3) {
        s.Replay(T(t), step, M(Fast(t, step)));
        continue;
      }
      ASSERT_EQ(s.OnReport(T(t), step, M(Fast(t, step))).action(),
                v1::Decision::CONTINUE)
          << t << " " << step;
    }
    s.OnTrialFinished(T(t, v1::COMPLETED));
  }
}

TEST(ExtrapolateCurveTest, FindsTheEndOfAPowerLawAndKeepsShortCurves) {
  // score = a + b ((x / M)^-1 - 1): the value at M is a.
  std::vector<std::pair<int64_t, double>> points;
  for (int x = 10; x <= 40; x += 10) {
    points.push_back({x, -0.2 - 0.05 * (100.0 / x - 1)});
  }
  EXPECT_NEAR(ExtrapolateCurve(points, 100), -0.2, 1e-9);
  // Two points are too few to fit: the last one.
  points.resize(2);
  EXPECT_EQ(ExtrapolateCurve(points, 100), points[1].second);
  // A flat curve stays where it is.
  EXPECT_NEAR(ExtrapolateCurve({{10, 1.0}, {20, 1.0}, {30, 1.0}}, 100), 1.0,
              1e-9);
}

TEST(CurveStoppingTest, StopsAClearlyBadCurveEarly) {
  CurveStoppingScheduler s(Spec("{max_steps: 100, grace_steps: 10}"));
  Finish(s, 3);
  // Flat at 2.0, far above every finished curve: stopped at its third
  // report, the first with a curve to extrapolate.
  EXPECT_EQ(s.OnReport(T(3), 10, M(2.0)).action(), v1::Decision::CONTINUE);
  EXPECT_EQ(s.OnReport(T(3), 20, M(2.0)).action(), v1::Decision::CONTINUE);
  auto d = s.OnReport(T(3), 30, M(2.0));
  EXPECT_EQ(d.action(), v1::Decision::STOP);
  EXPECT_THAT(d.reason(), HasSubstr("loss extrapolated to step 100: 2"));
  EXPECT_THAT(d.reason(), HasSubstr("3 finished curves"));
}

TEST(CurveStoppingTest, KeepsALateBloomerThatCrossesTheOthers) {
  CurveStoppingScheduler s(Spec("{max_steps: 100, grace_steps: 10}"));
  Finish(s, 5);
  // Worse than every finished curve until step 20 (1.0 against 0.6, 0.5
  // against 0.48), still falling steeply: it ends at 0.1, the best.
  for (int step = 10; step <= 100; step += 10) {
    const double loss = 0.1 + 0.1 * (100.0 / step - 1);
    if (step == 10) {
      EXPECT_GT(loss, Fast(4, step));
    }
    EXPECT_EQ(s.OnReport(T(5), step, M(loss)).action(), v1::Decision::CONTINUE)
        << "stopped at step " << step;
  }
  // A curve of the same shape that ends worse than the best is stopped.
  bool stopped = false;
  for (int step = 10; step <= 100 && !stopped; step += 10) {
    stopped =
        s.OnReport(T(6), step, M(0.6 + 0.1 * (100.0 / step - 1))).action() ==
        v1::Decision::STOP;
  }
  EXPECT_TRUE(stopped);
}

TEST(CurveStoppingTest, WaitsForMinCurvesAndTheGracePeriod) {
  CurveStoppingScheduler s(
      Spec("{max_steps: 100, grace_steps: 50, min_curves: 4}"));
  Finish(s, 3);
  // Three finished curves are too few.
  for (int step = 10; step <= 60; step += 10) {
    EXPECT_EQ(s.OnReport(T(3), step, M(2.0)).action(), v1::Decision::CONTINUE);
  }
  // A fourth (completed short of max_steps) makes four; then only past
  // step 50.
  for (int step = 10; step <= 70; step += 10) {
    s.OnReport(T(4), step, M(Fast(0, step)));
  }
  s.OnTrialFinished(T(4, v1::COMPLETED));
  EXPECT_EQ(s.OnReport(T(5), 10, M(2.0)).action(), v1::Decision::CONTINUE);
  EXPECT_EQ(s.OnReport(T(5), 20, M(2.0)).action(), v1::Decision::CONTINUE);
  EXPECT_EQ(s.OnReport(T(5), 40, M(2.0)).action(), v1::Decision::CONTINUE);
  EXPECT_EQ(s.OnReport(T(5), 50, M(2.0)).action(), v1::Decision::STOP);
}

TEST(CurveStoppingTest, SpecFieldsAreValidatedByName) {
  auto error = [](const std::string& curve) {
    auto spec = ParseStudySpec(
        "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
        "budget: {max_trials: 10}\n"
        "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
        "trial: {command: {argv: [train]}}\nscheduler: {curve: " +
        curve + "}");
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::Status valid = ValidateStudySpec(*spec);
    EXPECT_FALSE(valid.ok()) << curve;
    return std::string(valid.message());
  };
  EXPECT_THAT(error("{}"),
              HasSubstr("scheduler.curve.max_steps: must be >= 2"));
  EXPECT_THAT(error("{max_steps: 100, grace_steps: 100}"),
              HasSubstr("scheduler.curve.grace_steps: must be in [0, "
                        "max_steps) = [0, 100)"));
  EXPECT_THAT(error("{max_steps: 100, grace_steps: -1}"),
              HasSubstr("scheduler.curve.grace_steps"));
  EXPECT_THAT(error("{max_steps: 100, optimism: 0.7}"),
              HasSubstr("scheduler.curve.optimism: must be in (0, 0.5]"));
  EXPECT_THAT(error("{max_steps: 100, min_curves: 5000}"),
              HasSubstr("scheduler.curve.min_curves: must be in [1, 1000]"));
  auto two = ParseStudySpec(
      "name: t\nobjectives: [{metric: a, goal: MINIMIZE}, "
      "{metric: b, goal: MINIMIZE}]\nbudget: {max_trials: 10}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "trial: {command: {argv: [train]}}\n"
      "scheduler: {curve: {max_steps: 100}}");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(ValidateStudySpec(*two).message(),
              HasSubstr("scheduler.curve: extrapolates one objective"));
}

// Reports of 12 trials, 4 at a time, round robin, each trial a noisy
// curve of its own shape; a stopped trial reports no more. Returns the
// reports with the decision each got.
using Event = std::tuple<int64_t, int64_t, double, v1::Decision::Action>;
std::vector<Event> Drive(CurveStoppingScheduler& s,
                         const std::vector<Event>& replayed, size_t from) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> floor(12), speed(12);
  for (int t = 0; t < 12; ++t) {
    floor[t] = 0.1 + 0.5 * u(rng);
    speed[t] = 2 + 30 * u(rng);
  }
  std::vector<Event> out;
  std::vector<int> step(12, 0);
  std::vector<bool> done(12, false);
  size_t n = 0;
  for (int round = 0; round < 200; ++round) {
    for (int t = (round / 10) * 4 % 12, k = 0; k < 4; ++k, ++t) {
      const int trial = t % 12;
      if (done[trial]) continue;
      step[trial] += 10;
      const double loss = floor[trial] + speed[trial] / (step[trial] + 5) +
                          0.01 * std::sin(step[trial] * (trial + 1));
      v1::Decision::Action a;
      if (n < from) {
        a = std::get<3>(replayed[n]);  // replayed below, in trial order
      } else {
        a = s.OnReport(T(trial), step[trial], M(loss)).action();
      }
      ++n;
      out.push_back({trial, step[trial], loss, a});
      if (a == v1::Decision::STOP || step[trial] >= 100) done[trial] = true;
    }
  }
  return out;
}

TEST(CurveStoppingTest, ARestartMidStudyGivesTheSameDecisions) {
  const std::string spec = "{max_steps: 100, grace_steps: 20}";
  CurveStoppingScheduler whole(Spec(spec));
  const std::vector<Event> all = Drive(whole, {}, 0);
  int stops = 0;
  for (const auto& e : all) stops += std::get<3>(e) == v1::Decision::STOP;
  ASSERT_GE(stops, 2) << "the sequence must exercise stopping";
  for (size_t cut : {all.size() / 3, all.size() / 2, 2 * all.size() / 3}) {
    CurveStoppingScheduler restarted(Spec(spec));
    // The store gives the reports before the cut trial by trial, steps in
    // order, then the trials that had ended.
    std::vector<Event> before(all.begin(), all.begin() + cut);
    std::stable_sort(before.begin(), before.end(),
                     [](const Event& a, const Event& b) {
                       return std::get<0>(a) < std::get<0>(b);
                     });
    for (const auto& [trial, step, loss, action] : before) {
      restarted.Replay(T(trial), step, M(loss));
    }
    for (const auto& [trial, step, loss, action] : before) {
      if (action == v1::Decision::STOP) {
        restarted.OnTrialFinished(T(trial, v1::STOPPED));
      } else if (step >= 100) {
        restarted.OnTrialFinished(T(trial, v1::COMPLETED));
      }
    }
    const std::vector<Event> after = Drive(restarted, all, cut);
    EXPECT_EQ(after, all) << "restart after report " << cut;
  }
}

}  // namespace
}  // namespace dial::searchers
