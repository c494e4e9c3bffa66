// Searchers propose configurations. A searcher is driven by one study at a
// time from the scheduler core, which serialises calls per study; the
// implementations are not thread-safe on their own.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"
#include "searchers/space.h"

namespace dial::searchers {

class Searcher {
 public:
  virtual ~Searcher() = default;

  // Params for the trial numbered `number` (0-based; numbers arrive in
  // increasing order, also after a restart). `pending` holds the params of
  // trials suggested but not finished, so parallel suggestions can spread
  // out. OUT_OF_RANGE when the search space is exhausted (grid).
  virtual absl::StatusOr<Params> Suggest(
      int64_t number, const std::vector<Params>& pending) = 0;
  absl::StatusOr<Params> Suggest(int64_t number) { return Suggest(number, {}); }
  // False for searchers that ignore `pending`: the caller may pass none,
  // sparing a copy of every open trial's params per suggestion.
  virtual bool UsesPending() const { return true; }
  // A trial with `params` now exists (saved), whether this searcher
  // suggested them or they came from the study's queue.
  virtual void Made(const Params& params) {}

  // A trial reached a final state. Called in trial-finish order, and again
  // for every finished trial when a restarted scheduler rebuilds the
  // searcher, so model-based searchers rebuild their state from it.
  virtual void Observe(const v1::Trial& trial) {}

  // Warm start: a finished trial of an earlier study (params, final
  // metrics, state), given before any Observe, also after a restart.
  // Model-based searchers take it as a prior; others ignore it.
  virtual void ObservePrior(const v1::Trial& trial) {}

  // Model-based search under early stopping (ASHA, Hyperband): every
  // report of a running trial, in arrival order (a restart replays them
  // trial by trial, so state must not depend on their order across trials),
  // for searchers that fit on the highest rung with enough results, as BOHB
  // does, instead of on a mix of budgets. Only called if WantsReports().
  virtual bool WantsReports() const { return false; }
  virtual void ObserveReport(
      const v1::Trial& trial, int64_t step,
      const google::protobuf::Map<std::string, double>& metrics) {}
};

// The rung budgets of a study's ASHA or Hyperband scheduler (ascending),
// empty for other schedulers.
std::vector<int64_t> RungSteps(const v1::StudySpec& spec);

// Per-rung results for BOHB-style searchers: the first report at or past
// each rung, per trial, in arrival order.
template <typename Observation>
class RungResults {
 public:
  explicit RungResults(std::vector<int64_t> rungs)
      : rungs_(std::move(rungs)),
        results_(rungs_.size()),
        seen_(rungs_.size()) {}
  bool empty() const { return rungs_.empty(); }
  // Calls make() for each rung newly reached by `trial` at `step`.
  template <typename Make>
  void Add(int64_t trial, int64_t step, Make make) {
    for (size_t k = 0; k < rungs_.size() && rungs_[k] <= step; ++k) {
      if (seen_[k].insert(trial).second) results_[k].push_back(make());
    }
  }
  // The results of the highest rung holding at least `needed` of them.
  const std::vector<Observation>* Highest(size_t needed) const {
    for (size_t k = rungs_.size(); k-- > 0;) {
      if (results_[k].size() >= needed) return &results_[k];
    }
    return nullptr;
  }
  // Index of a result list (for caching fits per rung).
  int Level(const std::vector<Observation>* list) const {
    for (size_t k = 0; k < results_.size(); ++k) {
      if (&results_[k] == list) return static_cast<int>(k);
    }
    return -1;
  }

 private:
  std::vector<int64_t> rungs_;
  std::vector<std::vector<Observation>> results_;
  std::vector<std::set<int64_t>> seen_;
};

// Independent uniform draws. Trial n's params depend only on (seed, n), so
// the sequence is reproducible and survives restarts without saved state.
class RandomSearcher : public Searcher {
 public:
  static absl::StatusOr<std::unique_ptr<RandomSearcher>> Create(
      const v1::StudySpec& spec);
  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  bool UsesPending() const override { return false; }

 private:
  RandomSearcher(SearchSpace space, uint64_t seed)
      : space_(std::move(space)), seed_(seed) {}
  SearchSpace space_;
  uint64_t seed_;
};

// Cartesian product of per-parameter grids (floats: `grid_points` evenly
// spaced in their scale; ints: every value or `grid_points` of them;
// categorical and discrete: every value). Conditional parameters branch only
// where active, so no point repeats.
//
// Points are never materialised: point k is decoded from its index in
// mixed radix over the parameters' value lists (first parameter slowest),
// so a grid of 2^40 points costs memory in proportion to its parameters'
// value lists, not its points. A conditional parameter's values each open a
// branch; the branches are counted once at Create, within a work cap.
// `shuffle` maps trial numbers to grid indices through a seeded bijection
// (a Feistel network with cycle walking) instead of materialising a
// shuffled list.
class GridSearcher : public Searcher {
 public:
  // Sizes of a grid are counted up to this (2^62); a larger grid reports
  // this size and is visited (and shuffled) within its first kMaxSize
  // points.
  static constexpr int64_t kMaxSize = int64_t{1} << 62;
  // All parameters' value lists together hold at most this many values.
  static constexpr int64_t kMaxValues = 100000;
  // Conditional branches: parameters scanned over all branches, at most.
  static constexpr int64_t kMaxBranchWork = 1000000;

  // INVALID_ARGUMENT if `exhaustive` is set and the grid size differs from
  // max_trials, or if the value lists or conditional branches exceed the
  // caps above.
  static absl::StatusOr<std::unique_ptr<GridSearcher>> Create(
      const v1::StudySpec& spec);
  ~GridSearcher() override;
  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  bool UsesPending() const override { return false; }
  // The number of points, at most kMaxSize.
  int64_t grid_size() const;

  struct Grid;  // the value lists and the branch tree (searcher.cc)

 private:
  explicit GridSearcher(std::unique_ptr<const Grid> grid);
  std::unique_ptr<const Grid> grid_;
};

// A canonical text form of a configuration (names sorted; doubles to 9
// significant digits, other values as ParamValueToString): configurations
// with equal keys count as the same.
std::string ParamsKey(const Params& params);

// Makes any searcher suggest each configuration at most once. Every trial
// the searcher hears of (`pending`: open trials, whichever way they were
// made; observed trials in any state) is remembered; a suggestion equal to one
// of them is replaced by the first unseen of up to 64 seeded random draws (a
// function of the seed, the trial number and the draw), and failing that, in a
// finite space (no float parameters, int domains under 10,000 values), by the
// next unseen point of the space's full grid from a seeded start. A finite
// space whose every point was suggested is exhausted: OUT_OF_RANGE, which
// completes the study. What it remembers depends only on the trials, so a
// restarted scheduler (which replays them) suggests the same.
class UniqueSearcher : public Searcher {
 public:
  static absl::StatusOr<std::unique_ptr<UniqueSearcher>> Create(
      const v1::StudySpec& spec, std::unique_ptr<Searcher> inner);
  ~UniqueSearcher() override;
  using Searcher::Suggest;
  absl::StatusOr<Params> Suggest(int64_t number,
                                 const std::vector<Params>& pending) override;
  // Pending trials are needed once, to learn those made before it (a
  // restart, a rebuild); after that Made tells it of each new one, so only
  // an inner searcher that uses them needs them.
  bool UsesPending() const override {
    return !primed_ || inner_->UsesPending();
  }
  void Made(const Params& params) override { Remember(params); }
  void Observe(const v1::Trial& trial) override;
  void ObservePrior(const v1::Trial& trial) override {
    inner_->ObservePrior(trial);
  }
  bool WantsReports() const override { return inner_->WantsReports(); }
  void ObserveReport(
      const v1::Trial& trial, int64_t step,
      const google::protobuf::Map<std::string, double>& metrics) override;
  Searcher& inner() { return *inner_; }

 private:
  void Remember(const Params& params);
  UniqueSearcher(SearchSpace space, uint64_t seed,
                 std::unique_ptr<Searcher> inner,
                 std::unique_ptr<GridSearcher> grid);
  SearchSpace space_;
  uint64_t seed_;
  std::unique_ptr<Searcher> inner_;
  std::unique_ptr<GridSearcher> grid_;  // finite spaces only
  std::set<std::string> seen_;
  bool primed_ = false;  // given the pending trials once
};

// The seed of the study's searcher (whichever kind it is).
uint64_t SearcherSeed(const v1::StudySpec& spec);

// The searcher named by spec.searcher (defaults must be filled in), made by
// its registry entry (searchers/registry.h) after the entry's checks, and
// wrapped in a UniqueSearcher. UNIMPLEMENTED for a kind this build does not
// know.
absl::StatusOr<std::unique_ptr<Searcher>> CreateSearcher(
    const v1::StudySpec& spec);

}  // namespace dial::searchers
