// PBT decisions on hand-made report sequences, and perturbation bounds.
#include "searchers/pbt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/spec.h"

namespace dial::searchers {
namespace {

v1::StudySpec Spec(double resample = 0.0) {
  auto spec = ParseStudySpec(
      "name: p\nobjective: {metric: acc, goal: MAXIMIZE}\n"
      "budget: {max_trials: 8}\n"
      "search_space:\n"
      "  - {name: lr, float: {min: 0.001, max: 0.1, scale: LOG}}\n"
      "  - {name: units, int: {min: 16, max: 64}}\n"
      "  - {name: batch, discrete: {values: [32, 64, 128]}}\n"
      "  - {name: opt, categorical: {values: [sgd, adam]}}\n"
      "scheduler: {pbt: {perturbation_interval: 10, quantile: 0.25, "
      "resample_probability: " +
      std::to_string(resample) + ", seed: 3}}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateStudySpec(*spec).ok()) << ValidateStudySpec(*spec);
  return *spec;
}

v1::Trial Member(int64_t number, bool checkpointed, int64_t step) {
  v1::Trial t;
  t.set_number(number);
  (*t.mutable_params())["lr"].set_double_value(0.01 * (number + 1));
  (*t.mutable_params())["units"].set_int_value(32);
  (*t.mutable_params())["batch"].set_double_value(64);
  (*t.mutable_params())["opt"].set_string_value("adam");
  if (checkpointed) {
    t.set_checkpoint("p/" + std::to_string(number) + "/" +
                     std::to_string(step));
    t.set_checkpoint_step(step);
  }
  return t;
}

Metrics M(double acc) {
  Metrics m;
  m["acc"] = acc;
  return m;
}

TEST(PbtTest, BottomQuantileExploitsACheckpointedTopMember) {
  auto pbt = PbtScheduler::Create(Spec());
  ASSERT_TRUE(pbt.ok());
  const double acc[] = {0.1, 0.5, 0.6, 0.9};
  // Until the first perturbation interval nobody is touched.
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ((*pbt)->OnReport(Member(t, true, 5), 5, M(acc[t])).action(),
              v1::Decision::CONTINUE);
  }
  // At step 10 the worst member copies the best one.
  for (int t = 1; t < 4; ++t) {
    EXPECT_EQ((*pbt)->OnReport(Member(t, true, 10), 10, M(acc[t])).action(),
              v1::Decision::CONTINUE);
  }
  auto d = (*pbt)->OnReport(Member(0, true, 10), 10, M(0.1));
  ASSERT_EQ(d.action(), v1::Decision::EXPLOIT);
  EXPECT_EQ(d.source_trial(), 3);
  EXPECT_EQ(d.source_checkpoint(), "p/3/10");
  // New params: the donor's, perturbed.
  EXPECT_NEAR(d.new_params().at("lr").double_value() / 0.04, 1.0, 0.21);
  EXPECT_NE(d.new_params().at("lr").double_value(), 0.04);
  // Not again before the next interval.
  EXPECT_EQ((*pbt)->OnReport(Member(0, true, 15), 15, M(0.1)).action(),
            v1::Decision::CONTINUE);
}

TEST(PbtTest, MembersWithoutACheckpointAreNeverCopied) {
  auto pbt = PbtScheduler::Create(Spec());
  ASSERT_TRUE(pbt.ok());
  const double acc[] = {0.1, 0.5, 0.6, 0.9};
  for (int t = 1; t < 4; ++t) {
    (*pbt)->OnReport(Member(t, /*checkpointed=*/t != 3, 10), 10, M(acc[t]));
  }
  // The only top member (3) has no checkpoint: no exploit.
  EXPECT_EQ((*pbt)->OnReport(Member(0, true, 10), 10, M(0.1)).action(),
            v1::Decision::CONTINUE);
}

TEST(PbtTest, PerturbationsStayInBounds) {
  auto pbt = PbtScheduler::Create(Spec());
  ASSERT_TRUE(pbt.ok());
  std::mt19937_64 rng(1);
  Params base = Member(0, false, 0).params();
  base["lr"].set_double_value(0.1);  // at the upper bound
  base["units"].set_int_value(64);
  base["batch"].set_double_value(128);
  std::set<double> lrs;
  for (int i = 0; i < 50; ++i) {
    Params p = (*pbt)->Perturb(base, rng);
    const double lr = p.at("lr").double_value();
    EXPECT_TRUE(lr == 0.1 || std::abs(lr - 0.08) < 1e-12) << lr;
    lrs.insert(lr);
    EXPECT_LE(p.at("units").int_value(), 64);
    EXPECT_GE(p.at("units").int_value(), 51);
    EXPECT_TRUE(p.at("batch").double_value() == 128 ||
                p.at("batch").double_value() == 64);
    EXPECT_EQ(p.at("opt").string_value(), "adam");  // never without resampling
  }
  EXPECT_EQ(lrs.size(), 2u);
  // With resample_probability 1 every parameter is redrawn in its domain.
  auto always = PbtScheduler::Create(Spec(1.0));
  ASSERT_TRUE(always.ok());
  auto space = SearchSpace::Create(Spec(1.0));
  std::set<std::string> opts;
  for (int i = 0; i < 50; ++i) {
    Params p = (*always)->Perturb(base, rng);
    for (int j = 0; j < space->size(); ++j) {
      EXPECT_TRUE(space->Contains(j, p.at(space->param(j).name())));
    }
    opts.insert(p.at("opt").string_value());
  }
  EXPECT_EQ(opts.size(), 2u);
}

}  // namespace
}  // namespace dial::searchers
