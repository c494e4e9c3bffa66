#include "searchers/quadratic_model.h"

#include <algorithm>
#include <cmath>

namespace dial::searchers {

Eigen::VectorXd QuadraticModel::Features(const Eigen::VectorXd& z, Kind kind) {
  const int n = static_cast<int>(z.size());
  const int size = kind == Kind::kLinear     ? 1 + n
                   : kind == Kind::kDiagonal ? 1 + 2 * n
                                             : (n + 1) * (n + 2) / 2;
  Eigen::VectorXd f(size);
  int k = 0;
  f[k++] = 1;
  for (int i = 0; i < n; ++i) f[k++] = z[i];
  if (kind == Kind::kLinear) return f;
  for (int i = 0; i < n; ++i) f[k++] = z[i] * z[i];
  if (kind == Kind::kDiagonal) return f;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) f[k++] = z[i] * z[j];
  }
  return f;
}

int QuadraticModel::WantedPoints(int n) {
  return 2 * (n <= kMaxFullInputs ? (n + 1) * (n + 2) / 2 : 2 * n + 1);
}

std::optional<QuadraticModel> QuadraticModel::Fit(
    const std::vector<Eigen::VectorXd>& points,
    const std::vector<double>& values, Frame frame) {
  const int m = static_cast<int>(points.size());
  if (m < 2 || values.size() != points.size()) return std::nullopt;
  for (double v : values) {
    if (!std::isfinite(v)) return std::nullopt;
  }
  const int n = static_cast<int>(frame.centre.size());
  QuadraticModel model;
  const bool full = n <= kMaxFullInputs && m >= 1.2 * (n + 1) * (n + 2) / 2;
  model.kind_ = full                     ? Kind::kFull
                : m >= 1.2 * (2 * n + 1) ? Kind::kDiagonal
                                         : Kind::kLinear;
  const int size =
      static_cast<int>(Features(Eigen::VectorXd::Zero(n), model.kind_).size());
  Eigen::MatrixXd a(m, size);
  Eigen::VectorXd b(m);
  for (int r = 0; r < m; ++r) {
    a.row(r) =
        Features(frame.transform * (points[r] - frame.centre), model.kind_)
            .transpose();
    b[r] = values[r];
  }
  model.coef_ = a.colPivHouseholderQr().solve(b);
  if (!model.coef_.allFinite()) return std::nullopt;
  model.frame_ = std::move(frame);
  return model;
}

double QuadraticModel::Predict(const Eigen::VectorXd& x) const {
  return Features(frame_.transform * (x - frame_.centre), kind_).dot(coef_);
}

double KendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return 0;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double s = (a[i] - a[j]) * (b[i] - b[j]);
      sum += s > 0 ? 1 : s < 0 ? -1 : 0;
    }
  }
  return sum / (n * (n - 1) / 2.0);
}

}  // namespace dial::searchers
