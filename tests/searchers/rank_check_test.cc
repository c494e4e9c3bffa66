// The rank check (scheduler.rank_check) around ASHA, the median rule and
// promotion, on hand-made curves.
#include "searchers/rank_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "common/spec.h"

namespace dial::searchers {
namespace {

using ::testing::HasSubstr;

v1::StudySpec Spec(const std::string& scheduler) {
  auto spec = ParseStudySpec(
      "name: t\nobjective: {metric: loss, goal: MINIMIZE}\n"
      "budget: {max_trials: 100}\n"
      "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
      "trial: {command: {argv: [train]}}\n"
      "scheduler: " +
      scheduler);
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateStudySpec(*spec).ok()) << ValidateStudySpec(*spec);
  return *spec;
}

constexpr char kAsha[] =
    "{asha: {min_steps: 10, max_steps: 100, reduction_factor: 3}, "
    "rank_check: {}}";

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

// Fast starters plateau where they start: trial t ends at 0.5 + 0.05 t.
double Fast(int t, int step) { return 0.5 + 0.05 * t + 1.0 / step; }
// Slow starters begin worse than every fast one and end better: t ends at
// 0.2 + 0.05 t, and the higher t the worse it starts.
double Slow(int t, int step) {
  return 0.2 + 0.05 * t +
         (2.0 + 0.1 * t) * (step <= 30 ? 1.0 : (100.0 - step) / 70);
}

// Runs trial `t` of `curve` from step 10 to 100 (every 10) through `s` and
// returns the step it was stopped at (0: it ran to the end and completed).
template <typename Curve>
int RunTrial(TrialScheduler& s, int t, Curve curve) {
  for (int step = 10; step <= 100; step += 10) {
    if (s.OnReport(T(t), step, M(curve(t, step))).action() ==
        v1::Decision::STOP) {
      s.OnTrialFinished(T(t, v1::STOPPED));
      return step;
    }
  }
  s.OnTrialFinished(T(t, v1::COMPLETED));
  return 0;
}

TEST(SpearmanTest, RanksWithTiesAndRefusesConstantSeries) {
  EXPECT_NEAR(*SpearmanCorrelation({1, 2, 3, 4}, {10, 20, 30, 45}), 1, 1e-12);
  EXPECT_NEAR(*SpearmanCorrelation({1, 2, 3, 4}, {4, 3, 2, 1}), -1, 1e-12);
  // Ties share their average rank: ranks (1.5, 1.5, 3) against (1, 2, 3).
  EXPECT_NEAR(*SpearmanCorrelation({5, 5, 7}, {1, 2, 3}), 0.8660254, 1e-6);
  EXPECT_FALSE(SpearmanCorrelation({1, 1, 1}, {1, 2, 3}).has_value());
  EXPECT_FALSE(SpearmanCorrelation({1}, {1}).has_value());
}

TEST(RankCheckTest, KeepsALateBloomerThatPlainAshaStops) {
  auto spec = Spec(kAsha);
  RankCheckedScheduler checked(
      spec, std::make_unique<AshaScheduler>(spec, 10, 100, 3.0));
  AshaScheduler plain(spec, 10, 100, 3.0);
  // Three fast starters fill the first rung, then slow ones come: plain
  // ASHA stops each slow one at step 10, as its rung value is the worst.
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(RunTrial(checked, t, Fast), 0);
    RunTrial(plain, t, Fast);  // plain ASHA stops the two worse ones
  }
  EXPECT_EQ(RunTrial(plain, 3, Slow), 10);
  // With the check, nothing stops before 8 completed trials (the
  // default min_trials), and these (3 fast, 5 slow) rank at step 10
  // against their end with a correlation below 0.7, so slow starters keep
  // going after that too.
  for (int t = 3; t < 11; ++t) EXPECT_EQ(RunTrial(checked, t, Slow), 0) << t;
  std::optional<double> rho;
  EXPECT_FALSE(checked.Holds(10, &rho));
  ASSERT_TRUE(rho.has_value());
  EXPECT_LT(*rho, 0.7);
}

TEST(RankCheckTest, StopsAClearlyBadCurveOnceRankingsAreShownToHold) {
  auto spec = Spec(kAsha);
  RankCheckedScheduler s(spec,
                         std::make_unique<AshaScheduler>(spec, 10, 100, 3.0));
  // Fast starters only: rankings at every rung are their final ones.
  for (int t = 0; t < 7; ++t) EXPECT_EQ(RunTrial(s, t, Fast), 0);
  // Seven completed trials are too few (min_trials 8 by default): a bad
  // one goes on.
  auto bad = [](int, int step) { return 3.0 + 1.0 / step; };
  EXPECT_EQ(RunTrial(s, 7, bad), 0);
  std::optional<double> rho;
  EXPECT_TRUE(s.Holds(10, &rho));
  EXPECT_NEAR(*rho, 1.0, 1e-12);
  // Now eight agree: the next bad curve stops at the first rung.
  EXPECT_EQ(RunTrial(s, 8, bad), 10);
}

TEST(RankCheckTest, GuardsTheMedianRuleAtEveryStep) {
  auto spec = Spec("{median: {grace_steps: 10}, rank_check: {min_trials: 3}}");
  auto made = CreateTrialScheduler(spec);
  ASSERT_TRUE(made.ok()) << made.status();
  TrialScheduler& s = **made;
  // Two fast and one slow starter complete: at step 10 the slow one is the
  // worst, at its end the best: -0.5 at best. Slow starters are kept.
  EXPECT_EQ(RunTrial(s, 0, Fast), 0);
  EXPECT_EQ(RunTrial(s, 1, Fast), 0);
  EXPECT_EQ(RunTrial(s, 2, Slow), 0);
  EXPECT_EQ(RunTrial(s, 3, Slow), 0);
  // The unchecked median rule stops the same slow starter at step 10.
  MedianStoppingScheduler plain(spec);
  for (int t = 0; t < 3; ++t) RunTrial(plain, t, t < 2 ? Fast : Slow);
  EXPECT_EQ(RunTrial(plain, 3, Slow), 10);
}

TEST(RankCheckTest, AnOverruledPauseIsSkippedThenALaterOneIsPromoted) {
  auto spec = Spec(
      "{asha: {min_steps: 10, max_steps: 100, reduction_factor: 3, "
      "promotion: true}, rank_check: {}}");
  auto made = CreateTrialScheduler(spec);
  ASSERT_TRUE(made.ok()) << made.status();
  TrialScheduler& s = **made;
  // Unchecked, trial 0 (the best curve) would pause at rung 10; with no
  // completed trial the pause is overruled. While it runs on, the rung
  // offers it for promotion and the offer is skipped.
  auto best = [](int, int step) { return Fast(-4, step); };
  EXPECT_EQ(s.OnReport(T(0), 10, M(best(0, 10))).action(),
            v1::Decision::CONTINUE);
  EXPECT_FALSE(s.NextPromotion().has_value());
  EXPECT_EQ(s.OnReport(T(0), 20, M(best(0, 20))).action(),
            v1::Decision::CONTINUE);
  // Eight trials complete (their pauses overruled too), ranked at every
  // rung as at their end: the check now holds.
  for (int t = 1; t <= 8; ++t) {
    for (int step = 10; step <= 100; step += 10) {
      ASSERT_EQ(s.OnReport(T(t), step, M(Fast(t, step))).action(),
                v1::Decision::CONTINUE)
          << t << " " << step;
    }
    s.OnTrialFinished(T(t, v1::COMPLETED));
  }
  // Trial 0's pause at rung 30 stands, and the rung promotes it.
  EXPECT_EQ(s.OnReport(T(0), 30, M(best(0, 30))).action(), v1::Decision::PAUSE);
  auto next = s.NextPromotion();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, 0);
}

// Reports of 14 trials, two running at a time, interleaved, on curves
// whose ranks at step 10 agree with their final ones by about 0.7 (so the
// check flips as trials complete) and at step 30 fully. Returns each
// report's decision. `replay_until`: reports before it are replayed (trial
// by trial, only those at ReplaySteps and each trial's last) into a fresh
// scheduler, as a restarted one is fed, and their decisions are taken from
// `before`.
using Event = std::tuple<int, int, v1::Decision::Action>;
double Mixed(int t, int step) {
  return 0.2 + 0.05 * ((t * 7) % 10) + (0.5 + (t * 3) % 5) / step;
}

void Restart(std::unique_ptr<TrialScheduler>& s, const v1::StudySpec& spec,
             const std::vector<Event>& before, size_t replay_until,
             const std::vector<std::pair<int, bool>>& finished) {
  s = *CreateTrialScheduler(spec);
  const std::vector<int64_t> steps = s->ReplaySteps();
  std::map<int, std::vector<int>> by_trial;
  for (size_t k = 0; k < replay_until; ++k) {
    by_trial[std::get<0>(before[k])].push_back(std::get<1>(before[k]));
  }
  for (const auto& [t, reports] : by_trial) {
    size_t next = 0;
    for (size_t k = 0; k < reports.size(); ++k) {
      bool wanted = k + 1 == reports.size() || steps.empty();
      for (; next < steps.size() && steps[next] <= reports[k]; ++next) {
        wanted = true;
      }
      if (wanted) s->Replay(T(t), reports[k], M(Mixed(t, reports[k])));
    }
  }
  for (const auto& [t, completed] : finished) {
    s->OnTrialFinished(T(t, completed ? v1::COMPLETED : v1::STOPPED));
  }
}

std::vector<Event> Drive(std::unique_ptr<TrialScheduler>& s,
                         const v1::StudySpec& spec,
                         const std::vector<Event>& before = {},
                         size_t replay_until = 0) {
  std::vector<Event> out;
  std::vector<std::pair<int, bool>> finished;  // (trial, completed)
  for (int pair = 0; pair < 7; ++pair) {
    bool stopped[2] = {false, false};
    for (int step = 10; step <= 100; step += 10) {
      for (int i = 0; i < 2; ++i) {
        if (stopped[i]) continue;
        const int t = 2 * pair + i;
        const bool live = out.size() >= replay_until;
        if (live && out.size() == replay_until && replay_until > 0) {
          Restart(s, spec, before, replay_until, finished);
        }
        const v1::Decision::Action action =
            live ? s->OnReport(T(t), step, M(Mixed(t, step))).action()
                 : std::get<2>(before[out.size()]);
        out.push_back({t, step, action});
        stopped[i] = action == v1::Decision::STOP;
        if (!stopped[i] && step < 100) continue;
        finished.push_back({t, !stopped[i]});
        if (live)
          s->OnTrialFinished(T(t, stopped[i] ? v1::STOPPED : v1::COMPLETED));
      }
    }
  }
  return out;
}

TEST(RankCheckTest, ARestartMidStudyGivesTheSameDecisions) {
  // ASHA replays only its rungs' reports; the median rule replays all.
  for (const std::string& scheduler :
       {std::string(kAsha),
        std::string("{median: {grace_steps: 10}, rank_check: {}}")}) {
    SCOPED_TRACE(scheduler);
    auto spec = Spec(scheduler);
    std::unique_ptr<TrialScheduler> s = *CreateTrialScheduler(spec);
    const std::vector<Event> whole = Drive(s, spec);
    int stops = 0;
    for (const auto& e : whole) stops += std::get<2>(e) == v1::Decision::STOP;
    ASSERT_GT(stops, 0) << "the study must stop something to compare";
    // And the check must have overruled something: the scheduler alone
    // decides otherwise.
    v1::StudySpec plain_spec = spec;
    plain_spec.mutable_scheduler()->clear_rank_check();
    std::unique_ptr<TrialScheduler> plain = *CreateTrialScheduler(plain_spec);
    ASSERT_NE(Drive(plain, plain_spec), whole);
    for (size_t cut : {whole.size() / 3, whole.size() / 2, whole.size() - 7}) {
      std::unique_ptr<TrialScheduler> again = *CreateTrialScheduler(spec);
      EXPECT_EQ(Drive(again, spec, whole, cut), whole) << "restart at " << cut;
    }
  }
}

TEST(RankCheckTest, SpecFieldsAreValidatedByName) {
  auto error = [](const std::string& scheduler, int objectives = 1) {
    auto spec = ParseStudySpec(
        std::string("name: t\n") +
        (objectives == 1 ? "objective: {metric: loss, goal: MINIMIZE}\n"
                         : "objectives: [{metric: a, goal: MINIMIZE}, "
                           "{metric: b, goal: MINIMIZE}]\n") +
        "budget: {max_trials: 10}\n"
        "search_space: [{name: x, float: {min: 0, max: 1}}]\n"
        "trial: {command: {argv: [train]}}\nscheduler: " +
        scheduler);
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::Status valid = ValidateStudySpec(*spec);
    EXPECT_FALSE(valid.ok()) << scheduler;
    return std::string(valid.message());
  };
  const std::string asha =
      "{asha: {min_steps: 1, max_steps: 9, reduction_factor: 3}, ";
  EXPECT_THAT(error(asha + "rank_check: {min_trials: 1}}"),
              HasSubstr("scheduler.rank_check.min_trials: must be in [2, "
                        "200]: one trial ranks nothing"));
  // More than the 200 completed trials the check keeps would never hold.
  EXPECT_THAT(error(asha + "rank_check: {min_trials: 201}}"),
              HasSubstr("scheduler.rank_check.min_trials: must be in [2, "
                        "200] (0: the default, 8)"));
  EXPECT_THAT(error(asha + "rank_check: {min_correlation: 1.5}}"),
              HasSubstr("scheduler.rank_check.min_correlation: must be in "
                        "(0, 1]"));
  EXPECT_THAT(error(asha + "rank_check: {min_correlation: -0.2}}"),
              HasSubstr("scheduler.rank_check.min_correlation"));
  EXPECT_THAT(error("{fifo: {}, rank_check: {}}"),
              HasSubstr("scheduler.rank_check: guards a stopping scheduler; "
                        "fifo stops no trial"));
  EXPECT_THAT(error("{rank_check: {}}"),
              HasSubstr("scheduler.rank_check: guards a stopping scheduler"));
  EXPECT_THAT(error("{pbt: {perturbation_interval: 5, quantile: 0.25}, "
                    "rank_check: {}}"),
              HasSubstr("scheduler.rank_check: guards a stopping scheduler; "
                        "pbt stops no trial"));
  EXPECT_THAT(error("{hyperband: {min_steps: 1, max_steps: 9, "
                    "reduction_factor: 3, synchronous: true}, rank_check: {}}"),
              HasSubstr("scheduler.rank_check: cannot overrule synchronous"));
  EXPECT_THAT(error(asha + "rank_check: {}}", 2),
              HasSubstr("scheduler.rank_check: ranks by one objective"));
}

}  // namespace
}  // namespace dial::searchers
