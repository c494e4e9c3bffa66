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

// Checks the rules of docs/spec.md. INVALID_ARGUMENT "<field>: <reason>".
absl::Status ValidateStudySpec(const v1::StudySpec& spec);

// Fills what the user may leave out (random searcher, FIFO scheduler,
// max_parallel_trials = max_trials) and replaces seed 0 by `seed`, so the
// stored spec alone reproduces the study.
void FillSpecDefaults(uint64_t seed, v1::StudySpec& spec);

// Names of studies and parameters: 1-64 characters of [A-Za-z0-9._-],
// starting with a letter or digit. Safe as a path component.
absl::Status ValidateName(absl::string_view field, absl::string_view name);

}  // namespace dial
