// The GP, expected improvement, and the Bayesian searcher.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "common/spec.h"
#include "google/protobuf/util/time_util.h"
#include "searchers/bayesian_searcher.h"
#include "searchers/gp.h"
#include "searchers/tpe_searcher.h"

namespace dial::searchers {
namespace {

constexpr double kSqrt5 = 2.23606797749979;

double Matern(double r, double s2) {
  return s2 * (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r);
}

TEST(GpTest, PosteriorMatchesTheClosedFormForOnePoint) {
  GpHyperparameters h = GpHyperparameters::Default(2);
  h.log_lengthscales << std::log(0.3), std::log(0.6);
  h.log_signal_variance = std::log(1.7);
  h.log_noise_variance = std::log(0.01);
  Eigen::MatrixXd x(1, 2);
  x << 0.2, 0.4;
  Eigen::VectorXd y(1);
  y << 1.3;
  auto gp = GaussianProcess::Condition(x, y, h);
  ASSERT_TRUE(gp.ok());
  Eigen::VectorXd q(2);
  q << 0.5, 0.1;
  const double r = std::sqrt(std::pow(0.3 / 0.3, 2) + std::pow(0.3 / 0.6, 2));
  const double k = Matern(r, 1.7);
  const double denom = 1.7 + 0.01 + 1e-8;
  double mean, var;
  gp->Predict(q, &mean, &var);
  EXPECT_NEAR(mean, k / denom * 1.3, 1e-9);
  EXPECT_NEAR(var, 1.7 - k * k / denom, 1e-9);
  // At the data point with little noise the posterior pins the value.
  gp->Predict(x.row(0).transpose(), &mean, &var);
  EXPECT_NEAR(mean, 1.7 / denom * 1.3, 1e-9);
  EXPECT_LT(var, 0.011);
}

TEST(GpTest, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  Eigen::MatrixXd x(12, 3);
  Eigen::VectorXd y(12);
  for (int i = 0; i < 12; ++i) {
    for (int d = 0; d < 3; ++d) x(i, d) = u(rng);
    y[i] = std::sin(3 * x(i, 0)) + x(i, 1) * x(i, 1);
  }
  GpHyperparameters h = GpHyperparameters::Default(3);
  h.log_lengthscales << -1.0, -0.3, 0.5;
  h.log_noise_variance = -4;
  Eigen::VectorXd grad;
  const double base = GaussianProcess::LogMarginalLikelihood(x, y, h, &grad);
  const double eps = 1e-6;
  for (int j = 0; j < 5; ++j) {
    GpHyperparameters hp = h;
    if (j < 3) hp.log_lengthscales[j] += eps;
    if (j == 3) hp.log_signal_variance += eps;
    if (j == 4) hp.log_noise_variance += eps;
    const double fd =
        (GaussianProcess::LogMarginalLikelihood(x, y, hp, nullptr) - base) /
        eps;
    EXPECT_NEAR(grad[j], fd, 1e-3 * (1 + std::abs(fd))) << "theta " << j;
  }
  auto gp = GaussianProcess::Condition(x, y, h);
  ASSERT_TRUE(gp.ok());
  Eigen::VectorXd q(3), dm, dv;
  q << 0.3, 0.6, 0.2;
  double m0, v0;
  gp->Predict(q, &m0, &v0, &dm, &dv);
  for (int d = 0; d < 3; ++d) {
    Eigen::VectorXd qp = q;
    qp[d] += eps;
    double m1, v1;
    gp->Predict(qp, &m1, &v1);
    EXPECT_NEAR(dm[d], (m1 - m0) / eps, 1e-4);
    EXPECT_NEAR(dv[d], (v1 - v0) / eps, 1e-4);
  }
}

TEST(GpTest, FitRecoversKnownLengthScales) {
  // Draw from a GP with a short length scale in x0 and a long one in x1.
  const int n = 120;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> normal(0, 1);
  Eigen::MatrixXd x(n, 2);
  for (int i = 0; i < n; ++i) x.row(i) << u(rng), u(rng);
  GpHyperparameters truth = GpHyperparameters::Default(2);
  truth.log_lengthscales << std::log(0.15), std::log(3.0);
  truth.log_signal_variance = 0;
  truth.log_noise_variance = std::log(1e-4);
  Eigen::MatrixXd k(n, n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      double r = std::sqrt(std::pow((x(a, 0) - x(b, 0)) / 0.15, 2) +
                           std::pow((x(a, 1) - x(b, 1)) / 3.0, 2));
      k(a, b) = Matern(r, 1.0) + (a == b ? 1e-4 : 0);
    }
  }
  Eigen::VectorXd z(n);
  for (int i = 0; i < n; ++i) z[i] = normal(rng);
  Eigen::VectorXd y = Eigen::LLT<Eigen::MatrixXd>(k).matrixL() * z;
  GpFitOptions options;
  options.seed = 1;
  GpHyperparameters fit =
      GaussianProcess::Fit(x, y, GpHyperparameters::Default(2), options);
  const double l0 = std::exp(fit.log_lengthscales[0]);
  const double l1 = std::exp(fit.log_lengthscales[1]);
  EXPECT_GT(l0, 0.15 / 1.6);
  EXPECT_LT(l0, 0.15 * 1.6);
  EXPECT_GT(l1, 1.0);  // the irrelevant direction is found to be smooth
  EXPECT_LT(fit.log_noise_variance, std::log(0.01));
}

TEST(ExpectedImprovementTest, PropertiesAndStableTails) {
  // No improvement possible: certain and worse than the best.
  EXPECT_LT(LogExpectedImprovement(1.0, 1e-12, 0.0), -1e6);
  // Certain and better: EI = best - mean.
  EXPECT_NEAR(LogExpectedImprovement(-2.0, 1e-12, 0.0), std::log(2.0), 1e-6);
  // Lower mean or (when worse) more uncertainty means more EI.
  EXPECT_GT(LogExpectedImprovement(0.0, 1.0, 0.5),
            LogExpectedImprovement(0.3, 1.0, 0.5));
  EXPECT_GT(LogExpectedImprovement(2.0, 2.0, 0.0),
            LogExpectedImprovement(2.0, 1.0, 0.0));
  // Far tails stay finite and monotone where plain EI underflows to 0.
  double prev = LogExpectedImprovement(5.0, 1.0, 0.0);
  for (double mean = 6; mean <= 60; mean += 3) {
    double v = LogExpectedImprovement(mean, 1.0, 0.0);
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_LT(v, prev);
    prev = v;
  }
  // Continuity across the switch to the asymptotic form (z = -12).
  EXPECT_NEAR(LogExpectedImprovement(12.0 - 1e-9, 1.0, 0.0),
              LogExpectedImprovement(12.0 + 1e-9, 1.0, 0.0), 1e-6);
  // Derivatives.
  for (double mean : {-1.0, 0.5, 3.0, 12.0}) {
    double dm, ds;
    const double v = LogExpectedImprovement(mean, 0.7, 0.2, &dm, &ds);
    const double eps = 1e-7;
    EXPECT_NEAR(dm, (LogExpectedImprovement(mean + eps, 0.7, 0.2) - v) / eps,
                1e-4 * (1 + std::abs(dm)));
    EXPECT_NEAR(ds, (LogExpectedImprovement(mean, 0.7 + eps, 0.2) - v) / eps,
                1e-4 * (1 + std::abs(ds)));
  }
}

v1::StudySpec Spec(const std::string& space, const std::string& searcher,
                   int max_trials = 100) {
  auto spec = ParseStudySpec(
      "name: b\nobjective: {metric: y, goal: MINIMIZE}\n"
      "budget: {max_trials: " +
      std::to_string(max_trials) +
      "}\n"
      "searcher: " +
      searcher + "\nsearch_space:\n" + space);
  EXPECT_TRUE(spec.ok()) << spec.status();
  FillSpecDefaults(1, *spec);
  return *spec;
}

constexpr char kBraninSpace[] = R"(
  - {name: x1, float: {min: -5, max: 10}}
  - {name: x2, float: {min: 0, max: 15}})";

double Branin(const Params& p) {
  const double x1 = p.at("x1").double_value(), x2 = p.at("x2").double_value();
  const double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
  return std::pow(x2 - b * x1 * x1 + c * x1 - 6, 2) +
         10 * (1 - t) * std::cos(x1) + 10;
}

v1::Trial Finished(int64_t number, const Params& params, double value) {
  v1::Trial t;
  t.set_number(number);
  t.set_state(v1::COMPLETED);
  *t.mutable_params() = params;
  t.set_objective_value(value);
  *t.mutable_end_time() =
      google::protobuf::util::TimeUtil::MillisecondsToTimestamp(1000 + number);
  return t;
}

double BestAfter(Searcher& searcher, int trials) {
  double best = 1e300;
  for (int n = 0; n < trials; ++n) {
    auto p = searcher.Suggest(n);
    EXPECT_TRUE(p.ok()) << p.status();
    const double v = Branin(*p);
    best = std::min(best, v);
    searcher.Observe(Finished(n, *p, v));
  }
  return best;
}

TEST(BayesianSearcherTest, BeatsRandomSearchOnBraninIn40Trials) {
  constexpr double kOptimum = 0.397887;
  int bayes_wins = 0;
  for (uint64_t seed : {1, 2, 3}) {
    auto bayes = BayesianSearcher::Create(
        Spec(kBraninSpace, "{bayesian: {seed: " + std::to_string(seed) + "}}"));
    auto random = RandomSearcher::Create(
        Spec(kBraninSpace, "{random: {seed: " + std::to_string(seed) + "}}"));
    ASSERT_TRUE(bayes.ok() && random.ok());
    const double regret_bayes = BestAfter(**bayes, 40) - kOptimum;
    const double regret_random = BestAfter(**random, 40) - kOptimum;
    EXPECT_LT(regret_bayes, 0.05) << "seed " << seed;
    bayes_wins += regret_bayes < regret_random;
  }
  EXPECT_EQ(bayes_wins, 3);
}

constexpr char kMixedSpace[] = R"(
  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}
  - {name: units, int: {min: 8, max: 512, scale: LOG}}
  - {name: opt, categorical: {values: [sgd, adam, rmsprop]}}
  - {name: momentum, float: {min: 0.5, max: 0.99}, when: {opt: [sgd]}}
  - {name: batch, discrete: {values: [32, 64, 128]}})";

double Mixed(const Params& p) {
  double v = std::pow(std::log10(p.at("lr").double_value()) + 2.5, 2) +
             std::pow(std::log2(double(p.at("units").int_value())) - 6, 2) / 4;
  if (p.at("opt").string_value() == "sgd") {
    v += 0.5 + 4 * std::pow(p.at("momentum").double_value() - 0.9, 2);
  } else if (p.at("opt").string_value() == "rmsprop") {
    v += 1;
  }
  return v + (p.at("batch").double_value() == 64 ? 0 : 0.3);
}

TEST(BayesianSearcherTest, MixedConditionalSpacesStayValid) {
  auto spec = Spec(kMixedSpace, "{bayesian: {seed: 4}}");
  auto searcher = BayesianSearcher::Create(spec);
  ASSERT_TRUE(searcher.ok());
  auto space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  for (int n = 0; n < 30; ++n) {
    auto p = (*searcher)->Suggest(n);
    ASSERT_TRUE(p.ok());
    // Every active parameter valid; inactive ones absent.
    EXPECT_EQ(p->count("momentum"), p->at("opt").string_value() == "sgd");
    for (int i = 0; i < space->size(); ++i) {
      auto it = p->find(space->param(i).name());
      EXPECT_EQ(it != p->end(), space->IsActive(i, *p));
      if (it != p->end()) {
        EXPECT_TRUE(space->Contains(i, it->second));
      }
    }
    (*searcher)->Observe(Finished(n, *p, Mixed(*p)));
  }
}

TEST(BayesianSearcherTest, SameSeedAndHistoryGiveTheSameSuggestion) {
  auto spec = Spec(kMixedSpace, "{bayesian: {seed: 9}}");
  auto running = BayesianSearcher::Create(spec);
  ASSERT_TRUE(running.ok());
  std::vector<v1::Trial> history;
  std::vector<Params> suggested;
  for (int n = 0; n < 25; ++n) {
    auto p = (*running)->Suggest(n);
    ASSERT_TRUE(p.ok());
    suggested.push_back(*p);
    history.push_back(Finished(n, *p, Mixed(*p)));
    (*running)->Observe(history.back());
  }
  // A restarted scheduler rebuilds from the stored history at once.
  auto restarted = BayesianSearcher::Create(spec);
  ASSERT_TRUE(restarted.ok());
  for (const auto& t : history) (*restarted)->Observe(t);
  auto a = (*running)->Suggest(25);
  auto b = (*restarted)->Suggest(25);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->at("opt").string_value(), b->at("opt").string_value());
  EXPECT_DOUBLE_EQ(a->at("lr").double_value(), b->at("lr").double_value());
  EXPECT_EQ(a->at("units").int_value(), b->at("units").int_value());
}

TEST(BayesianSearcherTest, ParallelBatchesAreDiverse) {
  auto spec = Spec(kBraninSpace, "{bayesian: {seed: 6}}");
  auto searcher = BayesianSearcher::Create(spec);
  ASSERT_TRUE(searcher.ok());
  for (int n = 0; n < 15; ++n) {
    auto p = (*searcher)->Suggest(n);
    ASSERT_TRUE(p.ok());
    (*searcher)->Observe(Finished(n, *p, Branin(*p)));
  }
  std::vector<Params> pending;
  for (int n = 15; n < 23; ++n) {
    auto p = (*searcher)->Suggest(n, pending);
    ASSERT_TRUE(p.ok());
    pending.push_back(*p);
  }
  auto space = SearchSpace::Create(spec);
  double closest = 1e9;
  for (size_t i = 0; i < pending.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      auto a = space->Encode(pending[i]), b = space->Encode(pending[j]);
      closest = std::min(closest, std::hypot(a[0] - b[0], a[1] - b[1]));
    }
  }
  EXPECT_GT(closest, 0.01);  // in the unit square
}

TEST(BayesianSearcherTest, FeaturesRoundTripEveryParameterType) {
  auto spec = Spec(kMixedSpace, "{bayesian: {seed: 1}}");
  auto space = SearchSpace::Create(spec);
  ASSERT_TRUE(space.ok());
  FeatureMap features(*space);
  EXPECT_EQ(features.size(), 1 + 1 + 3 + 1 + 1);  // one-hot optimiser
  std::mt19937_64 rng(3);
  for (int n = 0; n < 300; ++n) {
    Params p = space->Sample(rng);
    Eigen::VectorXd f = features.Encode(p);
    EXPECT_GE(f.minCoeff(), 0.0);
    EXPECT_LE(f.maxCoeff(), 1.0);
    Params back = features.Decode(f);
    ASSERT_EQ(back.size(), p.size());
    for (const auto& [name, value] : p) {
      if (value.has_double_value() && space->param(0).name() == name) {
        EXPECT_NEAR(back.at(name).double_value(), value.double_value(),
                    1e-9 * value.double_value());
      } else {
        EXPECT_EQ(ParamValueToString(back.at(name)), ParamValueToString(value))
            << name;
      }
    }
  }
}

TEST(BayesianSearcherTest, SameSeedSameSequence) {
  auto spec = Spec(kBraninSpace, "{bayesian: {seed: 21}}");
  auto a = BayesianSearcher::Create(spec);
  auto b = BayesianSearcher::Create(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int n = 0; n < 20; ++n) {
    auto pa = (*a)->Suggest(n);
    auto pb = (*b)->Suggest(n);
    ASSERT_TRUE(pa.ok() && pb.ok());
    EXPECT_DOUBLE_EQ(pa->at("x1").double_value(), pb->at("x1").double_value());
    EXPECT_DOUBLE_EQ(pa->at("x2").double_value(), pb->at("x2").double_value());
    (*a)->Observe(Finished(n, *pa, Branin(*pa)));
    (*b)->Observe(Finished(n, *pb, Branin(*pb)));
  }
}

TEST(BayesianSearcherTest, RefitScheduleIsSparseLater) {
  EXPECT_EQ(RefitPoint(12), 12);
  EXPECT_EQ(RefitPoint(30), 30);
  EXPECT_EQ(RefitPoint(32), 30);
  EXPECT_EQ(RefitPoint(33), 33);
  int refits = 0;
  for (int n = 1; n <= 1000; ++n) refits += RefitPoint(n) == n;
  EXPECT_LT(refits, 70);
}

TEST(TpeSearcherTest, ConditionalSuggestionsStayValid) {
  auto spec = Spec(kMixedSpace, "{tpe: {seed: 2}}");
  auto tpe = TpeSearcher::Create(spec);
  ASSERT_TRUE(tpe.ok());
  auto space = SearchSpace::Create(spec);
  for (int n = 0; n < 60; ++n) {
    auto p = (*tpe)->Suggest(n);
    ASSERT_TRUE(p.ok());
    for (int i = 0; i < space->size(); ++i) {
      auto it = p->find(space->param(i).name());
      EXPECT_EQ(it != p->end(), space->IsActive(i, *p));
      if (it != p->end()) {
        EXPECT_TRUE(space->Contains(i, it->second));
      }
    }
    (*tpe)->Observe(Finished(n, *p, Mixed(*p)));
  }
}

TEST(TpeSearcherTest, BeatsRandomSearchOnBranin) {
  int wins = 0;
  for (uint64_t seed : {1, 2, 3}) {
    auto tpe = TpeSearcher::Create(
        Spec(kBraninSpace, "{tpe: {seed: " + std::to_string(seed) + "}}"));
    auto random = RandomSearcher::Create(
        Spec(kBraninSpace, "{random: {seed: " + std::to_string(seed) + "}}"));
    ASSERT_TRUE(tpe.ok() && random.ok());
    wins += BestAfter(**tpe, 100) < BestAfter(**random, 100);
  }
  EXPECT_GE(wins, 2);
}

TEST(TpeSearcherTest, RestartAndPendingBehave) {
  auto spec = Spec(kMixedSpace, "{tpe: {seed: 5}}");
  auto running = TpeSearcher::Create(spec);
  auto restarted = TpeSearcher::Create(spec);
  ASSERT_TRUE(running.ok() && restarted.ok());
  std::vector<v1::Trial> history;
  for (int n = 0; n < 30; ++n) {
    auto p = (*running)->Suggest(n);
    ASSERT_TRUE(p.ok());
    history.push_back(Finished(n, *p, Mixed(*p)));
    (*running)->Observe(history.back());
  }
  for (const auto& t : history) (*restarted)->Observe(t);
  auto a = (*running)->Suggest(30);
  auto b = (*restarted)->Suggest(30);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_DOUBLE_EQ(a->at("lr").double_value(), b->at("lr").double_value());
  EXPECT_EQ(a->at("opt").string_value(), b->at("opt").string_value());
  // A batch with pending trials holds no repeats.
  std::vector<Params> pending;
  std::set<double> lrs;
  for (int n = 30; n < 38; ++n) {
    auto p = (*running)->Suggest(n, pending);
    ASSERT_TRUE(p.ok());
    lrs.insert(p->at("lr").double_value());
    pending.push_back(*p);
  }
  EXPECT_EQ(lrs.size(), 8u);
}

// Under ASHA most trials stop at the first rung: model-based searchers must
// learn from rung results (BOHB), not wait for full-budget ones.
template <typename S>
void LearnsFromRungResults(const std::string& searcher) {
  auto spec =
      Spec(kBraninSpace, searcher +
                             "\nscheduler: {asha: {min_steps: 1, max_steps: 9, "
                             "reduction_factor: 3}}");
  auto s = S::Create(spec);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->WantsReports());
  double early = 0, late = 0;
  for (int n = 0; n < 30; ++n) {
    auto p = (*s)->Suggest(n);
    ASSERT_TRUE(p.ok());
    const double v = Branin(*p);
    if (n < 5) early += v / 5;
    if (n >= 20) late += v / 10;
    v1::Trial t;
    t.set_number(n);
    *t.mutable_params() = *p;
    Metrics m;
    m["y"] = v;
    (*s)->ObserveReport(t, 1, m);  // reached rung 1, then stopped
    t.set_state(v1::STOPPED);
    (*s)->Observe(t);
  }
  EXPECT_LT(late, 0.5 * early) << searcher;
}

TEST(BohbTest, BayesianFitsOnRungResults) {
  LearnsFromRungResults<BayesianSearcher>("{bayesian: {seed: 3}}");
}

TEST(BohbTest, TpeFitsOnRungResults) {
  LearnsFromRungResults<TpeSearcher>("{tpe: {seed: 3}}");
}

TEST(BohbTest, WithoutEarlyStoppingNoReportsAreWanted) {
  auto b = BayesianSearcher::Create(Spec(kBraninSpace, "{bayesian: {}}"));
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE((*b)->WantsReports());
}

}  // namespace
}  // namespace dial::searchers
