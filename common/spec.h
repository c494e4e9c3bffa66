// Study specs: parsing from YAML/JSON into dial.v1.StudySpec, validation with
// errors that name the field and the reason, and defaults filled in at study
// creation. Thread-safe: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dial/v1/spec.pb.h"

namespace dial {

// Parses YAML (or JSON, a subset of YAML) text. Unknown fields and values of
// the wrong type are INVALID_ARGUMENT with the field path, e.g.
// "search_space[1].float.mn: unknown field". Does not validate semantics.
absl::StatusOr<v1::StudySpec> ParseStudySpec(absl::string_view text);

// Reads and parses a spec file. NOT_FOUND if it cannot be read.
absl::StatusOr<v1::StudySpec> LoadStudySpecFile(const std::string& path);

// The size caps on a spec (docs/limits.md), so that a few bytes of request
// cannot buy unbounded memory or rows. The scheduler holds them in its
// Limits (scheduler/limits.h); these are the documented defaults. Caps
// apply to new input (CreateStudy, UpdateStudy), not to specs already
// stored, so lowering one never strands a study (see None()).
struct SpecLimits {
  // The spec's serialized (protobuf) size.
  size_t max_spec_bytes = 256 * 1024;
  // spec.labels: how many, each key (also bounded by YAML's 1024-character
  // implicit keys), each value, and all keys and values together.
  int max_labels = 64;
  size_t max_label_key_bytes = 128;
  size_t max_label_value_bytes = 1024;
  size_t max_label_bytes = 16 * 1024;
  // budget.max_parallel_trials: what 0 means (min(max_trials, this)) and
  // the most an explicit value may ask for. Each open trial of a
  // worker-run study is a row and a queue entry.
  int32_t default_parallel_trials = 16;
  int32_t max_parallel_trials = 1024;

  // No caps: the rules of docs/spec.md alone. For specs already stored,
  // which passed the caps in force when they were written.
  static SpecLimits None();
};

// Checks the rules of docs/spec.md and the caps of `limits` that every
// study has in common; a searcher's own settings are its registry entry's
// (searchers::ValidateSpec checks both). INVALID_ARGUMENT "<field>:
// <reason>".
absl::Status ValidateStudySpec(const v1::StudySpec& spec,
                               const SpecLimits& limits);
// With the default caps (SpecLimits{}).
absl::Status ValidateStudySpec(const v1::StudySpec& spec);

// Fills what the user may leave out (random searcher, FIFO scheduler,
// max_parallel_trials = min(max_trials, limits.default_parallel_trials))
// and replaces the searcher's seed 0 by `seed`, so the stored spec alone
// reproduces the study. The searcher's other defaults are its registry
// entry's (searchers::FillDefaults fills both).
void FillSpecDefaults(uint64_t seed, v1::StudySpec& spec,
                      const SpecLimits& limits);
// With the default limits (SpecLimits{}).
void FillSpecDefaults(uint64_t seed, v1::StudySpec& spec);

// A count of grid points: 0 (`zero` says what it means) or 2..10000;
// INVALID_ARGUMENT naming `field` otherwise.
absl::Status CheckGridPoints(const std::string& field, int32_t points,
                             const char* zero);

// Names of studies and parameters: 1-64 characters of [A-Za-z0-9._-],
// starting with a letter or digit. Safe as a path component.
absl::Status ValidateName(absl::string_view field, absl::string_view name);
// A worker label (dial-worker --label, a study's trial.resources.selector):
// keys of 1-63 letters, digits and . _ / - starting with a letter or digit;
// values of 1-128 printable characters. INVALID_ARGUMENT naming `field`.
absl::Status ValidateWorkerLabel(const std::string& field,
                                 absl::string_view key,
                                 absl::string_view value);

}  // namespace dial
