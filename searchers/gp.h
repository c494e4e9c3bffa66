// Gaussian-process regression for model-based search: a Matern-5/2 kernel
// with one length scale per input dimension (ARD), a learned noise term,
// hyperparameters fitted by maximising the log marginal likelihood plus a
// weak log-normal prior (bounded L-BFGS from NLopt, several starts), and the
// posterior mean and variance with their gradients for acquisition search.
// Plus expected improvement in log form, stable far into the tails.
// A GaussianProcess is immutable after Condition: const methods are safe to
// call from several threads.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace dial::searchers {

struct GpHyperparameters {
  Eigen::VectorXd log_lengthscales;  // one per input dimension
  double log_signal_variance = 0.0;
  double log_noise_variance = -6.0;
  // Typical values for inputs in [0, 1] and standardised outputs.
  static GpHyperparameters Default(int dims);
};

struct GpFitOptions {
  int random_restarts = 2;   // besides the given start
  int max_evaluations = 80;  // per start
  uint64_t seed = 0;
};

class GaussianProcess {
 public:
  // The posterior given data X (n x d, inputs roughly in [0, 1]) and targets
  // y (n, standardised). INVALID_ARGUMENT for mismatched shapes or n == 0;
  // FAILED_PRECONDITION if the kernel matrix stays singular with jitter.
  static absl::StatusOr<GaussianProcess> Condition(const Eigen::MatrixXd& x,
                                                   const Eigen::VectorXd& y,
                                                   const GpHyperparameters& h);
  // Stacked transfer (a warm start): the posterior of prior's mean plus a
  // GP on the residuals y - prior's mean at x. Its variance is the
  // residual GP's.
  static absl::StatusOr<GaussianProcess> Condition(
      const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
      const GpHyperparameters& h, std::shared_ptr<const GaussianProcess> prior);

  // Hyperparameters maximising log marginal likelihood + log prior, from
  // `start` and seeded random starts.
  static GpHyperparameters Fit(const Eigen::MatrixXd& x,
                               const Eigen::VectorXd& y,
                               const GpHyperparameters& start,
                               const GpFitOptions& options);

  // Log marginal likelihood (without prior); its gradient with respect to
  // [log lengthscales..., log signal variance, log noise variance] if
  // `gradient` is not null. -infinity if the kernel matrix is singular.
  static double LogMarginalLikelihood(const Eigen::MatrixXd& x,
                                      const Eigen::VectorXd& y,
                                      const GpHyperparameters& h,
                                      Eigen::VectorXd* gradient);

  // Posterior mean and variance of the latent function at `point`, and
  // their gradients with respect to `point` when the pointers are set.
  void Predict(const Eigen::VectorXd& point, double* mean, double* variance,
               Eigen::VectorXd* dmean = nullptr,
               Eigen::VectorXd* dvariance = nullptr) const;

  // The posterior mean alone (cheaper: no solve).
  double Mean(const Eigen::VectorXd& point) const;

  const GpHyperparameters& hyperparameters() const { return h_; }
  int size() const { return static_cast<int>(x_.rows()); }

 private:
  GaussianProcess() = default;
  Eigen::MatrixXd x_;
  Eigen::VectorXd alpha_;  // K^-1 y
  Eigen::LLT<Eigen::MatrixXd> llt_;
  GpHyperparameters h_;
  Eigen::ArrayXd inv_l2_;                         // 1 / lengthscale^2
  std::shared_ptr<const GaussianProcess> prior_;  // mean added, if any
};

// log EI for minimisation: log E[max(best - f, 0)] with f ~ N(mean, sd^2).
// Accurate where EI underflows (best far below the mean). Sets the
// derivatives with respect to mean and sd when the pointers are set.
double LogExpectedImprovement(double mean, double sd, double best,
                              double* dmean = nullptr, double* dsd = nullptr);

}  // namespace dial::searchers
