#include "searchers/registry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "searchers/bayesian_searcher.h"
#include "searchers/cmaes_searcher.h"
#include "searchers/nsga2_searcher.h"
#include "searchers/tpe_searcher.h"

namespace dial::searchers {
namespace {

absl::Status Invalid(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

absl::Status NothingToCheck(const v1::StudySpec&) { return absl::OkStatus(); }

template <typename S>
absl::StatusOr<std::unique_ptr<Searcher>> Make(const v1::StudySpec& spec) {
  DIAL_ASSIGN_OR_RETURN(auto s, S::Create(spec));
  return std::unique_ptr<Searcher>(std::move(s));
}

std::vector<SearcherKind> MakeKinds() {
  using K = v1::SearcherSpec;
  return {
      {K::kRandom, "random", false, NothingToCheck, nullptr,
       [](const K& s) { return s.random().seed(); }, Make<RandomSearcher>},
      {K::kGrid, "grid", false,
       [](const v1::StudySpec& spec) {
         return CheckGridPoints("searcher.grid.default_points",
                                spec.searcher().grid().default_points(),
                                "default 5");
       },
       [](K& s) {
         auto* grid = s.mutable_grid();
         if (grid->default_points() == 0) grid->set_default_points(5);
       },
       [](const K& s) { return s.grid().seed(); }, Make<GridSearcher>},
      {K::kBayesian, "bayesian", true,
       [](const v1::StudySpec& spec) {
         return spec.searcher().bayesian().initial_trials() < 0
                    ? Invalid("searcher.bayesian.initial_trials",
                              "must be >= 0")
                    : absl::OkStatus();
       },
       nullptr, [](const K& s) { return s.bayesian().seed(); },
       Make<BayesianSearcher>},
      {K::kTpe, "tpe", true,
       [](const v1::StudySpec& spec) {
         return spec.searcher().tpe().initial_trials() < 0
                    ? Invalid("searcher.tpe.initial_trials", "must be >= 0")
                    : absl::OkStatus();
       },
       nullptr, [](const K& s) { return s.tpe().seed(); }, Make<TpeSearcher>},
      {K::kNsga2, "nsga2", false, Nsga2Searcher::Validate, nullptr,
       [](const K& s) { return s.nsga2().seed(); }, Make<Nsga2Searcher>},
      {K::kCmaes, "cmaes", false, CmaEsSearcher::Validate, nullptr,
       [](const K& s) { return s.cmaes().seed(); }, Make<CmaEsSearcher>},
  };
}

}  // namespace

const std::vector<SearcherKind>& SearcherKinds() {
  static const std::vector<SearcherKind>* kinds =
      new std::vector<SearcherKind>(MakeKinds());
  return *kinds;
}

const SearcherKind* FindSearcherKind(const v1::SearcherSpec& searcher) {
  const auto kind = searcher.kind_case() == v1::SearcherSpec::KIND_NOT_SET
                        ? v1::SearcherSpec::kRandom
                        : searcher.kind_case();
  for (const SearcherKind& k : SearcherKinds()) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

absl::Status ValidateSpec(const v1::StudySpec& spec, const SpecLimits& limits) {
  DIAL_RETURN_IF_ERROR(ValidateStudySpec(spec, limits));
  const SearcherKind* kind = FindSearcherKind(spec.searcher());
  if (kind == nullptr) {
    return absl::UnimplementedError(
        "searcher: this scheduler does not know that kind of searcher");
  }
  return kind->validate(spec);
}

absl::Status ValidateSpec(const v1::StudySpec& spec) {
  return ValidateSpec(spec, SpecLimits{});
}

void FillDefaults(uint64_t seed, v1::StudySpec& spec,
                  const SpecLimits& limits) {
  FillSpecDefaults(seed, spec, limits);
  const SearcherKind* kind = FindSearcherKind(spec.searcher());
  if (kind != nullptr && kind->fill_defaults != nullptr) {
    kind->fill_defaults(*spec.mutable_searcher());
  }
}

void FillDefaults(uint64_t seed, v1::StudySpec& spec) {
  FillDefaults(seed, spec, SpecLimits{});
}

}  // namespace dial::searchers
