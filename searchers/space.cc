#include "searchers/space.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/params.h"
#include "common/spec.h"

namespace dial::searchers {
namespace {

double Clamp01(double u) {
  if (!(u >= 0)) return 0;  // also NaN
  return u > 1 ? 1 : u;
}

// Bounds of the continuous coordinate behind an int parameter: each integer
// owns [v - 0.5, v + 0.5], in log space for LOG scale.
std::pair<double, double> IntBounds(const v1::IntRange& r) {
  double lo = static_cast<double>(r.min()) - 0.5;
  double hi = static_cast<double>(r.max()) + 0.5;
  if (r.scale() == v1::LOG) return {std::log(lo), std::log(hi)};
  return {lo, hi};
}

std::string ConditionString(const google::protobuf::Value& v) {
  if (v.kind_case() == google::protobuf::Value::kNumberValue) {
    v1::ParamValue p;
    p.set_double_value(v.number_value());
    return ParamValueToString(p);
  }
  if (v.kind_case() == google::protobuf::Value::kBoolValue) {
    return v.bool_value() ? "true" : "false";
  }
  return v.string_value();
}

}  // namespace

absl::StatusOr<SearchSpace> SearchSpace::Create(const v1::StudySpec& spec) {
  // The rules without the size caps: a stored spec passed the caps in
  // force when it was written, and a lower cap must not strand it.
  auto status = ValidateStudySpec(spec, SpecLimits::None());
  if (!status.ok()) return status;
  return SearchSpace(std::vector<v1::ParameterSpec>(spec.search_space().begin(),
                                                    spec.search_space().end()));
}

bool SearchSpace::IsActive(int i, const Params& params) const {
  for (const auto& [parent, allowed] : params_[i].when()) {
    auto it = params.find(parent);
    if (it == params.end()) return false;  // parent itself inactive
    const std::string value = ParamValueToString(it->second);
    bool match = false;
    for (const auto& v : allowed.values()) {
      if (ConditionString(v) == value) {
        match = true;
        break;
      }
    }
    if (!match) return false;
  }
  return true;
}

Params SearchSpace::Sample(std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Params params;
  for (int i = 0; i < size(); ++i) {
    // Draw even for inactive parameters so that one parameter's activity
    // does not shift the random stream of the others.
    double u = unit(rng);
    if (IsActive(i, params)) params[params_[i].name()] = FromUnit(i, u);
  }
  return params;
}

double SearchSpace::ToUnit(int i, const v1::ParamValue& value) const {
  const auto& p = params_[i];
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat: {
      const auto& f = p.float_();
      double x = value.double_value();
      if (f.scale() == v1::LOG) {
        return Clamp01((std::log(x) - std::log(f.min())) /
                       (std::log(f.max()) - std::log(f.min())));
      }
      return Clamp01((x - f.min()) / (f.max() - f.min()));
    }
    case v1::ParameterSpec::kInt: {
      auto [lo, hi] = IntBounds(p.int_());
      double x = static_cast<double>(value.int_value());
      if (p.int_().scale() == v1::LOG) x = std::log(x);
      return Clamp01((x - lo) / (hi - lo));
    }
    case v1::ParameterSpec::kCategorical: {
      const auto& values = p.categorical().values();
      int n = values.size();
      int idx = static_cast<int>(
          std::find(values.begin(), values.end(), value.string_value()) -
          values.begin());
      return (std::min(idx, n - 1) + 0.5) / n;
    }
    case v1::ParameterSpec::kDiscrete: {
      const auto& values = p.discrete().values();
      int n = values.size();
      int idx = static_cast<int>(
          std::find(values.begin(), values.end(), value.double_value()) -
          values.begin());
      return (std::min(idx, n - 1) + 0.5) / n;
    }
    default:
      return 0.5;
  }
}

v1::ParamValue SearchSpace::FromUnit(int i, double u) const {
  const auto& p = params_[i];
  u = Clamp01(u);
  v1::ParamValue out;
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat: {
      const auto& f = p.float_();
      double x;
      if (f.scale() == v1::LOG) {
        x = std::exp(std::log(f.min()) +
                     u * (std::log(f.max()) - std::log(f.min())));
      } else {
        x = f.min() + u * (f.max() - f.min());
      }
      out.set_double_value(std::clamp(x, f.min(), f.max()));
      break;
    }
    case v1::ParameterSpec::kInt: {
      auto [lo, hi] = IntBounds(p.int_());
      double x = lo + u * (hi - lo);
      if (p.int_().scale() == v1::LOG) x = std::exp(x);
      auto v = static_cast<int64_t>(std::llround(x));
      out.set_int_value(std::clamp(v, p.int_().min(), p.int_().max()));
      break;
    }
    case v1::ParameterSpec::kCategorical: {
      int n = p.categorical().values_size();
      int idx = std::min(static_cast<int>(u * n), n - 1);
      out.set_string_value(p.categorical().values(idx));
      break;
    }
    case v1::ParameterSpec::kDiscrete: {
      int n = p.discrete().values_size();
      int idx = std::min(static_cast<int>(u * n), n - 1);
      out.set_double_value(p.discrete().values(idx));
      break;
    }
    default:
      break;
  }
  return out;
}

std::vector<double> SearchSpace::Encode(const Params& params) const {
  std::vector<double> unit(size(), std::numeric_limits<double>::quiet_NaN());
  for (int i = 0; i < size(); ++i) {
    auto it = params.find(params_[i].name());
    if (it != params.end()) unit[i] = ToUnit(i, it->second);
  }
  return unit;
}

Params SearchSpace::Decode(const std::vector<double>& unit) const {
  Params params;
  for (int i = 0; i < size() && i < static_cast<int>(unit.size()); ++i) {
    if (IsActive(i, params)) params[params_[i].name()] = FromUnit(i, unit[i]);
  }
  return params;
}

bool SearchSpace::Contains(int i, const v1::ParamValue& value) const {
  const auto& p = params_[i];
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat:
      return value.has_double_value() &&
             value.double_value() >= p.float_().min() &&
             value.double_value() <= p.float_().max();
    case v1::ParameterSpec::kInt:
      return value.value_case() == v1::ParamValue::kIntValue &&
             value.int_value() >= p.int_().min() &&
             value.int_value() <= p.int_().max();
    case v1::ParameterSpec::kCategorical: {
      const auto& values = p.categorical().values();
      return value.has_string_value() &&
             std::find(values.begin(), values.end(), value.string_value()) !=
                 values.end();
    }
    case v1::ParameterSpec::kDiscrete: {
      const auto& values = p.discrete().values();
      return value.has_double_value() &&
             std::find(values.begin(), values.end(), value.double_value()) !=
                 values.end();
    }
    default:
      return false;
  }
}

absl::Status SearchSpace::Check(const Params& params,
                                const std::string& where) const {
  Params known;
  for (int i = 0; i < size(); ++i) {
    const std::string& name = params_[i].name();
    auto it = params.find(name);
    if (!IsActive(i, known)) {
      if (it != params.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".", name,
                         ": inactive here (see its `when`); leave it out"));
      }
      continue;
    }
    if (it == params.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", name, ": is required"));
    }
    if (!Contains(i, it->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".", name, ": '", ParamValueToString(it->second),
          "' is not a value of the parameter (wrong type or out of range)"));
    }
    known[name] = it->second;
  }
  for (const auto& [name, value] : params) {
    if (!known.count(name)) {
      bool listed = false;
      for (const auto& p : params_) listed |= p.name() == name;
      if (!listed) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".", name, ": no such parameter"));
      }
    }
  }
  return absl::OkStatus();
}

std::optional<Params> SearchSpace::Project(const Params& params) const {
  Params out;
  for (int i = 0; i < size(); ++i) {
    if (!IsActive(i, out)) continue;
    auto it = params.find(params_[i].name());
    if (it == params.end() || !Contains(i, it->second)) return std::nullopt;
    out[params_[i].name()] = it->second;
  }
  return out;
}

}  // namespace dial::searchers
