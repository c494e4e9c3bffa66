#include "searchers/searcher.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/params.h"
#include "common/random.h"
#include "common/status.h"
#include "searchers/registry.h"

namespace dial::searchers {
namespace {

std::vector<v1::ParamValue> GridValues(const SearchSpace& space, int i,
                                       int default_points) {
  const auto& p = space.param(i);
  std::vector<v1::ParamValue> values;
  auto spread = [&](int k) {
    for (int j = 0; j < k; ++j) {
      v1::ParamValue v = space.FromUnit(i, k == 1 ? 0.5 : double(j) / (k - 1));
      if (values.empty() ||
          ParamValueToString(values.back()) != ParamValueToString(v)) {
        values.push_back(v);
      }
    }
  };
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat:
      spread(p.float_().grid_points() ? p.float_().grid_points()
                                      : default_points);
      break;
    case v1::ParameterSpec::kInt: {
      int k = p.int_().grid_points() ? p.int_().grid_points() : default_points;
      const int64_t n = p.int_().max() - p.int_().min() + 1;
      if (n <= k) {
        for (int64_t v = p.int_().min(); v <= p.int_().max(); ++v) {
          values.emplace_back().set_int_value(v);
        }
      } else {
        // Endpoints exactly, the rest rounded from the (log) scale.
        const auto& r = p.int_();
        for (int j = 0; j < k; ++j) {
          double t = double(j) / (k - 1);
          double x = r.scale() == v1::LOG
                         ? std::exp(std::log(double(r.min())) +
                                    t * (std::log(double(r.max())) -
                                         std::log(double(r.min()))))
                         : r.min() + t * double(r.max() - r.min());
          int64_t v = std::clamp<int64_t>(std::llround(x), r.min(), r.max());
          if (values.empty() || values.back().int_value() != v) {
            values.emplace_back().set_int_value(v);
          }
        }
      }
      break;
    }
    case v1::ParameterSpec::kCategorical:
      for (const auto& s : p.categorical().values()) {
        values.emplace_back().set_string_value(s);
      }
      break;
    case v1::ParameterSpec::kDiscrete:
      for (double d : p.discrete().values()) {
        values.emplace_back().set_double_value(d);
      }
      break;
    default:
      break;
  }
  return values;
}

// Counts saturate at GridSearcher::kMaxSize (2^62), so a sum of two never
// overflows.
int64_t SatAdd(int64_t a, int64_t b) {
  return a > GridSearcher::kMaxSize - b ? GridSearcher::kMaxSize : a + b;
}

int64_t SatMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > GridSearcher::kMaxSize / b ? GridSearcher::kMaxSize : a * b;
}

// A seeded bijection of [0, n) that needs no memory per element: a
// balanced four-round Feistel network over the smallest even number of bits
// that covers n, with cycle walking (apply again until the result is below
// n). The domain is less than 4n, so a walk takes under four rounds on
// average; it ends because the cycle through x returns to x < n.
class IndexPermutation {
 public:
  IndexPermutation(int64_t n, uint64_t seed) : n_(static_cast<uint64_t>(n)) {
    int bits = 1;
    while ((uint64_t{1} << bits) < n_) ++bits;
    half_ = (bits + 1) / 2;
    for (int r = 0; r < kRounds; ++r) {
      keys_[r] = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(r)));
    }
  }

  int64_t operator()(int64_t x) const {
    uint64_t v = static_cast<uint64_t>(x);
    do {
      v = Encrypt(v);
    } while (v >= n_);
    return static_cast<int64_t>(v);
  }

 private:
  static constexpr int kRounds = 4;

  uint64_t Encrypt(uint64_t v) const {
    const uint64_t mask = (uint64_t{1} << half_) - 1;
    uint64_t left = v >> half_, right = v & mask;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t next = left ^ (SplitMix64(right ^ keys_[r]) & mask);
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }

  uint64_t n_;
  int half_ = 1;
  uint64_t keys_[kRounds] = {};
};

}  // namespace

absl::StatusOr<std::unique_ptr<RandomSearcher>> RandomSearcher::Create(
    const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  return std::unique_ptr<RandomSearcher>(
      new RandomSearcher(std::move(space), spec.searcher().random().seed()));
}

absl::StatusOr<Params> RandomSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  std::mt19937_64 rng(
      SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(number))));
  return space_.Sample(rng);
}

// The grid without its points. The parameters from a node on, up to the
// next active parameter that a condition names (its `branch`), are a plain
// mixed-radix number; each value of the branch parameter opens a child
// node, so only conditions make more than one node.
struct GridSearcher::Grid {
  struct Node {
    std::vector<int> radix;  // active parameters before `branch`, in order
    int branch = -1;         // -1: none, the node ends the point
    // Per value of `branch`: the points of its child and of those before.
    std::vector<int64_t> cumulative;
    std::vector<int32_t> children;
    int64_t size = 0;  // points of this node: product of radices x tail
    int64_t tail() const { return cumulative.empty() ? 1 : cumulative.back(); }
  };

  std::vector<std::string> names;
  std::vector<std::vector<v1::ParamValue>> values;
  std::vector<Node> nodes;  // nodes[0] is the root
  int64_t used = 0;         // min(size, max_trials)
  std::optional<IndexPermutation> shuffle;

  int64_t size() const { return nodes[0].size; }

  // The point at `index` (< size()) in lexicographic order. Digits are
  // taken from the least significant end, so saturated counts above the
  // index never enter the arithmetic: index < kMaxSize <= the true count.
  Params Point(int64_t index) const {
    Params params;
    int32_t id = 0;
    while (true) {
      const Node& node = nodes[id];
      const int64_t within = index % node.tail();
      int64_t rest = index / node.tail();
      for (auto it = node.radix.rbegin(); it != node.radix.rend(); ++it) {
        const auto& list = values[*it];
        const int64_t n = static_cast<int64_t>(list.size());
        params[names[*it]] = list[rest % n];
        rest /= n;
      }
      if (node.branch < 0) return params;
      const size_t c = std::upper_bound(node.cumulative.begin(),
                                        node.cumulative.end(), within) -
                       node.cumulative.begin();
      params[names[node.branch]] = values[node.branch][c];
      index = within - (c > 0 ? node.cumulative[c - 1] : 0);
      id = node.children[c];
    }
  }
};

namespace {

// Builds the branch nodes depth-first, counting the parameters it scans
// against kMaxBranchWork: conditions nested on many values could otherwise
// make exponentially many branches.
class BranchBuilder {
 public:
  BranchBuilder(const SearchSpace& space, const std::vector<bool>& is_parent,
                GridSearcher::Grid& grid)
      : space_(space), is_parent_(is_parent), grid_(grid) {}

  absl::StatusOr<int32_t> Build(int first, Params& params) {
    const auto id = static_cast<int32_t>(grid_.nodes.size());
    grid_.nodes.emplace_back();
    GridSearcher::Grid::Node node;
    int k = first;
    for (; k < space_.size(); ++k) {
      if (++work_ > GridSearcher::kMaxBranchWork) {
        return absl::InvalidArgumentError(absl::StrCat(
            "searcher.grid: the conditional parameters branch into too many "
            "combinations to count (more than ",
            GridSearcher::kMaxBranchWork,
            " parameter visits); put fewer values on the parameters that "
            "conditions name"));
      }
      if (!space_.IsActive(k, params)) continue;
      if (is_parent_[k]) break;
      node.radix.push_back(k);
    }
    int64_t tail = 1;
    if (k < space_.size()) {
      node.branch = k;
      tail = 0;
      const std::string& name = grid_.names[k];
      for (const auto& v : grid_.values[k]) {
        params[name] = v;
        DIAL_ASSIGN_OR_RETURN(const int32_t child, Build(k + 1, params));
        tail = SatAdd(tail, grid_.nodes[child].size);
        node.cumulative.push_back(tail);
        node.children.push_back(child);
      }
      params.erase(name);
    }
    node.size = tail;
    for (int r : node.radix) {
      node.size = SatMul(node.size, int64_t(grid_.values[r].size()));
    }
    grid_.nodes[id] = std::move(node);
    return id;
  }

 private:
  const SearchSpace& space_;
  const std::vector<bool>& is_parent_;
  GridSearcher::Grid& grid_;
  int64_t work_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GridSearcher>> GridSearcher::Create(
    const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  const auto& grid_spec = spec.searcher().grid();
  const int default_points =
      grid_spec.default_points() ? grid_spec.default_points() : 5;
  auto grid = std::make_unique<Grid>();
  std::vector<bool> is_parent(space.size(), false);
  int64_t listed = 0;
  for (int i = 0; i < space.size(); ++i) {
    grid->names.push_back(space.param(i).name());
    grid->values.push_back(GridValues(space, i, default_points));
    listed += static_cast<int64_t>(grid->values.back().size());
    if (listed > kMaxValues) {
      return absl::InvalidArgumentError(absl::StrCat(
          "searcher.grid: the parameters' grids hold more than ", kMaxValues,
          " values together; lower grid_points or default_points"));
    }
    for (const auto& [parent, unused] : space.param(i).when()) {
      for (int j = 0; j < i; ++j) {
        if (space.param(j).name() == parent) is_parent[j] = true;
      }
    }
  }
  Params scratch;
  DIAL_RETURN_IF_ERROR(
      BranchBuilder(space, is_parent, *grid).Build(0, scratch).status());
  const int64_t size = grid->size();
  const int64_t max_trials = spec.budget().max_trials();
  if (grid_spec.exhaustive() && size != max_trials) {
    const std::string size_text = size >= kMaxSize
                                      ? absl::StrCat("at least ", kMaxSize)
                                      : absl::StrCat(size);
    return absl::InvalidArgumentError(absl::StrCat(
        "searcher.grid.exhaustive: the grid has ", size_text,
        " points but budget.max_trials is ", max_trials,
        "; set max_trials to the grid size or change grid_points"));
  }
  grid->used = std::min(size, max_trials);
  if (grid_spec.shuffle() && size > 0) {
    grid->shuffle.emplace(size, grid_spec.seed());
  }
  return std::unique_ptr<GridSearcher>(new GridSearcher(std::move(grid)));
}

GridSearcher::GridSearcher(std::unique_ptr<const Grid> grid)
    : grid_(std::move(grid)) {}

GridSearcher::~GridSearcher() = default;

int64_t GridSearcher::grid_size() const { return grid_->size(); }

absl::StatusOr<Params> GridSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  if (number < 0 || number >= grid_->used) {
    return absl::OutOfRangeError(absl::StrCat(
        "grid exhausted: all ", grid_->used, " points were suggested"));
  }
  return grid_->Point(grid_->shuffle ? (*grid_->shuffle)(number) : number);
}

std::vector<int64_t> RungSteps(const v1::StudySpec& spec) {
  int64_t min_steps = 0, max_steps = 0;
  double eta = 0;
  if (spec.scheduler().has_asha()) {
    min_steps = spec.scheduler().asha().min_steps();
    max_steps = spec.scheduler().asha().max_steps();
    eta = spec.scheduler().asha().reduction_factor();
  } else if (spec.scheduler().has_hyperband()) {
    min_steps = spec.scheduler().hyperband().min_steps();
    max_steps = spec.scheduler().hyperband().max_steps();
    eta = spec.scheduler().hyperband().reduction_factor();
  }
  std::vector<int64_t> rungs;
  if (min_steps < 1 || !(eta > 1)) return rungs;
  for (double r = static_cast<double>(min_steps); r < max_steps; r *= eta) {
    rungs.push_back(static_cast<int64_t>(std::llround(r)));
  }
  return rungs;
}

std::string ParamsKey(const Params& params) {
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& [name, value] : params) {
    // Doubles to 9 significant digits: points that differ further down
    // are the same configuration to anyone training with them.
    items.emplace_back(name, value.has_double_value()
                                 ? absl::StrFormat("%.9g", value.double_value())
                                 : ParamValueToString(value));
  }
  std::sort(items.begin(), items.end());
  std::string key;
  for (const auto& [name, value] : items) {
    absl::StrAppend(&key, name.size(), ":", name, "=", value.size(), ":", value,
                    ";");
  }
  return key;
}

absl::StatusOr<std::unique_ptr<UniqueSearcher>> UniqueSearcher::Create(
    const v1::StudySpec& spec, std::unique_ptr<Searcher> inner) {
  DIAL_ASSIGN_OR_RETURN(SearchSpace space, SearchSpace::Create(spec));
  // A finite space small enough to walk: its full grid (every int, every
  // listed value), visited in order from a seeded start when random draws
  // keep hitting seen points.
  constexpr int64_t kMaxWalk = 1000000;  // the largest valid max_trials
  bool finite = true;
  for (int i = 0; i < space.size(); ++i) {
    const auto& p = space.param(i);
    if (p.has_float_() ||
        (p.has_int_() && p.int_().max() - p.int_().min() >= 10000)) {
      finite = false;
    }
  }
  std::unique_ptr<GridSearcher> grid;
  if (finite) {
    v1::StudySpec full = spec;
    // Every int of a domain narrower than this is listed (the largest
    // valid default_points).
    full.mutable_searcher()->mutable_grid()->set_default_points(10000);
    full.mutable_budget()->set_max_trials(static_cast<int32_t>(kMaxWalk));
    for (auto& p : *full.mutable_search_space()) {
      if (p.has_int_()) p.mutable_int_()->set_grid_points(0);
    }
    auto made = GridSearcher::Create(full);
    if (made.ok() && (*made)->grid_size() <= kMaxWalk) grid = *std::move(made);
  }
  return std::unique_ptr<UniqueSearcher>(new UniqueSearcher(
      std::move(space), SearcherSeed(spec), std::move(inner), std::move(grid)));
}

UniqueSearcher::UniqueSearcher(SearchSpace space, uint64_t seed,
                               std::unique_ptr<Searcher> inner,
                               std::unique_ptr<GridSearcher> grid)
    : space_(std::move(space)),
      seed_(seed),
      inner_(std::move(inner)),
      grid_(std::move(grid)) {}

UniqueSearcher::~UniqueSearcher() = default;

void UniqueSearcher::Remember(const Params& params) {
  seen_.insert(ParamsKey(params));
}

void UniqueSearcher::Observe(const v1::Trial& trial) {
  Remember(trial.params());
  inner_->Observe(trial);
}

void UniqueSearcher::ObserveReport(
    const v1::Trial& trial, int64_t step,
    const google::protobuf::Map<std::string, double>& metrics) {
  inner_->ObserveReport(trial, step, metrics);
}

absl::StatusOr<Params> UniqueSearcher::Suggest(
    int64_t number, const std::vector<Params>& pending) {
  for (const auto& p : pending) Remember(p);
  primed_ = true;
  if (grid_ && int64_t(seen_.size()) >= grid_->grid_size()) {
    return absl::OutOfRangeError(
        absl::StrCat("search space exhausted: all ", grid_->grid_size(),
                     " configurations were suggested"));
  }
  static const std::vector<Params> kNone;
  DIAL_ASSIGN_OR_RETURN(
      Params params,
      inner_->Suggest(number, inner_->UsesPending() ? pending : kNone));
  std::string key = ParamsKey(params);
  if (seen_.count(key)) {
    std::mt19937_64 rng(SplitMix64(seed_ ^ 0x5eed5eed5eedULL) ^
                        SplitMix64(static_cast<uint64_t>(number)));
    for (int draw = 0; draw < 64 && seen_.count(key); ++draw) {
      params = space_.Sample(rng);
      key = ParamsKey(params);
    }
    if (seen_.count(key) && grid_) {
      const int64_t size = grid_->grid_size();
      const int64_t start = static_cast<int64_t>(rng() % uint64_t(size));
      for (int64_t k = 0; k < size && seen_.count(key); ++k) {
        DIAL_ASSIGN_OR_RETURN(params, grid_->Suggest((start + k) % size));
        key = ParamsKey(params);
      }
    }
  }
  // Not remembered here: the caller may drop it (a study stopped
  // meanwhile). A trial made of it comes back through Made.
  return params;
}

uint64_t SearcherSeed(const v1::StudySpec& spec) {
  const SearcherKind* kind = FindSearcherKind(spec.searcher());
  return kind ? kind->seed(spec.searcher()) : 0;
}

absl::StatusOr<std::unique_ptr<Searcher>> CreateSearcher(
    const v1::StudySpec& spec) {
  const SearcherKind* kind = FindSearcherKind(spec.searcher());
  if (kind == nullptr) {
    return absl::UnimplementedError(
        "searcher: this scheduler does not know that kind of searcher");
  }
  DIAL_RETURN_IF_ERROR(kind->validate(spec));
  DIAL_ASSIGN_OR_RETURN(auto inner, kind->create(spec));
  // A grid visits each of its points once by construction.
  if (spec.searcher().has_grid()) return inner;
  DIAL_ASSIGN_OR_RETURN(auto unique,
                        UniqueSearcher::Create(spec, std::move(inner)));
  return std::unique_ptr<Searcher>(std::move(unique));
}

}  // namespace dial::searchers
