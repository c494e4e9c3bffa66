#include "searchers/cmaes_searcher.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status.h"
#include "searchers/pareto.h"
#include "searchers/quadratic_model.h"

namespace dial::searchers {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxResamples = 100;
constexpr int kMaxPopulation = 1 << 20;
constexpr uint64_t kSuggestStream = 1;
constexpr uint64_t kRestartStream = 2;
constexpr uint64_t kGenerationStream = 3;
// Model-assisted generations: the model's recent rank agreement (Kendall's
// tau of its predictions before each evaluation against the results) must
// reach this, over the last kAgreementWindow predicted evaluations.
constexpr double kMinAgreement = 0.85;
constexpr int kAgreementWindow = 15;
// Above this many numeric parameters every generation is plain: the model
// would cost more per result than it saves.
constexpr int kMaxAssistedDimensions = 64;

// A random stream per (seed, purpose, index), so suggestions and restarts
// draw independently of each other and of call order.
std::mt19937_64 Stream(uint64_t seed, uint64_t purpose, uint64_t index) {
  return std::mt19937_64(SplitMix64(seed ^ SplitMix64(purpose)) ^
                         SplitMix64(index));
}

}  // namespace

// One run's distribution N(mean, sigma^2 C) over the unit cube and its
// adaptation, with the notation and constants of Hansen's tutorial.
struct CmaEsSearcher::Cma {
  int n;
  double sigma0;
  // Strategy parameters for the current lambda.
  int lambda, mu;
  Eigen::VectorXd weights;
  double mueff, cc, cs, c1, cmu, ds, chi_n;
  // State: C = basis diag(scale^2) basis^T.
  Eigen::VectorXd mean, pc, ps, scale;
  Eigen::MatrixXd c, basis;
  double sigma, min_eig, max_eig;
  int64_t generation;
  std::vector<double> bests;  // best fitness of each generation of the run

  Cma(int dims, double step) : n(dims), sigma0(step) {}

  void Start(int new_lambda, const Eigen::VectorXd& start) {
    lambda = new_lambda;
    mu = lambda / 2;
    // Active CMA (the tutorial's 2016 weights): the best mu pull the mean
    // and C towards them; the worst lambda - mu push C away from theirs.
    Eigen::VectorXd prime(lambda);
    for (int i = 0; i < lambda; ++i) {
      prime[i] = std::log((lambda + 1) / 2.0) - std::log(i + 1.0);
    }
    const Eigen::VectorXd best = prime.head(mu),
                          worst = prime.tail(lambda - mu);
    mueff = best.sum() * best.sum() / best.squaredNorm();
    const double mueff_minus =
        worst.size() > 0 ? worst.sum() * worst.sum() / worst.squaredNorm() : 0;
    cc = (4 + mueff / n) / (n + 4 + 2 * mueff / n);
    cs = (mueff + 2) / (n + mueff + 5);
    c1 = 2 / ((n + 1.3) * (n + 1.3) + mueff);
    cmu = std::min(
        1 - c1, 2 * (mueff - 2 + 1 / mueff) / ((n + 2.0) * (n + 2.0) + mueff));
    // The negative weights' total, kept small enough that C stays positive
    // definite (eqs. 50-52).
    double alpha_minus =
        std::min(1 + c1 / cmu, 1 + 2 * mueff_minus / (mueff + 2));
    if (cmu > 0)
      alpha_minus = std::min(alpha_minus, (1 - c1 - cmu) / (n * cmu));
    weights.resize(lambda);
    for (int i = 0; i < lambda; ++i) {
      weights[i] = i < mu            ? prime[i] / best.sum()
                   : worst.sum() < 0 ? alpha_minus * prime[i] / -worst.sum()
                                     : 0.0;
    }
    ds = 1 + 2 * std::max(0.0, std::sqrt((mueff - 1) / (n + 1)) - 1) + cs;
    chi_n = std::sqrt(n) * (1 - 1.0 / (4 * n) + 1.0 / (21.0 * n * n));
    mean = start;
    pc = ps = Eigen::VectorXd::Zero(n);
    scale = Eigen::VectorXd::Ones(n);
    c = basis = Eigen::MatrixXd::Identity(n, n);
    sigma = sigma0;
    min_eig = max_eig = 1;
    generation = 0;
    bests.clear();
  }

  Eigen::VectorXd Sample(std::mt19937_64& rng) const {
    std::normal_distribution<double> normal;
    Eigen::VectorXd x(n), z(n);
    for (int tries = 0; tries < kMaxResamples; ++tries) {
      for (int k = 0; k < n; ++k) z[k] = normal(rng);
      x = mean + sigma * (basis * scale.cwiseProduct(z));
      if ((x.array() >= 0).all() && (x.array() <= 1).all()) return x;
    }
    for (int k = 0; k < n; ++k) x[k] = std::clamp(x[k], 0.0, 1.0);
    return x;
  }

  // One generation: `ranked` holds lambda points, best first.
  void Tell(const std::vector<Eigen::VectorXd>& ranked, double best) {
    Eigen::VectorXd yw = Eigen::VectorXd::Zero(n);
    Eigen::MatrixXd rank_mu = Eigen::MatrixXd::Zero(n, n);
    for (int i = 0; i < lambda; ++i) {
      const Eigen::VectorXd y = (ranked[i] - mean) / sigma;
      if (i < mu) {
        yw += weights[i] * y;
        rank_mu += weights[i] * y * y.transpose();
      } else if (weights[i] < 0) {
        // Scaled to the length of a typical step, so a far outlier cannot
        // shrink C by much along its direction (eq. 46).
        const double white =
            (basis.transpose() * y).cwiseQuotient(scale).squaredNorm();
        rank_mu += weights[i] * n / std::max(white, 1e-300) * y * y.transpose();
      }
    }
    mean += sigma * yw;
    // C^(-1/2) yw, for the step-size path.
    const Eigen::VectorXd white =
        basis * (basis.transpose() * yw).cwiseQuotient(scale);
    ps = (1 - cs) * ps + std::sqrt(cs * (2 - cs) * mueff) * white;
    ++generation;
    const bool hsig =
        ps.norm() / std::sqrt(1 - std::pow(1 - cs, 2.0 * generation)) <
        (1.4 + 2.0 / (n + 1)) * chi_n;
    pc = (1 - cc) * pc + (hsig ? std::sqrt(cc * (2 - cc) * mueff) : 0.0) * yw;
    const double dh = hsig ? 0 : cc * (2 - cc);
    c = (1 + c1 * dh - c1 - cmu * weights.sum()) * c +
        c1 * pc * pc.transpose() + cmu * rank_mu;
    // Capped at e per generation (as pycma), against a burst of outliers
    // from an older distribution.
    sigma *= std::exp(std::min(1.0, cs / ds * (ps.norm() / chi_n - 1)));
    c = 0.5 * (c + c.transpose()).eval();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(c);
    basis = eigen.eigenvectors();
    min_eig = eigen.eigenvalues().minCoeff();
    max_eig = eigen.eigenvalues().maxCoeff();
    // A degenerate C triggers a restart (Stalled); until then, sample from
    // its positive part.
    const double floor = std::max(max_eig * 1e-20, 1e-300);
    scale = eigen.eigenvalues().cwiseMax(floor).cwiseSqrt();
    bests.push_back(best);
  }

  // IPOP's restart test; NaN anywhere counts as stalled.
  bool Stalled() const {
    if (!(sigma * std::sqrt(max_eig) >= 1e-8)) return true;
    if (!(max_eig <= 1e14 * min_eig)) return true;
    const size_t window =
        10 + static_cast<size_t>(std::ceil(30.0 * n / lambda));
    if (bests.size() < window) return false;
    const auto [lo, hi] =
        std::minmax_element(bests.end() - window, bests.end());
    return !(*hi - *lo > 1e-12);  // also when every one is infinite
  }
};

// Model-assisted generations (see the header): the run's feasible results,
// the current generation's offspring and the order they are handed out in.
struct CmaEsSearcher::Assist {
  struct Result {
    Eigen::VectorXd x;
    double value;
    double predicted;  // by the model in force when it was told; NaN: none
  };
  std::vector<Result> archive;
  std::vector<Eigen::VectorXd> offspring;  // empty: a plain generation
  std::vector<int> order;                  // offspring in suggestion order
  std::optional<QuadraticModel> model;
  int64_t first_number = 0;  // the generation's first trial number
  int told = 0;              // results told from this generation
  uint64_t generations = 0;  // all runs' generations (the offspring stream)
  int64_t trusted = 0;       // generations the model ended
};

absl::Status CmaEsSearcher::Validate(const v1::StudySpec& spec) {
  // Checked before the space, so these messages win over generic ones.
  for (const auto& p : spec.search_space()) {
    if (!p.when().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("searcher.cmaes: conditional parameters ('", p.name(),
                       "') are not supported; use tpe or bayesian"));
    }
  }
  if (IsMultiObjective(spec)) {
    return absl::InvalidArgumentError(
        "searcher.cmaes: supports one objective; use nsga2, tpe or bayesian "
        "for several");
  }
  const auto& cmaes = spec.searcher().cmaes();
  if (cmaes.population_size() < 0 || cmaes.population_size() == 1 ||
      cmaes.population_size() > 10000) {
    return absl::InvalidArgumentError(
        "searcher.cmaes.population_size: must be 0 (= 4 + 3 ln dimensions) "
        "or 2..10000");
  }
  if (!(cmaes.sigma0() >= 0 && cmaes.sigma0() <= 1)) {
    return absl::InvalidArgumentError(
        "searcher.cmaes.sigma0: must be in [0, 1] (0: 0.125)");
  }
  if (cmaes.max_restarts() < -1 || cmaes.max_restarts() > 100) {
    return absl::InvalidArgumentError(
        "searcher.cmaes.max_restarts: must be between -1 (none) and 100 (0: "
        "9)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CmaEsSearcher>> CmaEsSearcher::Create(
    const v1::StudySpec& spec) {
  DIAL_RETURN_IF_ERROR(Validate(spec));
  const auto& cmaes = spec.searcher().cmaes();
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  Options options;
  options.seed = cmaes.seed();
  options.population_size = std::min(cmaes.population_size(), kMaxPopulation);
  if (cmaes.sigma0() > 0) options.sigma0 = cmaes.sigma0();
  options.surrogate = !cmaes.no_surrogate();
  if (cmaes.max_restarts() != 0) {
    options.max_restarts = std::max(0, cmaes.max_restarts());
  }
  return std::unique_ptr<CmaEsSearcher>(
      new CmaEsSearcher(std::move(space), spec, options));
}

CmaEsSearcher::CmaEsSearcher(SearchSpace space, const v1::StudySpec& spec,
                             const Options& options)
    : space_(std::move(space)), spec_(spec), options_(options) {
  for (int i = 0; i < space_.size(); ++i) {
    if (!space_.param(i).has_categorical()) numeric_.push_back(i);
  }
  const int n = static_cast<int>(numeric_.size());
  if (n == 0) return;
  int lambda = options_.population_size;
  if (lambda == 0) lambda = 4 + static_cast<int>(std::floor(3 * std::log(n)));
  cma_ = std::make_unique<Cma>(n, options_.sigma0);
  cma_->Start(lambda, Eigen::VectorXd::Constant(n, 0.5));
  assist_ = std::make_unique<Assist>();
}

CmaEsSearcher::~CmaEsSearcher() = default;

int CmaEsSearcher::population_size() const { return cma_ ? cma_->lambda : 0; }

int64_t CmaEsSearcher::model_generations() const {
  return assist_ ? assist_->trusted : 0;
}

absl::StatusOr<Params> CmaEsSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  std::mt19937_64 rng =
      Stream(options_.seed, kSuggestStream, static_cast<uint64_t>(number));
  if (!cma_) return space_.Sample(rng);
  // A model-assisted generation hands out its offspring best-predicted
  // first; past them (more trials in flight than lambda), plain draws.
  const int64_t slot = number - assist_->first_number;
  const bool assisted = !assist_->offspring.empty() && slot >= 0 &&
                        slot < static_cast<int64_t>(assist_->order.size());
  const Eigen::VectorXd x =
      assisted ? assist_->offspring[assist_->order[slot]] : cma_->Sample(rng);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Params out;
  int k = 0;
  for (int i = 0; i < space_.size(); ++i) {
    const double u = space_.param(i).has_categorical() ? unit(rng) : x[k++];
    out[space_.param(i).name()] = space_.FromUnit(i, u);
  }
  return out;
}

void CmaEsSearcher::Observe(const v1::Trial& trial) {
  if (!cma_ || trial.number() <= skip_through_) return;
  max_number_ = std::max(max_number_, trial.number());
  const auto objective = MinimizedObjectives(spec_, trial);
  Told told;
  if (trial.state() == v1::FAILED ||
      (trial.state() == v1::COMPLETED && !objective)) {
    told.tier = 2;
    told.value = 0;
  } else if ((trial.state() == v1::COMPLETED || trial.state() == v1::STOPPED) &&
             objective) {
    const bool feasible = IsFeasible(spec_, trial.final_metrics());
    told.tier = feasible ? 0 : 1;
    told.value = feasible ? (*objective)[0]
                          : ConstraintViolation(spec_, trial.final_metrics());
  } else {
    return;
  }
  for (int i : numeric_) {
    auto it = trial.params().find(space_.param(i).name());
    if (it == trial.params().end()) return;  // no point to tell
    told.x.push_back(space_.ToUnit(i, it->second));
  }
  const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(
      told.x.data(), static_cast<Eigen::Index>(told.x.size()));
  if (told.tier == 0) {
    // The model and the agreement look at the latest few hundred at most.
    const size_t keep = std::max<size_t>(
        4096, 2 * QuadraticModel::WantedPoints(cma_->n) + kAgreementWindow);
    if (assist_->archive.size() >= 2 * keep) {
      assist_->archive.erase(assist_->archive.begin(),
                             assist_->archive.end() - keep);
    }
    assist_->archive.push_back(
        {x, told.value,
         assist_->model ? assist_->model->Predict(x)
                        : std::numeric_limits<double>::quiet_NaN()});
  }
  if (trial.number() >= assist_->first_number) ++assist_->told;
  batch_.push_back(std::move(told));

  if (static_cast<int>(batch_.size()) < cma_->lambda) {
    // A model-assisted generation ends early once the model has ranked
    // well enough: the offspring ranked by the model update the
    // distribution, as if all had run.
    if (assist_->offspring.empty() || !RefitAndTrust()) return;
    std::vector<int> rank(assist_->offspring.size());
    std::iota(rank.begin(), rank.end(), 0);
    std::vector<double> predicted;
    for (const auto& o : assist_->offspring) {
      predicted.push_back(assist_->model->Predict(o));
    }
    std::stable_sort(rank.begin(), rank.end(),
                     [&](int a, int b) { return predicted[a] < predicted[b]; });
    std::vector<Eigen::VectorXd> ranked;
    for (int r : rank) ranked.push_back(assist_->offspring[r]);
    double best = kInf;
    for (const Told& t : batch_) {
      if (t.tier == 0) best = std::min(best, t.value);
    }
    ++assist_->trusted;
    Update(ranked, best);
    return;
  }
  std::stable_sort(batch_.begin(), batch_.end(),
                   [](const Told& a, const Told& b) {
                     if (a.tier != b.tier) return a.tier < b.tier;
                     return a.value < b.value;
                   });
  std::vector<Eigen::VectorXd> ranked;
  for (const Told& t : batch_) {
    ranked.push_back(Eigen::Map<const Eigen::VectorXd>(
        t.x.data(), static_cast<Eigen::Index>(t.x.size())));
  }
  Update(ranked, batch_[0].tier == 0 ? batch_[0].value : kInf);
}

void CmaEsSearcher::Update(const std::vector<Eigen::VectorXd>& ranked,
                           double best) {
  batch_.clear();
  cma_->Tell(ranked, best);
  if (cma_->Stalled() && restarts_ < options_.max_restarts) {
    Restart();
  } else {
    StartGeneration();
  }
}

bool CmaEsSearcher::RefitAndTrust() {
  Assist& a = *assist_;
  const int n = cma_->n;
  // The latest results: enough for the richest model twice over, and at
  // least two generations.
  const int want = std::max(QuadraticModel::WantedPoints(n), 2 * cma_->lambda);
  const int size = static_cast<int>(a.archive.size());
  std::vector<Eigen::VectorXd> points;
  std::vector<double> values;
  for (int i = std::max(0, size - want); i < size; ++i) {
    points.push_back(a.archive[i].x);
    values.push_back(a.archive[i].value);
  }
  // In the distribution's whitened coordinates.
  QuadraticModel::Frame frame{cma_->mean,
                              cma_->scale.cwiseInverse().asDiagonal() *
                                  cma_->basis.transpose() / cma_->sigma};
  a.model = QuadraticModel::Fit(points, values, std::move(frame));
  if (!a.model) return false;
  // The rest of the generation, best predicted first.
  const int fixed = std::min<int>(a.told, static_cast<int>(a.order.size()));
  std::stable_sort(a.order.begin() + fixed, a.order.end(), [&](int l, int r) {
    return a.model->Predict(a.offspring[l]) < a.model->Predict(a.offspring[r]);
  });
  for (const Told& t : batch_) {
    if (t.tier != 0) return false;
  }
  std::vector<double> predicted, actual;
  for (int i = size - 1;
       i >= 0 && static_cast<int>(predicted.size()) < kAgreementWindow; --i) {
    if (!std::isfinite(a.archive[i].predicted)) continue;
    predicted.push_back(a.archive[i].predicted);
    actual.push_back(a.archive[i].value);
  }
  if (static_cast<int>(predicted.size()) < kAgreementWindow) return false;
  return KendallTau(predicted, actual) >= kMinAgreement;
}

void CmaEsSearcher::StartGeneration() {
  Assist& a = *assist_;
  a.first_number = max_number_ + 1;
  a.told = 0;
  a.offspring.clear();
  a.order.clear();
  a.model.reset();
  const int n = cma_->n;
  if (!options_.surrogate || n > kMaxAssistedDimensions ||
      static_cast<int>(a.archive.size()) < 2 * n + 2) {
    return;
  }
  std::mt19937_64 rng =
      Stream(options_.seed, kGenerationStream, a.generations++);
  for (int i = 0; i < cma_->lambda; ++i) {
    a.offspring.push_back(cma_->Sample(rng));
    a.order.push_back(i);
  }
  RefitAndTrust();
}

void CmaEsSearcher::Restart() {
  ++restarts_;
  skip_through_ = max_number_;
  std::mt19937_64 rng =
      Stream(options_.seed, kRestartStream, static_cast<uint64_t>(restarts_));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Eigen::VectorXd start(cma_->n);
  for (int k = 0; k < cma_->n; ++k) start[k] = unit(rng);
  cma_->Start(std::min(2 * cma_->lambda, kMaxPopulation), start);
  assist_->archive.clear();
  StartGeneration();
}

}  // namespace dial::searchers
