// Placement, the pure dispatch policy (docs/scheduling.md): selectors,
// GPUs, quotas, priority, weighted fair share, the order within an owner,
// why a study waits, and the decayed usage meter. Also the quotas file.
#include "scheduler/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "google/protobuf/util/time_util.h"
#include "scheduler/placer.h"
#include "scheduler/quotas.h"

namespace dial::scheduler::placement {
namespace {

Pending Study(const std::string& study, const std::string& owner,
              int32_t priority = 0, int64_t oldest_ms = 0) {
  Pending p;
  p.study = study;
  p.owner = owner;
  p.priority = priority;
  p.oldest_ms = oldest_ms;
  return p;
}

Worker AWorker(Labels labels = {}, int32_t free_gpus = 0) {
  Worker w;
  w.id = "w";
  w.gpus = free_gpus;
  w.free_gpus = free_gpus;
  w.labels = std::move(labels);
  return w;
}

// Which study `worker` gets.
std::string Chosen(const Worker& worker, const std::vector<Pending>& pending,
                   const Running& running, const QuotaTable& quotas = {}) {
  auto i = Choose(worker, pending, running, quotas);
  return i ? pending[*i].study : "(none)";
}

QuotaTable Table(const std::string& text) {
  auto table = Quotas::Parse(text);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *table : QuotaTable{};
}

TEST(PlacementTest, ATrialGoesOnlyToAWorkerThatMatchesEveryKey) {
  Pending a100 = Study("a100", "ann");
  a100.selector = {{"gpu.model", {"A100", "H100"}}, {"zone", {"eu"}}};
  EXPECT_EQ(
      Chosen(AWorker({{"gpu.model", "H100"}, {"zone", "eu"}}), {a100}, {}),
      "a100");
  EXPECT_EQ(Chosen(AWorker({{"gpu.model", "T4"}, {"zone", "eu"}}), {a100}, {}),
            "(none)");
  EXPECT_EQ(Chosen(AWorker({{"gpu.model", "A100"}}), {a100}, {}), "(none)");
  EXPECT_EQ(Mismatch(a100.selector, {{"gpu.model", "A100"}}), "zone");
  // A study without a selector runs anywhere.
  EXPECT_EQ(
      Chosen(AWorker({{"gpu.model", "T4"}}), {a100, Study("any", "bo")}, {}),
      "any");
}

TEST(PlacementTest, ATrialNeedsItsGpusFree) {
  Pending two = Study("two", "ann");
  two.gpus = 2;
  EXPECT_EQ(Chosen(AWorker({}, 1), {two}, {}), "(none)");
  EXPECT_EQ(Chosen(AWorker({}, 2), {two}, {}), "two");
}

TEST(PlacementTest, HigherPriorityGoesFirstWhateverTheShares) {
  Running running;
  running.by_owner["ann"] = {10, 0};  // ann holds much more than bo
  EXPECT_EQ(Chosen(AWorker(), {Study("low", "bo", 0), Study("high", "ann", 5)},
                   running),
            "high");
}

TEST(PlacementTest, EqualPrioritiesGoToTheOwnerWithTheSmallerWeightedShare) {
  Running running;
  running.by_owner["ann"] = {4, 0};
  running.by_owner["bo"] = {3, 0};
  const std::vector<Pending> both = {Study("a", "ann", 0, 1),
                                     Study("b", "bo", 0, 2)};
  EXPECT_EQ(Chosen(AWorker(), both, running), "b");
  // With weight 2, ann's 4 count as 2: ann is behind now.
  EXPECT_EQ(Chosen(AWorker(), both, running, Table("ann weight=2\n")), "a");
  // Recent usage counts as well: bo ran much lately.
  running.recent["bo"] = 2.5;
  EXPECT_EQ(Chosen(AWorker(), both, running), "a");
}

TEST(PlacementTest, WithinAnOwnerTheStudyWithFewerRunningThenTheOldest) {
  Running running;
  running.by_owner["ann"] = {3, 0};
  running.slots_by_study["busy"] = 3;
  EXPECT_EQ(
      Chosen(AWorker(),
             {Study("busy", "ann", 0, 1), Study("idle", "ann", 0, 9)}, running),
      "idle");
  EXPECT_EQ(Chosen(AWorker(),
                   {Study("new", "ann", 0, 9), Study("old", "ann", 0, 1)}, {}),
            "old");
}

TEST(PlacementTest, AQuotaIsNeverExceeded) {
  const QuotaTable quotas =
      Table("ann max_slots=2 max_gpus=3\ndefault max_slots=1\n");
  Running running;
  running.by_owner["ann"] = {2, 0};
  EXPECT_EQ(Chosen(AWorker(), {Study("a", "ann")}, running, quotas), "(none)");
  running.by_owner["ann"] = {1, 2};
  Pending two = Study("a", "ann");
  two.gpus = 2;  // 2 + 2 > 3
  EXPECT_EQ(Chosen(AWorker({}, 4), {two}, running, quotas), "(none)");
  two.gpus = 1;
  EXPECT_EQ(Chosen(AWorker({}, 4), {two}, running, quotas), "a");
  // Owners without a line get the default's.
  running.by_owner["cy"] = {1, 0};
  EXPECT_EQ(Chosen(AWorker(), {Study("c", "cy")}, running, quotas), "(none)");
  EXPECT_EQ(Chosen(AWorker(), {Study("d", "dee")}, running, quotas), "d");
}

TEST(PlacementTest, WhyAStudyWaits) {
  Pending a100 = Study("a100", "ann");
  a100.selector = {{"gpu.model", {"A100"}}};
  EXPECT_EQ(WhyWaiting(a100, {}, {}, {}), "waiting: no worker is registered");
  const std::vector<Worker> t4s = {AWorker({{"gpu.model", "T4"}}),
                                   AWorker({{"host", "x"}})};
  EXPECT_EQ(WhyWaiting(a100, t4s, {}, {}),
            "waiting: no worker matches gpu.model in [A100]");
  Pending big = Study("big", "ann");
  big.gpus = 4;
  EXPECT_EQ(WhyWaiting(big, {AWorker({}, 2)}, {}, {}),
            "waiting: no matching worker has 4 GPUs");
  Running running;
  running.by_owner["ann"] = {2, 0};
  EXPECT_EQ(WhyWaiting(Study("s", "ann"), {AWorker()}, running,
                       Table("ann max_slots=2\n")),
            "waiting: owner 'ann' runs 2 trials, its quota's max_slots");
  // Only busy workers: nothing to say.
  EXPECT_EQ(WhyWaiting(Study("s", "ann"), {AWorker()}, running, {}), "");
  // Kinds of worker with their counts weigh as that many workers: the
  // key most workers fail is named.
  Pending eu_a100 = Study("eu", "ann");
  eu_a100.selector = {{"gpu.model", {"A100"}}, {"zone", {"eu"}}};
  Worker us_a100s = AWorker({{"gpu.model", "A100"}, {"zone", "us"}});
  us_a100s.count = 5;
  EXPECT_EQ(WhyWaiting(eu_a100, {AWorker({{"zone", "eu"}}), us_a100s}, {}, {}),
            "waiting: no worker matches zone in [eu]");
}

Candidate Runs(const std::string& study, int64_t trial, int32_t priority,
               absl::Duration ran, Labels labels = {}) {
  Candidate c;
  c.study = study;
  c.trial = trial;
  c.owner = "o";
  c.priority = priority;
  c.ran = ran;
  c.worker_labels = std::move(labels);
  return c;
}

Need Needs(Pending p, int32_t ready, int32_t preempting = 0) {
  return {std::move(p), ready, preempting};
}

TEST(PreemptionPolicyTest, OnlyLowerPrioritiesThatRanLongEnoughLowestFirst) {
  const absl::Duration min_run = absl::Minutes(1);
  const std::vector<Candidate> running = {
      Runs("mid", 0, 5, absl::Hours(1)),
      Runs("low", 1, 0, absl::Hours(2)),
      Runs("low", 2, 0, absl::Minutes(5)),      // ran least: goes first
      Runs("young", 3, -1, absl::Seconds(10)),  // too young
      Runs("equal", 4, 10, absl::Hours(1)),     // same priority: never
  };
  auto chosen = ChoosePreemptions({Needs(Study("urgent", "u", 10), 3)}, running,
                                  {}, {}, min_run);
  std::vector<size_t> victims;
  for (const auto& [victim, need] : chosen) {
    EXPECT_EQ(need, 0u);
    victims.push_back(victim);
  }
  EXPECT_THAT(victims, ::testing::ElementsAre(2, 1, 0));
  // Two already being preempted for it: one more at most.
  EXPECT_EQ(ChoosePreemptions({Needs(Study("urgent", "u", 10), 3, 2)}, running,
                              {}, {}, min_run)
                .size(),
            1u);
  // Equal priorities never preempt each other.
  EXPECT_TRUE(ChoosePreemptions({Needs(Study("peer", "u", 5), 1)},
                                {Runs("mid", 0, 5, absl::Hours(1))}, {}, {},
                                min_run)
                  .empty());
}

// --fair-share-preempt: an owner below its share takes slots from owners
// above it at equal priority until the standings meet, never past them,
// so the moves cannot go back and forth.
TEST(PreemptionPolicyTest, FairShareMovesSlotsUntilTheStandingsMeet) {
  std::vector<Candidate> running;
  for (int i = 0; i < 8; ++i) {
    running.push_back(
        Runs("ann-study", i, 0, absl::Hours(1) + absl::Minutes(i)));
    running.back().owner = "ann";
  }
  Running held;
  held.by_owner["ann"] = {8, 0};
  const Need bob = Needs(Study("bob-study", "bob", 0), 8);
  // Off: equal priorities never preempt.
  EXPECT_TRUE(
      ChoosePreemptions({bob}, running, held, {}, absl::Minutes(1)).empty());
  // On: 8:0 becomes 4:4, the trials that ran least first.
  auto chosen =
      ChoosePreemptions({bob}, running, held, {}, absl::Minutes(1), true);
  std::vector<size_t> victims;
  for (const auto& [victim, need] : chosen) victims.push_back(victim);
  EXPECT_THAT(victims, ::testing::ElementsAre(0, 1, 2, 3));
  // At 4:4 bob takes nothing back from ann, nor ann from bob.
  held.by_owner["ann"] = {4, 0};
  held.by_owner["bob"] = {4, 0};
  running.resize(4);
  std::vector<Candidate> bobs = running;
  for (auto& c : bobs) c.owner = "bob";
  EXPECT_TRUE(
      ChoosePreemptions({bob}, running, held, {}, absl::Minutes(1), true)
          .empty());
  EXPECT_TRUE(ChoosePreemptions({Needs(Study("ann-study", "ann", 0), 4)}, bobs,
                                held, {}, absl::Minutes(1), true)
                  .empty());
  // Weights 2:1 over 6 slots: 4:2.
  held.by_owner = {{"ann", {6, 0}}};
  running.clear();
  for (int i = 0; i < 6; ++i) {
    running.push_back(Runs("ann-study", i, 0, absl::Hours(1)));
    running.back().owner = "ann";
  }
  EXPECT_EQ(ChoosePreemptions({bob}, running, held, Table("ann weight=2\n"),
                              absl::Minutes(1), true)
                .size(),
            2u);
  // Recent usage counts as in dispatch: bob, who ran 10 trials lately,
  // is not below ann's share.
  held.recent["bob"] = 10;
  EXPECT_TRUE(
      ChoosePreemptions({bob}, running, held, {}, absl::Minutes(1), true)
          .empty());
  // A lower priority goes before a fair-share victim, and a trial of the
  // need's own owner is never one.
  held = Running();
  held.by_owner = {{"ann", {2, 0}}, {"bob", {1, 0}}};
  running = {Runs("ann-study", 0, 0, absl::Hours(1)),
             Runs("ann-study", 1, 0, absl::Hours(1)),
             Runs("bob-low", 2, -1, absl::Hours(1)),
             Runs("bob-study", 3, 0, absl::Minutes(2))};
  running[0].owner = running[1].owner = "ann";
  running[2].owner = running[3].owner = "bob";
  chosen = ChoosePreemptions({bob}, running, held, {}, absl::Minutes(1), true);
  victims.clear();
  for (const auto& [victim, need] : chosen) victims.push_back(victim);
  EXPECT_THAT(victims, ::testing::ElementsAre(2));
}

TEST(PreemptionPolicyTest, OnlyOnMatchingWorkersAndNotPastAQuota) {
  Pending a100 = Study("a100", "u", 10);
  a100.selector = {{"gpu.model", {"A100"}}};
  const std::vector<Candidate> running = {
      Runs("t4", 0, 0, absl::Hours(1), {{"gpu.model", "T4"}}),
      Runs("on-a100", 1, 0, absl::Hours(1), {{"gpu.model", "A100"}})};
  auto chosen = ChoosePreemptions({Needs(a100, 2)}, running, {}, {},
                                  absl::ZeroDuration());
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(chosen[0].first, 1u);
  Running held;
  held.by_owner["u"] = {1, 0};
  EXPECT_TRUE(ChoosePreemptions({Needs(a100, 2)}, running, held,
                                Table("u max_slots=1\n"), absl::ZeroDuration())
                  .empty());
}

TEST(UsageMeterTest, TheAverageApproachesWhatRunsWithTheHalfLife) {
  UsageMeter meter(absl::Hours(1));
  const absl::Time t0 = absl::FromUnixSeconds(1000000);
  EXPECT_TRUE(meter.Advance(t0, {{"ann", 8}}).empty());
  // After one half-life at 8 running: half way from 0 to 8.
  EXPECT_NEAR(meter.Advance(t0 + absl::Hours(1), {}).at("ann"), 4.0, 1e-9);
  // Then one more with none running: half of that.
  EXPECT_NEAR(meter.Advance(t0 + absl::Hours(2), {}).at("ann"), 2.0, 1e-9);
  // Time that does not advance changes nothing.
  EXPECT_NEAR(meter.Advance(t0 + absl::Hours(2), {}).at("ann"), 2.0, 1e-9);
}

TEST(QuotasTest, LinesFillFromTheDefaultAndTheBuiltIn) {
  const QuotaTable t = Table(
      "# shared cluster\n"
      "default max_slots=4 max_priority=1\n"
      "\n"
      "ann weight=2 max_slots=16 max_gpus=8 max_priority=10\n"
      "bo  weight=0.5\n");
  EXPECT_EQ(t.For("ann").weight, 2);
  EXPECT_EQ(t.For("ann").max_slots, 16);
  EXPECT_EQ(t.For("ann").max_gpus, 8);
  EXPECT_EQ(t.For("ann").max_priority, 10);
  EXPECT_EQ(t.For("bo").weight, 0.5);
  EXPECT_EQ(t.For("bo").max_slots, 4);  // from the default line
  EXPECT_EQ(t.For("bo").max_priority, 1);
  EXPECT_EQ(t.For("cy").max_slots, 4);
  EXPECT_EQ(t.For("cy").weight, 1);
  EXPECT_EQ(t.For("cy").max_gpus, 0);  // no limit
}

TEST(QuotasTest, ABadLineIsRefusedWithItsNumber) {
  for (const auto& [text, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"ann weight=0\n", "quotas line 1: weight: '0'"},
           {"\nann max_slots=-1\n", "quotas line 2: max_slots: '-1'"},
           {"ann max_priority=101\n", "quotas line 1: max_priority: '101'"},
           {"ann cpus=4\n", "quotas line 1: unknown key 'cpus'"},
           {"ann weight=1 weight=2\n", "quotas line 1: weight: given twice"},
           {"ann max_slots\n", "quotas line 1: 'max_slots' is not KEY=VALUE"},
           {"ann\nann\n", "quotas line 2: 'ann' given twice"},
           {"a/b weight=1\n", "quotas line 1: 'a/b' is not an owner name"},
       }) {
    auto parsed = Quotas::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                ::testing::HasSubstr(message));
  }
}

TEST(QuotasTest, AFailedReloadKeepsTheQuotasInForce) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("dial-quotas-" + std::to_string(::getpid()));
  auto write = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  };
  write("ann max_slots=2\n");
  auto quotas = Quotas::Load(path.string());
  ASSERT_TRUE(quotas.ok()) << quotas.status();
  EXPECT_EQ((*quotas)->table()->For("ann").max_slots, 2);
  write("ann max_slots=two\n");
  absl::Status bad = (*quotas)->Reload();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("line 1"));
  EXPECT_EQ((*quotas)->table()->For("ann").max_slots, 2);
  write("ann max_slots=5\n");
  EXPECT_TRUE((*quotas)->Reload().ok());
  EXPECT_EQ((*quotas)->table()->For("ann").max_slots, 5);
  std::filesystem::remove(path);
  EXPECT_EQ((*quotas)->Reload().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*quotas)->table()->For("ann").max_slots, 5);
}

}  // namespace
}  // namespace dial::scheduler::placement

namespace dial::scheduler {
namespace {

// Regression: a reload after a lost commit loads the usage records again;
// the owners' recent averages must be rebuilt, not counted twice.
TEST(PlacerTest, RestoringUsageTwiceCountsItOnce) {
  FakeClock clock;
  StudyRegistry studies;
  WorkerRegistry workers(&clock, absl::Seconds(10));
  Preemptions preemptions;
  Placer placer(
      {&studies, &workers, nullptr, &clock, absl::Hours(1), &preemptions});
  v1::UsageRecord r;
  r.set_owner("ann");
  using google::protobuf::util::TimeUtil;
  const int64_t now_ms = absl::ToUnixMillis(clock.Now());
  *r.mutable_start_time() = TimeUtil::MillisecondsToTimestamp(now_ms - 3600000);
  *r.mutable_end_time() = TimeUtil::MillisecondsToTimestamp(now_ms);
  placer.RestoreUsage({r});
  // One trial over the last half-life: half way from 0 to 1.
  EXPECT_NEAR(placer.recent().at("ann"), 0.5, 1e-9);
  placer.RestoreUsage({r});
  EXPECT_NEAR(placer.recent().at("ann"), 0.5, 1e-9);
}

// Workers alike but for their host share a shape: dispatch offers them the
// same trials. A study that selects by host makes shapes not enough.
TEST(PlacerTest, WorkersAlikeButForTheirHostShareAShape) {
  FakeClock clock;
  StudyRegistry studies;
  WorkerRegistry workers(&clock, absl::Seconds(10));
  Preemptions preemptions;
  Placer placer(
      {&studies, &workers, nullptr, &clock, absl::Hours(1), &preemptions});
  auto add = [&](const std::string& host,
                 std::map<std::string, std::string> labels) {
    v1::WorkerResources r;
    for (const auto& [k, v] : labels) (*r.mutable_labels())[k] = v;
    v1::Worker w = workers.Make(host, r);
    workers.Add(w);
    return w.id();
  };
  const std::string a = add("a", {{"zone", "eu"}, {"gpu.model", "A100"}});
  const std::string b = add("b", {{"gpu.model", "A100"}, {"zone", "eu"}});
  const std::string c = add("c", {{"zone", "us"}, {"gpu.model", "A100"}});
  EXPECT_EQ(placer.ShapeOf(a, 1), placer.ShapeOf(b, 1));
  EXPECT_NE(placer.ShapeOf(a, 1), placer.ShapeOf(a, 0));
  EXPECT_NE(placer.ShapeOf(a, 1), placer.ShapeOf(c, 1));
  // Labels cannot run into each other: {ab: c} is not {a: bc}.
  const std::string d = add("d", {{"ab", "c"}});
  const std::string e = add("e", {{"a", "bc"}});
  EXPECT_NE(placer.ShapeOf(d, 0), placer.ShapeOf(e, 0));
  EXPECT_TRUE(placer.ShapesDecide());
}

}  // namespace
}  // namespace dial::scheduler
