// Search-space math: sampling, the unit-cube encoding that model-based
// searchers work in, and conditional activity. Immutable after Create, so
// safe to share between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/params.h"
#include "dial/v1/spec.pb.h"
#include "dial/v1/study.pb.h"
#include "google/protobuf/map.h"

namespace dial::searchers {

using Params = google::protobuf::Map<std::string, v1::ParamValue>;

class SearchSpace {
 public:
  // `spec` must have passed ValidateStudySpec. INVALID_ARGUMENT otherwise.
  static absl::StatusOr<SearchSpace> Create(const v1::StudySpec& spec);

  int size() const { return static_cast<int>(params_.size()); }
  const v1::ParameterSpec& param(int i) const { return params_[i]; }

  // Whether parameter i is active given the (earlier) values in `params`.
  bool IsActive(int i, const Params& params) const;

  // A configuration drawn uniformly (in each parameter's scale); inactive
  // parameters are left out.
  Params Sample(std::mt19937_64& rng) const;

  // Unit-interval coordinate of a value of parameter i and back. Floats and
  // ints map linearly (or in log space); ints and categories own equal-width
  // buckets, so FromUnit(ToUnit(v)) == v for every valid v.
  double ToUnit(int i, const v1::ParamValue& value) const;
  v1::ParamValue FromUnit(int i, double u) const;

  // One coordinate per parameter; NaN for inactive parameters.
  std::vector<double> Encode(const Params& params) const;
  // Inverse of Encode; inactive parameters (given earlier values) are
  // dropped whatever their coordinate.
  Params Decode(const std::vector<double>& unit) const;

  // Whether `value` is a valid value of parameter i (type and bounds).
  bool Contains(int i, const v1::ParamValue& value) const;

  // OK if `params` is a configuration of this space: every active
  // parameter with a valid value, no inactive or unknown one. Otherwise
  // INVALID_ARGUMENT naming the parameter, under `where`.
  absl::Status Check(const Params& params, const std::string& where) const;
  // `params` (of a compatible space) restricted to this one: the active
  // parameters' values, nullopt if one is missing or out of range.
  std::optional<Params> Project(const Params& params) const;

 private:
  explicit SearchSpace(std::vector<v1::ParameterSpec> params)
      : params_(std::move(params)) {}
  std::vector<v1::ParameterSpec> params_;
};

}  // namespace dial::searchers
