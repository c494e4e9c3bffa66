// Recorded curves replayed through the real scheduler, a real worker and
// the trial protocol (dial-replay as the trial command): the smoke replay
// CI runs, and the determinism the curve benchmarks rely on.

#include <cmath>
#include <fstream>

#include "common/spec.h"
#include "replay/curve_table.h"
#include "tests/e2e/worker_fixture.h"

namespace dial {
namespace {

using ::testing::HasSubstr;

// What a replayed study decided, trial by trial.
struct Outcome {
  std::vector<std::string> lines;  // "number state last_step config_id"
  bool operator==(const Outcome&) const = default;
};

class ReplayE2eTest : public WorkerE2eTest {
 protected:
  void SetUp() override {
    WorkerE2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // 16 configurations, 9 points each. Fast starters (high lr) level off
    // high; slow ones (low lr) start behind and cross them late.
    std::ofstream out(Table());
    out << "config_id,lr,step,val_loss,elapsed_s\n";
    for (int c = 0; c < 16; ++c) {
      const double lr = std::pow(10.0, -3 + 2.0 * c / 15);
      const double speed = 0.05 + lr * 20, floor_loss = 0.1 + lr * 3;
      for (int s = 1; s <= 9; ++s) {
        const double loss = floor_loss + std::exp(-speed * s);
        out << c << "," << lr << "," << s * 10 << "," << loss << ","
            << 0.5 * s * (1 + c % 3) << "\n";
      }
    }
    out.close();
    StartWorker("w", 1, {"--allow-command=" DIAL_REPLAY_BIN});
  }

  Outcome Run(const std::string& name, const std::string& scheduler,
              const std::string& extra_args = "", int parallel = 1) {
    const std::string text =
        absl::StrCat("name: ", name, R"(
objective: {metric: val_loss, goal: MINIMIZE}
search_space: [{name: lr, float: {min: 0.001, max: 0.1, scale: LOG}}]
searcher: {random: {seed: 5}}
scheduler: )",
                     scheduler, R"(
budget: {max_trials: 14, max_parallel_trials: 1}
trial: {command: {argv: [")",
                     DIAL_REPLAY_BIN, "\", \"--table=", Table().string(), "\"",
                     extra_args, "]}}");
    auto spec = ParseStudySpec(text);
    EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << text;
    if (!spec.ok()) return {};
    EXPECT_TRUE(client_->CreateStudy(*spec).ok());
    WaitForEnd(name);
    auto trials = client_->ListAllTrials(name, {});
    EXPECT_TRUE(trials.ok()) << trials.status();
    Outcome o;
    if (!trials.ok()) return o;
    for (const auto& t : *trials) {
      auto full = client_->GetTrial(name, t.number());
      EXPECT_TRUE(full.ok());
      if (!full.ok()) continue;
      int64_t config = -1;
      for (const auto& p : full->metric_history()) {
        config = static_cast<int64_t>(p.metrics().at("config_id"));
      }
      o.lines.push_back(
          absl::StrCat(t.number(), " ", v1::TrialState_Name(t.state()), " ",
                       t.last_step(), " ", config, " ", t.error()));
      histories_[name].push_back(*full);
    }
    return o;
  }

  fs::path Table() const { return dir_ / "table.csv"; }
  std::map<std::string, std::vector<v1::Trial>> histories_;
};

TEST_F(ReplayE2eTest, TheSameTableMethodAndSeedGiveTheSameDecisions) {
  for (const std::string scheduler :
       {"{asha: {min_steps: 10, max_steps: 90, reduction_factor: 3}}",
        "{asha: {min_steps: 10, max_steps: 90, reduction_factor: 3, "
        "promotion: true}}",
        "{median: {grace_steps: 20, min_samples: 3}}"}) {
    SCOPED_TRACE(scheduler);
    const std::string tag = std::to_string(histories_.size());
    const Outcome first = Run("first" + tag, scheduler);
    const Outcome second = Run("second" + tag, scheduler);
    ASSERT_EQ(first.lines.size(), 14u);
    EXPECT_EQ(first.lines, second.lines);
    // The methods did stop or pause something: the decisions are real.
    int cut = 0;
    for (const auto& t : histories_["first" + tag]) {
      EXPECT_TRUE(t.state() == v1::COMPLETED || t.state() == v1::STOPPED)
          << v1::TrialState_Name(t.state()) << ": " << t.error();
      cut += t.last_step() < 90;
    }
    EXPECT_GE(cut, 1);
  }
}

TEST_F(ReplayE2eTest, TheRankCheckLetsNothingStopUntilRankingsAreShownToHold) {
  // The same crossing curves, ASHA with and without scheduler.rank_check.
  const std::string asha =
      "{asha: {min_steps: 10, max_steps: 90, reduction_factor: 3}";
  const Outcome plain = Run("plain", asha + "}");
  const Outcome checked = Run("checked", asha + ", rank_check: {}}");
  ASSERT_EQ(checked.lines.size(), 14u);
  EXPECT_NE(plain.lines, checked.lines);
  EXPECT_EQ(Run("again", asha + ", rank_check: {}}").lines, checked.lines);
  // Plain ASHA cuts one of the first trials; with the check every trial
  // runs to the end until eight (the default min_trials) have completed.
  int completed = 0, plain_cut_early = 0;
  for (const auto& t : histories_["checked"]) {
    if (completed < 8) {
      EXPECT_EQ(t.state(), v1::COMPLETED) << t.number() << ": " << t.error();
    }
    completed += t.state() == v1::COMPLETED;
  }
  for (const auto& t : histories_["plain"]) {
    plain_cut_early += t.number() < 5 && t.state() == v1::STOPPED;
  }
  EXPECT_GE(plain_cut_early, 1);
}

TEST_F(ReplayE2eTest, EachTrialReplaysTheCurveOfItsNearestConfiguration) {
  auto table = replay::CurveTable::Load(Table().string());
  ASSERT_TRUE(table.ok()) << table.status();
  Run("fifo", "{fifo: {}}");
  Run("promo",
      "{asha: {min_steps: 10, max_steps: 90, reduction_factor: 3, "
      "promotion: true}}");
  int resumed = 0;
  for (const auto& [name, trials] : histories_) {
    for (const auto& t : trials) {
      auto nearest = table->Nearest(
          {{"lr", replay::Value(t.params().at("lr").double_value())}});
      ASSERT_TRUE(nearest.ok()) << nearest.status();
      const replay::Config& c = **nearest;
      // Every reported point is the recorded one, in order, also across a
      // pause and its resume from the checkpoint (steps 10, 20, ...).
      ASSERT_LE(t.metric_history_size(), 9) << name << " " << t.number();
      for (int i = 0; i < t.metric_history_size(); ++i) {
        const auto& p = t.metric_history(i);
        EXPECT_EQ(p.step(), c.points[i].step);
        EXPECT_EQ(p.metrics().at("val_loss"),
                  c.points[i].metrics.at("val_loss"));
        EXPECT_EQ(p.metrics().at("config_id"), c.id);
        EXPECT_EQ(p.metrics().at("elapsed_s"), c.points[i].elapsed_s);
      }
      resumed += t.attempt() > 1;
      if (name == "fifo") {
        EXPECT_EQ(t.last_step(), 90);
      }
    }
  }
  EXPECT_GE(resumed, 1) << "no promoted trial resumed from its checkpoint";
}

TEST_F(ReplayE2eTest, APbtExploitGoesOnAlongTheDonorsCurve) {
  StartWorker("w2", 3, {"--allow-command=" DIAL_REPLAY_BIN});
  Run("pbt", "{pbt: {perturbation_interval: 30, quantile: 0.25, seed: 3}}",
      ", \"--speedup=20\"", 4);
  ASSERT_EQ(histories_["pbt"].size(), 14u);
  std::map<int64_t, const v1::Trial*> by_number;
  for (const auto& t : histories_["pbt"]) by_number[t.number()] = &t;
  int exploits = 0;
  for (const auto& t : histories_["pbt"]) {
    for (const auto& e : t.lineage()) {
      // The donor's curve point at the copied step names its config.
      const v1::Trial* donor = by_number.at(e.source_trial());
      double config = -1, next = -1;
      for (const auto& p : donor->metric_history()) {
        if (p.step() == e.source_step()) config = p.metrics().at("config_id");
      }
      for (const auto& p : t.metric_history()) {
        if (p.step() > e.step() && next < 0) next = p.metrics().at("config_id");
      }
      if (next < 0) continue;  // exploited at its last report
      ++exploits;
      EXPECT_EQ(next, config) << "trial " << t.number() << " step " << e.step();
    }
  }
  EXPECT_GE(exploits, 1);
}

TEST_F(ReplayE2eTest, CostAwareReplayReportsElapsedMilliseconds) {
  Run("cost",
      "{asha: {min_steps: 1000, max_steps: 13500, reduction_factor: 3}}",
      ", \"--resource=milliseconds\"");
  ASSERT_FALSE(histories_["cost"].empty());
  for (const auto& t : histories_["cost"]) {
    for (const auto& p : t.metric_history()) {
      EXPECT_EQ(p.step(), std::llround(p.metrics().at("elapsed_s") * 1000));
    }
  }
}

TEST_F(ReplayE2eTest, ATableWithoutTheStudysParameterFailsTheTrialByName) {
  auto spec = ParseStudySpec(absl::StrCat(
      R"(name: wrong
objective: {metric: val_loss, goal: MINIMIZE}
search_space: [{name: momentum, float: {min: 0.1, max: 0.9}}]
budget: {max_trials: 1, max_failures_per_trial: 1}
trial: {command: {argv: [")",
      DIAL_REPLAY_BIN, "\", \"--table=", Table().string(), "\"]}}"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(client_->CreateStudy(*spec).ok());
  WaitForEnd("wrong");
  auto trials = client_->ListAllTrials("wrong", {});
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_EQ((*trials)[0].state(), v1::FAILED);
  EXPECT_THAT((*trials)[0].error(),
              HasSubstr("parameter 'momentum' is not a column of the table"));
}

}  // namespace
}  // namespace dial
