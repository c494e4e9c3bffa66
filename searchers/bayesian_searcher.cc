#include "searchers/bayesian_searcher.h"

#include <nlopt.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "common/random.h"
#include "common/status.h"
#include "google/protobuf/util/time_util.h"
#include "searchers/gp_targets.h"
#include "searchers/quadratic_refinement.h"
#include "searchers/quantile.h"

namespace dial::searchers {
namespace {

double RadicalInverse(uint64_t i, int base) {
  double inv = 1.0 / base, f = inv, r = 0;
  while (i > 0) {
    r += f * static_cast<double>(i % base);
    i /= base;
    f *= inv;
  }
  return r;
}

constexpr int kPrimes[] = {2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31, 37, 41,
                           43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97};

struct AcquisitionProblem {
  const GaussianProcess* gp;
  double best;
};

double NegLogEi(const GaussianProcess& gp, double best,
                const Eigen::VectorXd& x, Eigen::VectorXd* grad) {
  double mean, var;
  Eigen::VectorXd dmean, dvar;
  gp.Predict(x, &mean, &var, grad ? &dmean : nullptr, grad ? &dvar : nullptr);
  const double sd = std::sqrt(var);
  double dm, ds;
  const double value = LogExpectedImprovement(mean, sd, best, &dm, &ds);
  if (grad) *grad = -(dm * dmean + ds * dvar / (2 * sd));
  return -value;
}

double AcquisitionObjective(unsigned n, const double* x, double* grad,
                            void* data) {
  const auto* p = static_cast<const AcquisitionProblem*>(data);
  Eigen::Map<const Eigen::VectorXd> point(x, n);
  Eigen::VectorXd g;
  double value = NegLogEi(*p->gp, p->best, point, grad ? &g : nullptr);
  if (!std::isfinite(value)) value = 1e300;
  if (grad) {
    for (unsigned i = 0; i < n; ++i) grad[i] = std::isfinite(g[i]) ? g[i] : 0;
  }
  return value;
}

}  // namespace

int RefitPoint(int n) {
  if (n <= 30) return n;
  int k = 30;
  while (true) {
    int next = k + std::max(1, k / 10);
    if (next > n) return k;
    k = next;
  }
}

FeatureMap::FeatureMap(const SearchSpace& space) : space_(space) {
  for (int i = 0; i < space.size(); ++i) {
    offset_.push_back(size_);
    const auto& p = space.param(i);
    width_.push_back(p.has_categorical() ? p.categorical().values_size() : 1);
    size_ += width_.back();
  }
}

Eigen::VectorXd FeatureMap::Encode(const Params& params) const {
  Eigen::VectorXd f = Eigen::VectorXd::Zero(size_);
  for (int i = 0; i < space_.size(); ++i) {
    const auto& p = space_.param(i);
    auto it = params.find(p.name());
    if (it == params.end()) {
      // Inactive: numeric features at a fixed mid value, no category hot.
      if (!p.has_categorical()) f[offset_[i]] = 0.5;
      continue;
    }
    if (p.has_categorical()) {
      const auto& values = p.categorical().values();
      const int k = static_cast<int>(
          std::find(values.begin(), values.end(), it->second.string_value()) -
          values.begin());
      if (k < width_[i]) f[offset_[i] + k] = 1.0;
    } else {
      f[offset_[i]] = space_.ToUnit(i, it->second);
    }
  }
  return f;
}

Params FeatureMap::Decode(const Eigen::VectorXd& f) const {
  Params params;
  for (int i = 0; i < space_.size(); ++i) {
    if (!space_.IsActive(i, params)) continue;
    const auto& p = space_.param(i);
    if (p.has_categorical()) {
      int best = 0;
      for (int k = 1; k < width_[i]; ++k) {
        if (f[offset_[i] + k] > f[offset_[i] + best]) best = k;
      }
      params[p.name()].set_string_value(p.categorical().values(best));
    } else {
      params[p.name()] = space_.FromUnit(i, f[offset_[i]]);
    }
  }
  return params;
}

BayesianSearcher::BayesianSearcher(SearchSpace space, const Options& options,
                                   const v1::StudySpec& spec)
    : space_(std::move(space)),
      features_(space_),
      options_(options),
      objectives_(static_cast<int>(Objectives(spec).size())),
      rungs_(std::vector<int64_t>()) {
  *spec_.mutable_objective() = spec.objective();
  *spec_.mutable_objectives() = spec.objectives();
  *spec_.mutable_constraints() = spec.constraints();
  if (options_.initial_trials <= 0) {
    options_.initial_trials = std::min(20, std::max(5, 2 * space_.size()));
  }
}

absl::StatusOr<std::unique_ptr<BayesianSearcher>> BayesianSearcher::Create(
    const v1::StudySpec& spec) {
  Options options;
  options.seed = spec.searcher().bayesian().seed();
  options.initial_trials = spec.searcher().bayesian().initial_trials();
  return Create(spec, options);
}

absl::StatusOr<std::unique_ptr<BayesianSearcher>> BayesianSearcher::Create(
    const v1::StudySpec& spec, const Options& options) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  if (space.size() > static_cast<int>(std::size(kPrimes))) {
    return absl::InvalidArgumentError(
        "searcher.bayesian: at most 25 parameters; use tpe for larger spaces");
  }
  std::unique_ptr<BayesianSearcher> searcher(
      new BayesianSearcher(std::move(space), options, spec));
  searcher->rungs_ = RungResults<Observation>(RungSteps(spec));
  return searcher;
}

BayesianSearcher::Observation BayesianSearcher::Make(
    int64_t end_ms, const v1::Trial& trial, const Metrics& metrics) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Observation o{end_ms,
                trial.number(),
                Params(trial.params().begin(), trial.params().end()),
                features_.Encode(trial.params()),
                nan,
                {},
                {}};
  if (auto objectives = MinimizedObjectives(spec_, metrics)) {
    o.objectives = std::move(*objectives);
    o.y = o.objectives[0];
  }
  for (const auto& c : spec_.constraints()) {
    auto it = metrics.find(c.metric());
    o.constraints.push_back(
        it != metrics.end() && std::isfinite(it->second) ? it->second : nan);
  }
  return o;
}

std::vector<double> BayesianSearcher::Targets(
    const std::vector<const Observation*>& obs,
    const std::vector<double>& weights) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> out;
  if (objectives_ == 1) {
    for (const auto* o : obs) out.push_back(o->y);
    return out;
  }
  std::vector<double> lo(objectives_, 1e300), hi(objectives_, -1e300);
  for (const auto* o : obs) {
    for (int d = 0; d < int(o->objectives.size()); ++d) {
      lo[d] = std::min(lo[d], o->objectives[d]);
      hi[d] = std::max(hi[d], o->objectives[d]);
    }
  }
  for (const auto* o : obs) {
    if (o->objectives.empty()) {
      out.push_back(nan);
      continue;
    }
    double worst = -1e300, sum = 0;
    for (int d = 0; d < objectives_; ++d) {
      const double range = hi[d] > lo[d] ? hi[d] - lo[d] : 1.0;
      const double z = weights[d] * (o->objectives[d] - lo[d]) / range;
      worst = std::max(worst, z);
      sum += z;
    }
    out.push_back(worst + 0.05 * sum);
  }
  return out;
}

void BayesianSearcher::Observe(const v1::Trial& trial) {
  const int64_t end_ms =
      google::protobuf::util::TimeUtil::TimestampToMilliseconds(
          trial.end_time());
  Observation o = Make(end_ms, trial, trial.final_metrics());
  if (trial.state() == v1::COMPLETED && objectives_ == 1 &&
      trial.has_objective_value() && std::isfinite(trial.objective_value())) {
    o.y = spec_.objective().goal() == v1::MAXIMIZE ? -trial.objective_value()
                                                   : trial.objective_value();
    o.objectives = {o.y};
  } else if (trial.state() == v1::COMPLETED && !o.objectives.empty()) {
  } else if (trial.state() == v1::FAILED) {
    o.y = std::numeric_limits<double>::quiet_NaN();
    o.objectives.clear();
  } else if (trial.state() == v1::STOPPED) {
    // Stopped early: worse than the trials promoted past it. It joins the
    // posterior of every fit that lacks it at the worst value, so the
    // model stops proposing it (issue 20's defect: a GP fitted on a higher
    // rung kept suggesting a point stopped at the first).
    o.y = std::numeric_limits<double>::quiet_NaN();
    o.objectives.clear();
    stopped_.push_back(std::move(o));
    return;
  } else {
    return;
  }
  auto pos = std::upper_bound(observations_.begin(), observations_.end(), o,
                              [](const Observation& a, const Observation& b) {
                                return std::tie(a.end_ms, a.number) <
                                       std::tie(b.end_ms, b.number);
                              });
  observations_.insert(pos, std::move(o));
}

Params BayesianSearcher::InitialDesign(int64_t number) const {
  std::mt19937_64 rng(SplitMix64(options_.seed ^ 0x4A17));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> u(space_.size());
  for (int d = 0; d < space_.size(); ++d) {
    double shift = unit(rng);  // Cranley-Patterson scrambling, fixed per seed
    u[d] = std::fmod(
        RadicalInverse(static_cast<uint64_t>(number) + 1, kPrimes[d]) + shift,
        1.0);
  }
  return space_.Decode(u);
}

void BayesianSearcher::ObservePrior(const v1::Trial& trial) {
  Observation o = Make(0, trial, trial.final_metrics());
  if (!o.objectives.empty()) priors_.push_back(std::move(o));
  prior_gp_.reset();
}

const GaussianProcess* BayesianSearcher::PriorGp() {
  if (prior_gp_ || priors_.empty()) return prior_gp_.get();
  std::vector<const Observation*> all;
  for (const auto& o : priors_) all.push_back(&o);
  Eigen::VectorXd y =
      Transform(Targets(all, std::vector<double>(objectives_, 1.0)));
  std::vector<int> keep = Subset(y, options_.max_points);
  Eigen::MatrixXd x(keep.size(), features_.size());
  Eigen::VectorXd ys(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    x.row(i) = priors_[keep[i]].features.transpose();
    ys[i] = y[keep[i]];
  }
  // An earlier study's trials crowd around its optimum, where a parameter
  // can look irrelevant that matters elsewhere: the hyperparameters are
  // fitted on its best half and a spread of the rest, 20 trials plus 10
  // per input feature up to `max_fit_points` (with 40 in all, Hartmann6's
  // fit judged four of its six parameters irrelevant), and no length scale
  // exceeds the unit range.
  std::vector<int> fit_rows =
      Subset(ys, std::min(options_.max_fit_points, 20 + 10 * features_.size()));
  Eigen::MatrixXd fx(fit_rows.size(), features_.size());
  Eigen::VectorXd fy(fit_rows.size());
  for (size_t i = 0; i < fit_rows.size(); ++i) {
    fx.row(i) = x.row(fit_rows[i]);
    fy[i] = ys[fit_rows[i]];
  }
  GpFitOptions fit;
  fit.seed = SplitMix64(options_.seed ^ 0x9e10);
  prior_h_ = GaussianProcess::Fit(
      fx, fy, GpHyperparameters::Default(features_.size()), fit);
  prior_h_.log_lengthscales = prior_h_.log_lengthscales.cwiseMin(0.0);
  auto gp = GaussianProcess::Condition(x, ys, prior_h_);
  if (gp.ok()) prior_gp_ = std::make_shared<GaussianProcess>(std::move(*gp));
  return prior_gp_.get();
}

void BayesianSearcher::ObserveReport(const v1::Trial& trial, int64_t step,
                                     const Metrics& metrics) {
  if (!MinimizedObjectives(spec_, metrics)) return;
  rungs_.Add(trial.number(), step,
             [&] { return Make(report_seq_++, trial, metrics); });
}

const GpHyperparameters& BayesianSearcher::Hyperparameters(
    const std::vector<Observation>& observations, int level, int valid) {
  const int k = RefitPoint(valid);
  if (k == fitted_at_ && level == fitted_level_) return fitted_;
  // Fit on the first k valid observations in finish order (plus the failed
  // ones among them), a function of the history alone.
  std::vector<const Observation*> first;
  int seen = 0;
  for (const auto& o : observations) {
    if (seen >= k) break;
    first.push_back(&o);
    if (std::isfinite(o.y)) ++seen;
  }
  // Several objectives: the equal-weight scalarisation, normalised over
  // these observations alone.
  Eigen::VectorXd y =
      Transform(Targets(first, std::vector<double>(objectives_, 1.0)));
  std::vector<int> keep = Subset(y, options_.max_fit_points);
  Eigen::MatrixXd x(keep.size(), features_.size());
  Eigen::VectorXd ys(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    x.row(i) = first[keep[i]]->features.transpose();
    ys[i] = y[keep[i]];
  }
  GpFitOptions fit;
  fit.seed = SplitMix64(options_.seed ^ static_cast<uint64_t>(k));
  fitted_ = GaussianProcess::Fit(
      x, ys, GpHyperparameters::Default(features_.size()), fit);
  fitted_at_ = k;
  fitted_level_ = level;
  return fitted_;
}

// Fit on full-budget results, or under early stopping on the highest rung
// that has enough of them (BOHB), never on a mix of budgets; under warm
// start with fewer than two results of its own, on the prior's trials.
BayesianSearcher::FitData BayesianSearcher::ChooseFitData() {
  FitData data;
  for (const auto& o : observations_) data.valid += std::isfinite(o.y);
  data.chosen = &observations_;
  if (data.valid < options_.initial_trials && !rungs_.empty()) {
    if (const auto* rung = rungs_.Highest(options_.initial_trials)) {
      data.chosen = rung;
      data.level = rungs_.Level(rung);
      data.valid = static_cast<int>(rung->size());
    }
  }
  data.prior = PriorGp();
  data.prior_only = data.prior && data.valid < 2;
  if (data.prior_only) {
    data.chosen = &priors_;
    data.level = -3;
    data.valid = static_cast<int>(priors_.size());
  }
  return data;
}

std::vector<double> BayesianSearcher::ScalarisationWeights(
    int64_t number) const {
  std::vector<double> weights(objectives_, 1.0);
  if (objectives_ > 1) {
    // Trial `number`'s own weights, uniform on the simplex.
    std::mt19937_64 draw(SplitMix64(options_.seed ^ 0x9a4e90) ^
                         SplitMix64(static_cast<uint64_t>(number)));
    std::exponential_distribution<double> exp(1.0);
    double total = 0;
    for (auto& w : weights) total += (w = exp(draw));
    for (auto& w : weights) w /= total;
  }
  return weights;
}

BayesianSearcher::Model BayesianSearcher::FitObjective(
    const FitData& data, const std::vector<double>& weights, int pending) {
  Model m;
  // The fit's own results, then the stopped trials it lacks (imputed at
  // the worst value; past the hyperparameter fit's first `valid`).
  m.observations = *data.chosen;
  std::set<int64_t> present;
  for (const auto& o : m.observations) present.insert(o.number);
  for (const auto& o : stopped_) {
    if (!present.count(o.number)) m.observations.push_back(o);
  }
  std::vector<const Observation*> all;
  for (const auto& o : m.observations) all.push_back(&o);
  // Under warm start own results are modelled as residuals from the
  // prior's mean, so both must be on one scale: standardised together,
  // and the prior's GP conditioned again on that scale (with its
  // hyperparameters). Both are centred on the upper quartile of the
  // prior's results, so that where neither has data the model expects a
  // middling result, not the mean of a study crowded near its optimum.
  const GaussianProcess* prior = data.prior;
  m.stacked = prior && !data.prior_only;
  m.prior_gp = prior_gp_;
  Eigen::VectorXd y_all;
  if (m.stacked) {
    std::vector<const Observation*> both;
    for (const auto& o : priors_) both.push_back(&o);
    both.insert(both.end(), all.begin(), all.end());
    const std::vector<double> raw = Targets(both, weights);
    const Eigen::VectorXd scaled = Standardizer::Fit(raw).Apply(raw);
    const int np = static_cast<int>(priors_.size());
    std::vector<int> rows = Subset(scaled.head(np), options_.max_points);
    Eigen::MatrixXd px(rows.size(), features_.size());
    Eigen::VectorXd py(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      px.row(i) = priors_[rows[i]].features.transpose();
      py[i] = scaled[rows[i]];
    }
    const double centre =
        Quantile(std::vector<double>(py.data(), py.data() + py.size()), 0.75);
    py.array() -= centre;
    y_all = scaled.tail(scaled.size() - np).array() - centre;
    auto conditioned = GaussianProcess::Condition(px, py, prior_h_);
    if (conditioned.ok()) {
      m.prior_gp = std::make_shared<GaussianProcess>(std::move(*conditioned));
      prior = m.prior_gp.get();
    }
  } else {
    y_all = Transform(Targets(all, weights));
  }
  m.keep = Subset(y_all, options_.max_points);
  m.n = static_cast<int>(m.keep.size());
  m.x.resize(m.n + pending, features_.size());
  m.y.resize(m.n + pending);
  for (int i = 0; i < m.n; ++i) {
    m.x.row(i) = m.observations[m.keep[i]].features.transpose();
    m.y[i] = y_all[m.keep[i]];
  }
  const int valid = data.valid;
  if (m.stacked && valid >= options_.initial_trials) {
    FitResidualHyperparameters(m, *prior, valid, data.level);
  }
  m.h = data.prior_only || (m.stacked && valid < options_.initial_trials)
            ? prior_h_
        : m.stacked ? residual_h_
                    : Hyperparameters(m.observations, data.level, valid);
  m.gp = m.stacked
             ? GaussianProcess::Condition(m.x.topRows(m.n), m.y.head(m.n), m.h,
                                          m.prior_gp)
             : GaussianProcess::Condition(m.x.topRows(m.n), m.y.head(m.n), m.h);
  return m;
}

// Own results under warm start: residuals from the prior's mean, with the
// prior's hyperparameters until the study has its initial trials, then
// with hyperparameters fitted on the residuals of its first k results (on
// the refit schedule, a function of the history). Their signal variance
// is at most a quarter of the prior's: away from its own results the study
// trusts the earlier one's shape, rather than expecting anything anywhere
// (which sends it to the corners).
void BayesianSearcher::FitResidualHyperparameters(const Model& m,
                                                  const GaussianProcess& prior,
                                                  int valid, int level) {
  const int k = RefitPoint(valid);
  if (residual_fit_key_ == std::make_pair(k, level)) return;
  std::vector<int> rows;
  for (int i = 0, seen = 0; i < m.n && seen < k; ++i) {
    if (std::isfinite(m.observations[m.keep[i]].y)) {
      rows.push_back(i);
      ++seen;
    }
  }
  Eigen::MatrixXd rx(rows.size(), features_.size());
  Eigen::VectorXd ry(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    rx.row(r) = m.x.row(rows[r]);
    ry[r] = m.y[rows[r]] - prior.Mean(rx.row(r).transpose());
  }
  // Fitted on the residuals scaled to unit size, as every other fit sees
  // its targets: the fit's noise floor is meant for that scale. On the
  // residuals as they were (a fifth of it on Hartmann6) the floor made the
  // model blind to differences below 1e-4, and a warm study stalled beside
  // its incumbent.
  const double rms =
      std::sqrt(ry.squaredNorm() / std::max<Eigen::Index>(1, ry.size()));
  const double log_s2 = rms > 1e-12 ? 2 * std::log(rms) : 0.0;
  GpHyperparameters start = prior_h_;
  start.log_signal_variance -= log_s2;
  start.log_noise_variance -= log_s2;
  GpFitOptions fit;
  fit.seed = SplitMix64(options_.seed ^ 0x7e5 ^ uint64_t(k));
  residual_h_ =
      GaussianProcess::Fit(rx, ry / std::exp(0.5 * log_s2), start, fit);
  residual_h_.log_noise_variance += log_s2;
  residual_h_.log_signal_variance =
      std::min(residual_h_.log_signal_variance + log_s2,
               prior_h_.log_signal_variance + std::log(0.25));
  residual_fit_key_ = {k, level};
}

// One GP per constraint metric (hyperparameters refit on schedule), the
// bounds on its standardised scale, and which kept observations are
// feasible.
BayesianSearcher::ConstraintModels BayesianSearcher::FitConstraints(
    const Model& m, int valid, int level) {
  ConstraintModels c;
  c.feasible.assign(m.n, true);
  const int nc = spec_.constraints_size();
  if (nc == 0) return c;
  const int k = RefitPoint(valid);
  const bool refit = constraint_fit_key_ != std::make_pair(k, level);
  if (refit) constraint_fits_.assign(nc, GpHyperparameters{});
  for (int j = 0; j < nc; ++j) {
    const auto& spec = spec_.constraints(j);
    std::vector<int> rows;
    for (int i = 0; i < m.n; ++i) {
      const double v = m.observations[m.keep[i]].constraints[j];
      if (std::isfinite(v)) rows.push_back(i);
      const bool ok = std::isfinite(v) &&
                      (!spec.has_max() || v <= spec.max()) &&
                      (!spec.has_min() || v >= spec.min());
      if (!ok) c.feasible[i] = false;
    }
    if (rows.size() < 2) continue;
    Eigen::MatrixXd cx(rows.size(), features_.size());
    Eigen::VectorXd cy(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      cx.row(r) = m.x.row(rows[r]);
      cy[r] = m.observations[m.keep[rows[r]]].constraints[j];
    }
    const double mean = cy.mean();
    double sd = std::sqrt((cy.array() - mean).square().mean());
    if (!(sd > 1e-12)) sd = 1.0;
    cy = (cy.array() - mean) / sd;
    if (refit) {
      // Fitted on the first k of them in finish order (a function of the
      // history alone), like the objective's.
      std::vector<int> first;
      for (int r : rows) {
        if (m.keep[r] < k) first.push_back(r);
      }
      Eigen::MatrixXd fx(first.size(), features_.size());
      Eigen::VectorXd fy(first.size());
      for (size_t r = 0; r < first.size(); ++r) {
        fx.row(r) = m.x.row(first[r]);
        fy[r] = (m.observations[m.keep[first[r]]].constraints[j] - mean) / sd;
      }
      GpFitOptions fit;
      fit.seed = SplitMix64(options_.seed ^ (uint64_t(k) << 8) ^ j);
      constraint_fits_[j] =
          first.size() >= 2
              ? GaussianProcess::Fit(
                    fx, fy, GpHyperparameters::Default(features_.size()), fit)
              : GpHyperparameters::Default(features_.size());
    }
    auto cgp = GaussianProcess::Condition(cx, cy, constraint_fits_[j]);
    if (!cgp.ok()) continue;
    c.gps.push_back(std::move(*cgp));
    c.bounds.push_back({spec.has_min() ? (spec.min() - mean) / sd : -1e300,
                        spec.has_max() ? (spec.max() - mean) / sd : 1e300});
  }
  constraint_fit_key_ = {k, level};
  return c;
}

// Candidates (random, and perturbations of the best points) scored by
// -log EI and the log probability that every constraint holds, the best
// refined with bounded L-BFGS on the relaxed features; the best one not
// already taken.
Params BayesianSearcher::Acquire(Model& m, const ConstraintModels& c,
                                 const std::vector<Params>& pending,
                                 int64_t number) {
  const int n = m.n;
  const int p = static_cast<int>(pending.size());
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) {
    if (c.feasible[i]) best = std::min(best, m.y[i]);
  }
  const bool any_feasible = std::isfinite(best);
  // Kriging believer: pending points join at the posterior mean.
  for (int j = 0; j < p; ++j) {
    m.x.row(n + j) = features_.Encode(pending[j]).transpose();
    double mean, var;
    m.gp->Predict(m.x.row(n + j).transpose(), &mean, &var);
    m.y[n + j] = mean;
  }
  if (p > 0) {
    auto believed = m.stacked
                        ? GaussianProcess::Condition(m.x, m.y, m.h, m.prior_gp)
                        : GaussianProcess::Condition(m.x, m.y, m.h);
    if (believed.ok()) m.gp = std::move(believed);
  }
  const GaussianProcess& gp = *m.gp;
  // Lower is better: -log EI (constrained: minus the log probability that
  // every constraint holds; that alone before any trial is feasible).
  auto score = [&](const Eigen::VectorXd& f) {
    double s = any_feasible ? NegLogEi(gp, best, f, nullptr) : 0;
    for (size_t j = 0; j < c.gps.size(); ++j) {
      double mean, var;
      c.gps[j].Predict(f, &mean, &var);
      const double sd = std::sqrt(std::max(var, 1e-12));
      const auto [lo, hi] = c.bounds[j];
      const double p = 0.5 * std::erfc(-(hi - mean) / sd / std::sqrt(2.0)) -
                       0.5 * std::erfc(-(lo - mean) / sd / std::sqrt(2.0));
      s -= std::log(std::max(p, 1e-300));
    }
    return s;
  };
  std::mt19937_64 rng(SplitMix64(options_.seed) ^
                      SplitMix64(static_cast<uint64_t>(number)));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto taken = [&](const Eigen::VectorXd& f) {
    for (int i = 0; i < n + p; ++i) {
      if ((m.x.row(i).transpose() - f).squaredNorm() < 1e-12) return true;
    }
    return false;
  };
  struct Candidate {
    double score;
    Eigen::VectorXd f;
  };
  std::vector<Candidate> candidates;
  std::vector<double> u(space_.size());
  const int random_count =
      n > 300 ? options_.candidates / 2 : options_.candidates;
  for (int k = 0; k < random_count; ++k) {
    for (auto& v : u) v = unit(rng);
    Eigen::VectorXd f = features_.Encode(space_.Decode(u));
    candidates.push_back({score(f), f});
  }
  // Perturbations of the best observed points, in the unit cube: 40 of
  // each with sd `scale` (inactive parameters drawn anew).
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + std::min(n, 5), order.end(),
                    [&](int a, int b) { return m.y[a] < m.y[b]; });
  auto perturb = [&](int row, double scale) {
    const Params base = features_.Decode(m.x.row(row).transpose());
    const std::vector<double> centre = space_.Encode(base);
    for (int k = 0; k < 40; ++k) {
      for (int d = 0; d < space_.size(); ++d) {
        double v = std::isnan(centre[d]) ? unit(rng) : centre[d];
        u[d] = std::clamp(v + scale * normal(rng), 0.0, 1.0);
      }
      Eigen::VectorXd f = features_.Encode(space_.Decode(u));
      candidates.push_back({score(f), f});
    }
  };
  for (int b = 0; b < std::min(n, 5); ++b) perturb(order[b], 0.05);
  // Under warm start, also closer ones of the incumbent (a tenth and a
  // hundredth as far). The stacked model is sharp near its optimum: the
  // region where EI is highest can be narrower than every perturbation
  // above, and the maximiser then settled for the bounds of the space,
  // where EI was a hundred-millionth of that beside the incumbent
  // (bench/README.md).
  if (n > 0 && m.stacked) {
    for (double scale : {5e-3, 5e-4}) perturb(order[0], scale);
  }
  std::sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.score < b.score; });

  // Refine the best distinct candidates with bounded L-BFGS on the relaxed
  // features, then snap back to a valid configuration.
  AcquisitionProblem problem{&gp, best};
  const int dims = features_.size();
  std::vector<double> lower(dims, 0.0), upper(dims, 1.0);
  std::vector<Candidate> refined;
  int starts = 0;
  // L-BFGS follows EI's gradient: constrained studies rank candidates only.
  const int local_starts =
      spec_.constraints_size() > 0 ? 0 : options_.local_starts;
  for (size_t k = 0; k < candidates.size() && starts < local_starts; ++k) {
    if (taken(candidates[k].f)) continue;
    ++starts;
    std::vector<double> point(candidates[k].f.data(),
                              candidates[k].f.data() + dims);
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, dims);
    nlopt_set_lower_bounds(opt, lower.data());
    nlopt_set_upper_bounds(opt, upper.data());
    nlopt_set_min_objective(opt, AcquisitionObjective, &problem);
    nlopt_set_maxeval(opt, 40);
    double value;
    nlopt_optimize(opt, point.data(), &value);
    nlopt_destroy(opt);
    Eigen::VectorXd f = features_.Encode(
        features_.Decode(Eigen::Map<Eigen::VectorXd>(point.data(), dims)));
    refined.push_back({score(f), f});
    refined.push_back(candidates[k]);
  }
  std::sort(
      refined.begin(), refined.end(),
      [](const Candidate& a, const Candidate& b) { return a.score < b.score; });
  for (const auto& r : refined) {
    if (!taken(r.f)) return features_.Decode(r.f);
  }
  for (const auto& r : candidates) {
    if (!taken(r.f)) return features_.Decode(r.f);
  }
  return InitialDesign(number);
}

// Under warm start the model is the earlier study's shape plus residuals
// fitted on the study's own results, and near its optimum it is
// over-confident along the directions the study has not varied (in
// Hartmann6's second basin, two of the six parameters, which matter a
// hundredth as much as the others there, looked irrelevant to it), and
// the study stalled up to 2e-3 above the basin's minimum (bench/
// README.md). Every third trial, once the study has its initial trials, is
// a quadratic step fitted on its own results alone instead
// (quadratic_refinement.h), on the best 60% of them, which leaves out the
// far explorations; the GP proposes when the model is not trusted.
std::optional<Params> BayesianSearcher::WarmRefinement(
    const FitData& data, const std::vector<Params>& pending,
    int64_t number) const {
  if (!data.prior || data.prior_only || number % 3 != 1 ||
      data.valid < options_.initial_trials || objectives_ != 1 ||
      spec_.constraints_size() > 0) {
    return std::nullopt;
  }
  std::vector<RefinementResult> results;
  for (const auto& o : *data.chosen) results.push_back({&o.params, o.y});
  return RefineNearBest(
      space_, results, pending,
      SplitMix64(options_.seed ^ 0x7ef2) ^ static_cast<uint64_t>(number),
      kWarmRefinementShare);
}

absl::StatusOr<Params> BayesianSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  // Rung choice (and warm start's prior), scalarisation, the objective's
  // model (with the prior), the constraints' models, acquisition.
  const FitData data = ChooseFitData();
  if (data.valid < options_.initial_trials && !data.prior) {
    return InitialDesign(number);
  }
  if (auto step = WarmRefinement(data, pending, number)) return *step;
  const std::vector<double> weights = ScalarisationWeights(number);
  Model model = FitObjective(data, weights, static_cast<int>(pending.size()));
  if (!model.gp.ok()) return InitialDesign(number);
  const ConstraintModels constraints =
      FitConstraints(model, data.valid, data.level);
  return Acquire(model, constraints, pending, number);
}

}  // namespace dial::searchers
