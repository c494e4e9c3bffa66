// TPE's Parzen model (searchers/parzen.h): the kernel widths at the edges
// of a group and the score's equal-height kernels.
#include "searchers/parzen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dial::searchers {
namespace {

double Phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

TEST(ParzenTest, TheOutermostKernelsTakeTheGapToTheirNeighbour) {
  // Ten observations 0.01 apart from 0.60, and the prior at 0.5: eleven
  // kernels, so no width is under 1/12.
  std::vector<double> points;
  for (int i = 0; i < 10; ++i) points.push_back(0.60 + 0.01 * i);
  const Parzen parzen(points, std::vector<double>(10, 1.0), 1.0);
  ASSERT_EQ(parzen.centres().size(), 11u);
  EXPECT_DOUBLE_EQ(parzen.centres().front(), 0.5);
  EXPECT_DOUBLE_EQ(parzen.widths().front(), 1.0);  // the prior
  // 0.60's wider gap is the one to the prior.
  EXPECT_NEAR(parzen.widths()[1], 0.10, 1e-12);
  // 0.69 is the last: its gap to 0.68, clipped up to 1/12; not the 0.31 to
  // the bound, which left the edge of a tight group as wide as the prior.
  EXPECT_DOUBLE_EQ(parzen.widths().back(), 1.0 / 12);
  for (size_t k = 2; k + 1 < parzen.widths().size(); ++k) {
    EXPECT_DOUBLE_EQ(parzen.widths()[k], 1.0 / 12) << k;
  }
}

TEST(ParzenTest, KernelsScoreAtTheSameHeightWhateverTheirWidth) {
  // A wide kernel at 0.2 and a narrow crowd near 0.8: with a normalised
  // density the crowd's every kernel would peak 1/width higher.
  std::vector<double> points = {0.2};
  for (int i = 0; i < 60; ++i) points.push_back(0.78 + 0.0005 * i);
  const Parzen parzen(points, std::vector<double>(points.size(), 1.0), 1.0);
  // The score is the weighted sum of the truncated kernels without their
  // 1/width factor.
  const double total = points.size() + 1.0;
  for (double x : {0.05, 0.2, 0.5, 0.79, 0.95}) {
    double expected = 0;
    for (size_t k = 0; k < parzen.centres().size(); ++k) {
      const double mu = parzen.centres()[k], sigma = parzen.widths()[k];
      const double z = (x - mu) / sigma;
      expected += std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI) /
                  (Phi((1 - mu) / sigma) - Phi(-mu / sigma)) / total;
    }
    EXPECT_NEAR(parzen.LogScore(x), std::log(expected), 1e-9) << x;
  }
  // So one kernel of weight 1 at 0.2 scores within its truncation of what
  // one of the crowd's kernels scores at its own centre (their neighbours
  // and the prior add a little to each).
  const double crowd = parzen.LogScore(0.79), lone = parzen.LogScore(0.2);
  EXPECT_GT(crowd, lone);  // the crowd's kernels overlap
  EXPECT_LT(crowd - lone, std::log(60.0));
}

TEST(ParzenTest, DrawsStayInTheUnitIntervalAndFollowTheWeights) {
  const Parzen parzen({0.02, 0.98}, {9.0, 1.0}, 0.0);
  std::mt19937_64 rng(7);
  int low = 0;
  for (int i = 0; i < 2000; ++i) {
    const double x = parzen.Sample(rng);
    ASSERT_GE(x, 0.0);
    ASSERT_LE(x, 1.0);
    low += x < 0.5;
  }
  // Nine tenths of the weight sits at 0.02, in a kernel 0.48 wide that
  // puts 72% of its truncated mass below 0.5; the kernel at 0.98 puts 28%
  // there: 0.9 * 0.72 + 0.1 * 0.28 = 0.676.
  EXPECT_NEAR(low / 2000.0, 0.676, 0.03);
}

}  // namespace
}  // namespace dial::searchers
