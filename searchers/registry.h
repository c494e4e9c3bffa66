// The searcher registry: one entry per searcher kind (a case of the
// SearcherSpec oneof) with its name, the validation of its own settings,
// its defaults, its seed, and how to make it. A new searcher touches its
// own files, this registry and the proto; ValidateStudySpec (common/spec.h)
// keeps only what every study has in common. Thread-safe (constant).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec.h"
#include "dial/v1/spec.pb.h"
#include "searchers/searcher.h"

namespace dial::searchers {

struct SearcherKind {
  v1::SearcherSpec::KindCase kind;
  std::string_view name;  // as in specs: searcher: {<name>: {...}}
  // Whether an ask fits a model over the study's history (its cost grows
  // with the trials). The scheduler runs such asks on its suggestion pool
  // at a lower priority, and the others at once on the calling thread.
  bool fits_model;
  // INVALID_ARGUMENT naming the field, for its own settings; `spec` has
  // passed the common checks.
  absl::Status (*validate)(const v1::StudySpec& spec);
  // Fills its own defaults (null: none); the seed is filled for every kind
  // by FillSpecDefaults.
  void (*fill_defaults)(v1::SearcherSpec& searcher);
  uint64_t (*seed)(const v1::SearcherSpec& searcher);
  // The searcher itself (not yet wrapped in a UniqueSearcher).
  absl::StatusOr<std::unique_ptr<Searcher>> (*create)(
      const v1::StudySpec& spec);
};

// Every kind this build knows, in the proto's order.
const std::vector<SearcherKind>& SearcherKinds();
// The kind of `searcher` (random when none is set); null for a kind this
// build does not know.
const SearcherKind* FindSearcherKind(const v1::SearcherSpec& searcher);

// A study spec's whole validation: the common checks, then its searcher's.
absl::Status ValidateSpec(const v1::StudySpec& spec, const SpecLimits& limits);
absl::Status ValidateSpec(const v1::StudySpec& spec);
// The common defaults, then its searcher's (as the scheduler stores them).
void FillDefaults(uint64_t seed, v1::StudySpec& spec, const SpecLimits& limits);
void FillDefaults(uint64_t seed, v1::StudySpec& spec);

}  // namespace dial::searchers
