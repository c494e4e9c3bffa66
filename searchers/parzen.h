// Parzen: TPE's one-parameter density model, a mixture of Gaussians
// truncated to [0, 1] (a parameter's unit coordinate) with a prior
// component, as in Optuna 3.1's TPESampler with its defaults:
//  - one kernel per observation, weighted as given, plus the prior
//    (centre 0.5, width 1, weight `prior_weight`);
//  - a kernel's width is the wider gap to its neighbours among the
//    centres (the prior's included); the outermost take the gap to their
//    one neighbour, not to the bound, which would make them as wide as the
//    prior however tight the group; widths are clipped to
//    [1 / min(100, kernels + 1), 1];
//  - LogScore is the log of the mixture with each kernel at the same peak
//    height whatever its width (its truncated Gaussian times its width).
//    A group's many narrow kernels where the search has crowded then count
//    no more than a few wide ones: the ratio of the good group's score to
//    the bad group's rewards the good region instead of penalising how
//    often it was sampled. Optuna 3.1 scores this way too (its truncated
//    normal density lacked the 1/width factor, optuna#5109, changed in
//    3.5); a normalised density converged markedly slower on the
//    benchmark suite (bench/README.md).
#pragma once

#include <random>
#include <vector>

namespace dial::searchers {

class Parzen {
 public:
  Parzen(std::vector<double> points, std::vector<double> weights,
         double prior_weight);

  double LogScore(double x) const;
  // A draw from the mixture (as a density), in [0, 1].
  double Sample(std::mt19937_64& rng) const;

  // The kernels in order of their centres (the prior's included).
  const std::vector<double>& centres() const { return mu_; }
  const std::vector<double>& widths() const { return sigma_; }

 private:
  std::vector<double> mu_, sigma_, weight_, mass_;
};

}  // namespace dial::searchers
