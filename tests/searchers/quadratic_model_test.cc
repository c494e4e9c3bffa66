// The linear-quadratic surrogate of model-assisted CMA-ES, and Kendall's
// tau that decides when it is trusted.
#include "searchers/quadratic_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dial::searchers {
namespace {

// A rotated, shifted quadratic in 3-D with a cross term.
double Bowl(const Eigen::VectorXd& x) {
  const double a = x[0] - 0.3, b = x[1] - 0.6, c = x[2] - 0.1;
  return 2 * a * a + b * b + 0.5 * c * c + 0.8 * a * b + 3;
}

std::vector<Eigen::VectorXd> Points(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<Eigen::VectorXd> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(Eigen::Vector3d(unit(rng), unit(rng), unit(rng)));
  }
  return out;
}

QuadraticModel::Frame Identity3() {
  return {Eigen::VectorXd::Zero(3), Eigen::MatrixXd::Identity(3, 3)};
}

TEST(QuadraticModelTest, TermsGrowWithTheData) {
  // n = 3: linear 4 terms; diagonal 7 from 1.2 * 7 = 8.4 points; full 10
  // from 1.2 * 10 = 12 points.
  for (auto [count, terms] :
       {std::pair{5, 4}, {8, 4}, {9, 7}, {11, 7}, {12, 10}, {40, 10}}) {
    const auto points = Points(count, 1);
    std::vector<double> values;
    for (const auto& p : points) values.push_back(Bowl(p));
    auto model = QuadraticModel::Fit(points, values, Identity3());
    ASSERT_TRUE(model.has_value()) << count;
    EXPECT_EQ(model->terms(), terms) << count << " points";
  }
}

TEST(QuadraticModelTest, AFullModelRecoversAQuadraticAnywhere) {
  const auto points = Points(20, 2);
  std::vector<double> values;
  for (const auto& p : points) values.push_back(Bowl(p));
  // In a shifted, scaled and rotated frame: the fit does not depend on it.
  Eigen::MatrixXd rotation =
      Eigen::AngleAxisd(0.7, Eigen::Vector3d(1, 2, 3).normalized())
          .toRotationMatrix();
  QuadraticModel::Frame frame{Eigen::Vector3d(0.5, 0.5, 0.5), 4.0 * rotation};
  auto model = QuadraticModel::Fit(points, values, frame);
  ASSERT_TRUE(model.has_value());
  for (const auto& p : Points(10, 3)) {
    EXPECT_NEAR(model->Predict(p), Bowl(p), 1e-9);
  }
  EXPECT_NEAR(model->Predict(Eigen::Vector3d(0.3, 0.6, 0.1)), 3.0, 1e-9);
}

TEST(QuadraticModelTest, RefusesNonFiniteValuesAndTooFewPoints) {
  const auto points = Points(10, 4);
  std::vector<double> values(10, 1.0);
  values[3] = std::nan("");
  EXPECT_FALSE(QuadraticModel::Fit(points, values, Identity3()).has_value());
  EXPECT_FALSE(
      QuadraticModel::Fit({points[0]}, {1.0}, Identity3()).has_value());
  // Duplicated points leave the system rank deficient; the fit still
  // reproduces the data.
  std::vector<Eigen::VectorXd> same(12, points[0]);
  auto model =
      QuadraticModel::Fit(same, std::vector<double>(12, 2.5), Identity3());
  ASSERT_TRUE(model.has_value());
  EXPECT_NEAR(model->Predict(points[0]), 2.5, 1e-9);
}

TEST(KendallTauTest, CountsConcordantPairs) {
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  // 6 pairs: (1,2) discordant, the other 5 concordant: (5 - 1) / 6.
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3, 4}, {2, 1, 3, 4}), 4.0 / 6);
  // Ties count as neither: a constant model earns no trust.
  EXPECT_DOUBLE_EQ(KendallTau({1, 1, 1, 1}, {1, 2, 3, 4}), 0.0);
  EXPECT_DOUBLE_EQ(KendallTau({1}, {1}), 0.0);
}

}  // namespace
}  // namespace dial::searchers
