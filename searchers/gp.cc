#include "searchers/gp.h"

#include <nlopt.h>

#include <cmath>
#include <limits>
#include <random>

namespace dial::searchers {
namespace {

constexpr double kSqrt5 = 2.23606797749979;
constexpr double kLog2Pi = 1.8378770664093453;
constexpr double kJitter = 1e-8;

// Bounds and a weak log-normal prior on the log hyperparameters.
constexpr double kMinLogLength = -4.6;  // 0.01
constexpr double kMaxLogLength = 3.0;   // 20
constexpr double kMinLogSignal = -4.6;
constexpr double kMaxLogSignal = 4.6;
constexpr double kMinLogNoise = -16.0;
constexpr double kMaxLogNoise = 0.0;
constexpr double kPriorLogLength = -0.7;  // 0.5
constexpr double kPriorLengthSd = 1.5;
constexpr double kPriorLogNoise = -9.0;
constexpr double kPriorNoiseSd = 4.0;
constexpr double kPriorSignalSd = 1.5;

// Matern 5/2 as a function of the scaled distance r, and the factor
// g(r) = -(dk/dr) / r, which is finite at r = 0.
inline double Matern(double r, double s2) {
  return s2 * (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r);
}
inline double MaternG(double r, double s2) {
  return s2 * 5.0 / 3.0 * (1 + kSqrt5 * r) * std::exp(-kSqrt5 * r);
}

Eigen::ArrayXd InvL2(const GpHyperparameters& h) {
  return (-2.0 * h.log_lengthscales.array()).exp();
}

Eigen::MatrixXd KernelMatrix(const Eigen::MatrixXd& x,
                             const Eigen::ArrayXd& inv_l2, double s2) {
  const int n = static_cast<int>(x.rows());
  Eigen::MatrixXd k(n, n);
  for (int a = 0; a < n; ++a) {
    k(a, a) = s2;
    for (int b = 0; b < a; ++b) {
      double r2 =
          ((x.row(a) - x.row(b)).array().square() * inv_l2.transpose()).sum();
      k(a, b) = k(b, a) = Matern(std::sqrt(r2), s2);
    }
  }
  return k;
}

GpHyperparameters Unpack(const double* theta, int dims) {
  GpHyperparameters h;
  h.log_lengthscales = Eigen::Map<const Eigen::VectorXd>(theta, dims);
  h.log_signal_variance = theta[dims];
  h.log_noise_variance = theta[dims + 1];
  return h;
}

struct FitProblem {
  const Eigen::MatrixXd* x;
  const Eigen::VectorXd* y;
  int dims;
};

double Objective(unsigned n, const double* theta, double* grad, void* data) {
  const auto* p = static_cast<const FitProblem*>(data);
  GpHyperparameters h = Unpack(theta, p->dims);
  Eigen::VectorXd g;
  double value = GaussianProcess::LogMarginalLikelihood(*p->x, *p->y, h,
                                                        grad ? &g : nullptr);
  if (!std::isfinite(value)) {
    if (grad) std::fill(grad, grad + n, 0.0);
    return -1e10;
  }
  // Log-normal priors (Gaussian on the log scale).
  for (int d = 0; d < p->dims; ++d) {
    const double z = (theta[d] - kPriorLogLength) / kPriorLengthSd;
    value -= 0.5 * z * z;
    if (grad) g[d] -= z / kPriorLengthSd;
  }
  const double zs = theta[p->dims] / kPriorSignalSd;
  const double zn = (theta[p->dims + 1] - kPriorLogNoise) / kPriorNoiseSd;
  value -= 0.5 * (zs * zs + zn * zn);
  if (grad) {
    g[p->dims] -= zs / kPriorSignalSd;
    g[p->dims + 1] -= zn / kPriorNoiseSd;
    for (unsigned i = 0; i < n; ++i) grad[i] = g[i];
  }
  return value;
}

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

GpHyperparameters GpHyperparameters::Default(int dims) {
  GpHyperparameters h;
  h.log_lengthscales = Eigen::VectorXd::Constant(dims, kPriorLogLength);
  h.log_signal_variance = 0.0;
  h.log_noise_variance = -6.0;
  return h;
}

double GaussianProcess::LogMarginalLikelihood(const Eigen::MatrixXd& x,
                                              const Eigen::VectorXd& y,
                                              const GpHyperparameters& h,
                                              Eigen::VectorXd* gradient) {
  const int n = static_cast<int>(x.rows());
  const int dims = static_cast<int>(x.cols());
  const double s2 = std::exp(h.log_signal_variance);
  const double noise = std::exp(h.log_noise_variance);
  const Eigen::ArrayXd inv_l2 = InvL2(h);
  Eigen::MatrixXd kf = KernelMatrix(x, inv_l2, s2);
  Eigen::MatrixXd k = kf;
  k.diagonal().array() += noise + kJitter;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) {
    return -std::numeric_limits<double>::infinity();
  }
  const Eigen::VectorXd alpha = llt.solve(y);
  const double log_det = 2.0 * llt.matrixLLT().diagonal().array().log().sum();
  const double value = -0.5 * y.dot(alpha) - 0.5 * log_det - 0.5 * n * kLog2Pi;
  if (gradient == nullptr) return value;

  // d/dtheta = 0.5 tr((alpha alpha^T - K^-1) dK/dtheta).
  Eigen::MatrixXd w =
      alpha * alpha.transpose() - llt.solve(Eigen::MatrixXd::Identity(n, n));
  gradient->setZero(dims + 2);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < a; ++b) {
      const Eigen::ArrayXd diff2 =
          (x.row(a) - x.row(b)).transpose().array().square();
      const double r = std::sqrt((diff2 * inv_l2).sum());
      const double coef = w(a, b) * MaternG(r, s2);  // both triangles: x2 / 2
      gradient->head(dims).array() += coef * diff2 * inv_l2;
    }
  }
  (*gradient)[dims] = 0.5 * (w.array() * kf.array()).sum();
  (*gradient)[dims + 1] = 0.5 * noise * w.trace();
  return value;
}

absl::StatusOr<GaussianProcess> GaussianProcess::Condition(
    const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
    const GpHyperparameters& h) {
  if (x.rows() == 0 || x.rows() != y.size() ||
      h.log_lengthscales.size() != x.cols()) {
    return absl::InvalidArgumentError("GP: mismatched or empty data");
  }
  GaussianProcess gp;
  gp.x_ = x;
  gp.h_ = h;
  gp.inv_l2_ = InvL2(h);
  Eigen::MatrixXd k =
      KernelMatrix(x, gp.inv_l2_, std::exp(h.log_signal_variance));
  const double noise = std::exp(h.log_noise_variance);
  for (double jitter = kJitter; jitter < 1.0; jitter *= 100) {
    Eigen::MatrixXd kn = k;
    kn.diagonal().array() += noise + jitter;
    gp.llt_.compute(kn);
    if (gp.llt_.info() == Eigen::Success) {
      gp.alpha_ = gp.llt_.solve(y);
      return gp;
    }
  }
  return absl::FailedPreconditionError("GP: kernel matrix is singular");
}

absl::StatusOr<GaussianProcess> GaussianProcess::Condition(
    const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
    const GpHyperparameters& h, std::shared_ptr<const GaussianProcess> prior) {
  Eigen::VectorXd residual = y;
  for (int i = 0; i < x.rows(); ++i) {
    double mean, var;
    prior->Predict(x.row(i).transpose(), &mean, &var);
    residual[i] -= mean;
  }
  auto gp = Condition(x, residual, h);
  if (gp.ok()) gp->prior_ = std::move(prior);
  return gp;
}

GpHyperparameters GaussianProcess::Fit(const Eigen::MatrixXd& x,
                                       const Eigen::VectorXd& y,
                                       const GpHyperparameters& start,
                                       const GpFitOptions& options) {
  const int dims = static_cast<int>(x.cols());
  const int n = dims + 2;
  FitProblem problem{&x, &y, dims};
  std::vector<double> lower(n, kMinLogLength), upper(n, kMaxLogLength);
  lower[dims] = kMinLogSignal;
  upper[dims] = kMaxLogSignal;
  lower[dims + 1] = kMinLogNoise;
  upper[dims + 1] = kMaxLogNoise;

  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  GpHyperparameters best = start;
  double best_value = -std::numeric_limits<double>::infinity();
  for (int s = 0; s <= options.random_restarts; ++s) {
    std::vector<double> theta(n);
    if (s == 0) {
      for (int d = 0; d < dims; ++d) theta[d] = start.log_lengthscales[d];
      theta[dims] = start.log_signal_variance;
      theta[dims + 1] = start.log_noise_variance;
    } else {
      for (int d = 0; d < dims; ++d) theta[d] = -3.0 + 4.0 * unit(rng);
      theta[dims] = -1.0 + 2.0 * unit(rng);
      theta[dims + 1] = -12.0 + 8.0 * unit(rng);
    }
    for (int i = 0; i < n; ++i)
      theta[i] = std::clamp(theta[i], lower[i], upper[i]);
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, n);
    nlopt_set_lower_bounds(opt, lower.data());
    nlopt_set_upper_bounds(opt, upper.data());
    nlopt_set_max_objective(opt, Objective, &problem);
    nlopt_set_maxeval(opt, options.max_evaluations);
    nlopt_set_ftol_rel(opt, 1e-7);
    double value = -std::numeric_limits<double>::infinity();
    nlopt_result result = nlopt_optimize(opt, theta.data(), &value);
    nlopt_destroy(opt);
    if (result < 0 && result != NLOPT_ROUNDOFF_LIMITED) {
      value = Objective(n, theta.data(), nullptr, &problem);
    }
    if (std::isfinite(value) && value > best_value) {
      best_value = value;
      best = Unpack(theta.data(), dims);
    }
  }
  return best;
}

void GaussianProcess::Predict(const Eigen::VectorXd& point, double* mean,
                              double* variance, Eigen::VectorXd* dmean,
                              Eigen::VectorXd* dvariance) const {
  const int n = size();
  const int dims = static_cast<int>(x_.cols());
  const double s2 = std::exp(h_.log_signal_variance);
  Eigen::VectorXd kstar(n);
  Eigen::MatrixXd dk;  // n x d
  const bool grads = dmean != nullptr || dvariance != nullptr;
  if (grads) dk.resize(n, dims);
  for (int a = 0; a < n; ++a) {
    const Eigen::ArrayXd diff = point.array() - x_.row(a).transpose().array();
    const double r = std::sqrt((diff.square() * inv_l2_).sum());
    kstar[a] = Matern(r, s2);
    if (grads) dk.row(a) = (-MaternG(r, s2) * diff * inv_l2_).transpose();
  }
  *mean = kstar.dot(alpha_);
  const Eigen::VectorXd kinv_kstar = llt_.solve(kstar);
  *variance = std::max(1e-12, s2 - kstar.dot(kinv_kstar));
  if (dmean) *dmean = dk.transpose() * alpha_;
  if (dvariance) *dvariance = -2.0 * dk.transpose() * kinv_kstar;
  if (prior_) {
    double prior_mean, prior_var;
    Eigen::VectorXd prior_dmean;
    prior_->Predict(point, &prior_mean, &prior_var,
                    dmean ? &prior_dmean : nullptr);
    *mean += prior_mean;
    if (dmean) *dmean += prior_dmean;
  }
}

double GaussianProcess::Mean(const Eigen::VectorXd& point) const {
  const double s2 = std::exp(h_.log_signal_variance);
  double mean = 0;
  for (int a = 0; a < size(); ++a) {
    const Eigen::ArrayXd diff = point.array() - x_.row(a).transpose().array();
    mean += Matern(std::sqrt((diff.square() * inv_l2_).sum()), s2) * alpha_[a];
  }
  return prior_ ? mean + prior_->Mean(point) : mean;
}

double LogExpectedImprovement(double mean, double sd, double best,
                              double* dmean, double* dsd) {
  sd = std::max(sd, 1e-12);
  const double z = (best - mean) / sd;
  // EI = sd * h(z), h(z) = z Phi(z) + phi(z); log h and Phi/h = d log h/dz
  // need care for very negative z, where both Phi and h underflow.
  double log_h, dlogh_dz;
  if (z > -12.0) {
    const double phi = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
    const double cdf = NormalCdf(z);
    const double h = z * cdf + phi;
    log_h = std::log(std::max(h, 1e-300));
    dlogh_dz = cdf / std::max(h, 1e-300);
  } else {
    // With u = 1/z^2: h(z) ~ phi(z) u (1 - 3u + 15u^2 - 105u^3 + 945u^4)
    // and Phi(z) ~ phi(z) / |z| (1 - u + 3u^2 - 15u^3 + 105u^4).
    const double u = 1.0 / (z * z);
    const double log_phi = -0.5 * z * z - 0.5 * std::log(2 * M_PI);
    const double series_h = 1 + u * (-3 + u * (15 + u * (-105 + u * 945)));
    const double series_c = 1 + u * (-1 + u * (3 + u * (-15 + u * 105)));
    log_h = log_phi + std::log(u) + std::log(series_h);
    dlogh_dz = (series_c / -z) / (u * series_h);
  }
  if (dmean) *dmean = -dlogh_dz / sd;
  if (dsd) *dsd = 1.0 / sd - dlogh_dz * z / sd;
  return std::log(sd) + log_h;
}

}  // namespace dial::searchers
