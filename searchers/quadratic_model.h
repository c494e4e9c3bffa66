// QuadraticModel: a least-squares linear-quadratic model of a function,
// the surrogate of CMA-ES's model-assisted generations (after Hansen's
// lq-CMA-ES, "A global surrogate assisted CMA-ES", GECCO 2019).
//  - Inputs are mapped by an affine `frame` (for CMA-ES: the current
//    distribution's whitening, so the model is well conditioned however
//    elongated the search has become).
//  - The terms grow with the data: linear below 1.2 (2n + 1) points,
//    diagonal-quadratic below 1.2 (n + 1)(n + 2) / 2, full quadratic
//    above (up to kMaxFullInputs inputs; diagonal beyond). Solved by
//    column-pivoted QR, so a rank-deficient fit still gives a usable model.
#pragma once

#include <Eigen/Dense>
#include <optional>
#include <vector>

namespace dial::searchers {

class QuadraticModel {
 public:
  // z = transform * (x - centre).
  struct Frame {
    Eigen::VectorXd centre;
    Eigen::MatrixXd transform;
  };
  // Full quadratic models only up to this many inputs (91 terms); above,
  // at most diagonal ones, whose cost grows with n instead of n^2.
  static constexpr int kMaxFullInputs = 12;
  // The most points a fit of n inputs wants: twice its richest model's
  // terms.
  static int WantedPoints(int n);
  // Fitted on the points and their values (same length, at least 2);
  // nullopt when a value is not finite.
  static std::optional<QuadraticModel> Fit(
      const std::vector<Eigen::VectorXd>& points,
      const std::vector<double>& values, Frame frame);
  double Predict(const Eigen::VectorXd& x) const;
  // The number of terms (for tests: 1 + n, 1 + 2n or (n + 1)(n + 2) / 2).
  int terms() const { return static_cast<int>(coef_.size()); }

 private:
  enum class Kind { kLinear, kDiagonal, kFull };
  static Eigen::VectorXd Features(const Eigen::VectorXd& z, Kind kind);
  Frame frame_;
  Kind kind_ = Kind::kLinear;
  Eigen::VectorXd coef_;
};

// Kendall's rank correlation (tau-a) of two equally long series; 0 for
// fewer than two pairs.
double KendallTau(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace dial::searchers
