// ValidateStudySpec and FillSpecDefaults: the rules of docs/spec.md that
// every study has in common (a searcher's own are in searchers/registry.h).
#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec.h"
#include "common/spec_validate_scheduler.h"
#include "common/status.h"
#include "common/trainer_knobs.h"

namespace dial {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Bounds that keep the searchers' and trial schedulers' work proportional
// to the spec: a few bytes of spec must not buy hours of CPU at CreateStudy.
// Int bounds: the searchers compute in doubles, exact up to 2^53.
constexpr int64_t kMaxIntMagnitude = int64_t{1} << 53;
// Grid values per parameter (grid_points, default_points).
constexpr int32_t kMaxGridPoints = 10000;
constexpr int kMaxObjectives = 4;
constexpr int kMaxConstraints = 16;
// Int domains up to this width list their values for checking conditions.
constexpr uint64_t kMaxListedInts = 10000;
// Keys of labels and environment variable names. Also keeps every key of a
// spec's JSON form under YAML's 1024-character limit on implicit keys, so
// that the JSON of any valid spec reads back as a spec.
constexpr size_t kMaxKeyLength = 128;

absl::Status Invalid(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

std::string Fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Renders a condition value as the parameter would: numbers without a
// trailing ".0", strings as they are.
std::string ConditionValue(const google::protobuf::Value& v) {
  if (v.kind_case() == google::protobuf::Value::kNumberValue) {
    return Fmt(v.number_value());
  }
  if (v.kind_case() == google::protobuf::Value::kBoolValue) {
    return v.bool_value() ? "true" : "false";
  }
  return v.string_value();
}

// Whether a condition on parameter `p` may name `value` (as ConditionValue
// renders it): for categorical, discrete and int domains of at most
// kMaxListedInts values; nullopt for continuous and wider int domains, whose
// condition values are not checked. `listed` caches p's values as strings
// across calls. Costs O(log n) per call once cached, whatever the domain
// size: a spec may hold many conditions.
std::optional<bool> IsValueOf(const v1::ParameterSpec& p,
                              const std::string& value,
                              std::set<std::string>& listed) {
  switch (p.domain_case()) {
    case v1::ParameterSpec::kCategorical:
      if (listed.empty()) {
        listed.insert(p.categorical().values().begin(),
                      p.categorical().values().end());
      }
      return listed.count(value) > 0;
    case v1::ParameterSpec::kDiscrete:
      if (listed.empty()) {
        for (double v : p.discrete().values()) listed.insert(Fmt(v));
      }
      return listed.count(value) > 0;
    case v1::ParameterSpec::kInt: {
      const auto& r = p.int_();
      // The width in unsigned arithmetic, which cannot overflow (min < max).
      if (static_cast<uint64_t>(r.max()) - static_cast<uint64_t>(r.min()) >
          kMaxListedInts) {
        return std::nullopt;
      }
      // One of std::to_string(min) ... std::to_string(max).
      int64_t v = 0;
      return absl::SimpleAtoi(value, &v) && std::to_string(v) == value &&
             v >= r.min() && v <= r.max();
    }
    default:
      return std::nullopt;
  }
}

// Environment variable names as Kubernetes accepts them: letters, digits,
// '_', '-' and '.', not starting with a digit.
absl::Status ValidateEnvName(const std::string& name) {
  const std::string field = "trial.command.env";
  if (name.empty() || name.size() > kMaxKeyLength) {
    return Invalid(
        field, absl::StrCat("names must be 1-", kMaxKeyLength, " characters"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok || (name[0] >= '0' && name[0] <= '9')) {
      return Invalid(field, "'" + absl::CHexEscape(name) +
                                "' is not a variable name: use letters, "
                                "digits, '_', '-' and '.', not starting with "
                                "a digit");
    }
  }
  return absl::OkStatus();
}

// Finding: large labels pushed GetStudy and ListStudies answers over
// gRPC's 64 MiB message limit. Keys also stay under YAML's 1024-character
// implicit keys, so the JSON of any valid spec reads back as a spec.
absl::Status ValidateLabels(const v1::StudySpec& spec,
                            const SpecLimits& limits) {
  if (spec.labels_size() > limits.max_labels) {
    return Invalid("labels", absl::StrCat("at most ", limits.max_labels,
                                          " labels, got ", spec.labels_size()));
  }
  const size_t max_key = std::min(limits.max_label_key_bytes, kMaxKeyLength);
  size_t total = 0;
  for (const auto& [key, value] : spec.labels()) {
    if (key.empty() || key.size() > max_key) {
      return Invalid("labels",
                     absl::StrCat("keys must be 1-", max_key, " characters"));
    }
    if (value.size() > limits.max_label_value_bytes) {
      return Invalid(
          "labels." + absl::CHexEscape(key),
          absl::StrCat("values must be at most ", limits.max_label_value_bytes,
                       " bytes, got ", value.size()));
    }
    total += key.size() + value.size();
  }
  if (total > limits.max_label_bytes) {
    return Invalid("labels",
                   absl::StrCat("keys and values must total at most ",
                                limits.max_label_bytes, " bytes, got ", total));
  }
  return absl::OkStatus();
}

absl::Status ValidateParameter(const v1::ParameterSpec& p,
                               const std::string& where) {
  DIAL_RETURN_IF_ERROR(ValidateName(where + ".name", p.name()));
  switch (p.domain_case()) {
    case v1::ParameterSpec::kFloat: {
      const auto& f = p.float_();
      if (!std::isfinite(f.min()) || !std::isfinite(f.max())) {
        return Invalid(where + ".float", "min and max must be finite");
      }
      if (f.min() >= f.max()) {
        return Invalid(where + ".float", "min (" + Fmt(f.min()) +
                                             ") must be less than max (" +
                                             Fmt(f.max()) + ")");
      }
      if (!v1::Scale_IsValid(f.scale())) {
        return Invalid(where + ".float.scale",
                       absl::StrCat("must be LINEAR or LOG, got ", f.scale()));
      }
      if (f.scale() == v1::LOG && f.min() <= 0) {
        return Invalid(where + ".float.min",
                       "must be > 0 with scale LOG, got " + Fmt(f.min()));
      }
      DIAL_RETURN_IF_ERROR(CheckGridPoints(where + ".float.grid_points",
                                           f.grid_points(), "default"));
      break;
    }
    case v1::ParameterSpec::kInt: {
      const auto& r = p.int_();
      if (r.min() >= r.max()) {
        return Invalid(where + ".int",
                       absl::StrCat("min (", r.min(),
                                    ") must be less than max (", r.max(), ")"));
      }
      if (!v1::Scale_IsValid(r.scale())) {
        return Invalid(where + ".int.scale",
                       absl::StrCat("must be LINEAR or LOG, got ", r.scale()));
      }
      if (r.scale() == v1::LOG && r.min() <= 0) {
        return Invalid(
            where + ".int.min",
            absl::StrCat("must be > 0 with scale LOG, got ", r.min()));
      }
      if (r.min() < -kMaxIntMagnitude || r.max() > kMaxIntMagnitude) {
        return Invalid(where + ".int",
                       absl::StrCat("min and max must be between -2^53 and "
                                    "2^53 (",
                                    kMaxIntMagnitude, ")"));
      }
      DIAL_RETURN_IF_ERROR(CheckGridPoints(where + ".int.grid_points",
                                           r.grid_points(), "default"));
      break;
    }
    case v1::ParameterSpec::kCategorical: {
      const auto& values = p.categorical().values();
      if (values.empty()) {
        return Invalid(where + ".categorical.values", "must not be empty");
      }
      std::set<std::string> seen;
      for (const auto& v : values) {
        if (v.empty()) {
          return Invalid(where + ".categorical.values",
                         "values must not be empty strings");
        }
        if (!seen.insert(v).second) {
          return Invalid(where + ".categorical.values",
                         "'" + v + "' is listed twice");
        }
      }
      break;
    }
    case v1::ParameterSpec::kDiscrete: {
      const auto& values = p.discrete().values();
      if (values.empty()) {
        return Invalid(where + ".discrete.values", "must not be empty");
      }
      std::set<double> seen;
      for (double v : values) {
        if (!std::isfinite(v)) {
          return Invalid(where + ".discrete.values",
                         "values must be finite numbers");
        }
        if (!seen.insert(v).second) {
          return Invalid(where + ".discrete.values",
                         Fmt(v) + " is listed twice");
        }
      }
      break;
    }
    case v1::ParameterSpec::DOMAIN_NOT_SET:
      return Invalid(where,
                     "one of float, int, categorical or discrete is "
                     "required");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGridPoints(const std::string& field, int32_t points,
                             const char* zero) {
  if (points < 0 || points == 1 || points > kMaxGridPoints) {
    return Invalid(field, absl::StrCat("must be 0 (", zero,
                                       ") or at least 2 (and at most ",
                                       kMaxGridPoints, "), got ", points));
  }
  return absl::OkStatus();
}

absl::Status ValidateName(absl::string_view field, absl::string_view name) {
  if (name.empty()) return Invalid(std::string(field), "is required");
  if (name.size() > 64) {
    return Invalid(std::string(field), "must be at most 64 characters");
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9');
  };
  if (!alnum(name[0])) {
    return Invalid(
        std::string(field),
        "'" + std::string(name) + "' must start with a letter or digit");
  }
  for (char c : name) {
    if (!alnum(c) && c != '_' && c != '-' && c != '.') {
      return Invalid(std::string(field),
                     "'" + std::string(name) +
                         "' may hold only letters, digits, '_', '-' and '.'");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateWorkerLabel(const std::string& field,
                                 absl::string_view key,
                                 absl::string_view value) {
  bool key_ok = !key.empty() && key.size() <= 63 &&
                absl::ascii_isalnum(static_cast<unsigned char>(key[0]));
  for (char c : key) {
    key_ok = key_ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                        c == '.' || c == '_' || c == '/' || c == '-');
  }
  if (!key_ok) {
    return Invalid(field, "'" + absl::CHexEscape(key) +
                              "' is not a label key (1-63 letters, digits, "
                              ". _ / -, starting with a letter or digit)");
  }
  bool value_ok = !value.empty() && value.size() <= 128;
  for (char c : value) {
    value_ok = value_ok && absl::ascii_isprint(static_cast<unsigned char>(c));
  }
  if (!value_ok) {
    return Invalid(field, "'" + absl::CHexEscape(value) +
                              "' is not a label value (1-128 printable "
                              "characters)");
  }
  return absl::OkStatus();
}

SpecLimits SpecLimits::None() {
  SpecLimits none;
  none.max_spec_bytes = std::numeric_limits<size_t>::max();
  none.max_labels = std::numeric_limits<int>::max();
  none.max_label_key_bytes = kMaxKeyLength;  // a rule, not a cap: see above
  none.max_label_value_bytes = std::numeric_limits<size_t>::max();
  none.max_label_bytes = std::numeric_limits<size_t>::max();
  none.max_parallel_trials = std::numeric_limits<int32_t>::max();
  return none;
}

absl::Status ValidateStudySpec(const v1::StudySpec& spec) {
  return ValidateStudySpec(spec, SpecLimits{});
}

namespace {

// One objective, or several with distinct metrics.
absl::Status ValidateObjectives(const v1::StudySpec& spec) {
  auto check_objective = [](const v1::Objective& o,
                            const std::string& where) -> absl::Status {
    if (o.metric().empty()) return Invalid(where + ".metric", "is required");
    if (o.goal() == v1::GOAL_UNSPECIFIED) {
      return Invalid(where + ".goal", "is required: MAXIMIZE or MINIMIZE");
    }
    // gRPC clients can send enum numbers that have no name.
    if (!v1::Goal_IsValid(o.goal())) {
      return Invalid(
          where + ".goal",
          absl::StrCat("must be MAXIMIZE or MINIMIZE, got ", o.goal()));
    }
    if (o.has_reference() && !std::isfinite(o.reference())) {
      return Invalid(where + ".reference", "must be finite");
    }
    return absl::OkStatus();
  };
  if (spec.objectives().empty()) {
    DIAL_RETURN_IF_ERROR(check_objective(spec.objective(), "objective"));
  } else {
    if (spec.objectives_size() > kMaxObjectives) {
      return Invalid("objectives",
                     absl::StrCat("at most ", kMaxObjectives, ", got ",
                                  spec.objectives_size()));
    }
    std::set<std::string> metrics;
    for (int i = 0; i < spec.objectives_size(); ++i) {
      const std::string where = absl::StrCat("objectives[", i, "]");
      DIAL_RETURN_IF_ERROR(check_objective(spec.objectives(i), where));
      if (!metrics.insert(spec.objectives(i).metric()).second) {
        return Invalid(where + ".metric", "'" + spec.objectives(i).metric() +
                                              "' is already an objective");
      }
    }
    // Stored specs hold the first objective in `objective` too.
    if (spec.has_objective() &&
        (spec.objective().metric() != spec.objectives(0).metric() ||
         spec.objective().goal() != spec.objectives(0).goal())) {
      return Invalid("objective",
                     "give either objective or objectives, not both");
    }
  }
  return absl::OkStatus();
}

// Warm start: at most 16 earlier studies, never itself.
absl::Status ValidateWarmStart(const v1::StudySpec& spec) {
  const auto& ws = spec.warm_start();
  if (ws.studies_size() > 16) {
    return Invalid("warm_start.studies", "at most 16 studies");
  }
  for (int i = 0; i < ws.studies_size(); ++i) {
    DIAL_RETURN_IF_ERROR(ValidateName(
        absl::StrCat("warm_start.studies[", i, "]"), ws.studies(i)));
    if (ws.studies(i) == spec.name()) {
      return Invalid(absl::StrCat("warm_start.studies[", i, "]"),
                     "a study cannot start from itself");
    }
  }
  if (ws.top_k() < -1 || ws.top_k() > 1000) {
    return Invalid("warm_start.top_k",
                   "must be between -1 (none) and 1000 (0: 5)");
  }
  return absl::OkStatus();
}

// Outcome constraints: a metric and finite bounds.
absl::Status ValidateConstraints(const v1::StudySpec& spec) {
  if (spec.constraints_size() > kMaxConstraints) {
    return Invalid("constraints",
                   absl::StrCat("at most ", kMaxConstraints, ", got ",
                                spec.constraints_size()));
  }
  for (int i = 0; i < spec.constraints_size(); ++i) {
    const auto& c = spec.constraints(i);
    const std::string where = absl::StrCat("constraints[", i, "]");
    if (c.metric().empty()) return Invalid(where + ".metric", "is required");
    if (!c.has_max() && !c.has_min()) {
      return Invalid(where, "needs max, min or both");
    }
    if ((c.has_max() && !std::isfinite(c.max())) ||
        (c.has_min() && !std::isfinite(c.min()))) {
      return Invalid(where, "bounds must be finite");
    }
    if (c.has_max() && c.has_min() && c.min() > c.max()) {
      return Invalid(where + ".min", "must not be above max");
    }
  }
  return absl::OkStatus();
}

// Parameters, and conditions on parameters listed earlier.
absl::Status ValidateSearchSpace(const v1::StudySpec& spec) {
  if (spec.search_space().empty()) {
    return Invalid("search_space", "must hold at least one parameter");
  }
  std::map<std::string, int> index;
  std::map<int, std::set<std::string>> listed;  // for IsValueOf
  for (int i = 0; i < spec.search_space_size(); ++i) {
    const auto& p = spec.search_space(i);
    const std::string where = absl::StrCat("search_space[", i, "]");
    DIAL_RETURN_IF_ERROR(ValidateParameter(p, where));
    if (index.count(p.name())) {
      return Invalid(where + ".name", absl::StrCat("'", p.name(),
                                                   "' is already used by "
                                                   "search_space[",
                                                   index[p.name()], "]"));
    }
    // Conditions may name only parameters listed earlier, which rules out
    // cycles and lets activity be decided in list order.
    for (const auto& [parent, values] : p.when()) {
      const std::string cond = where + ".when." + parent;
      auto it = index.find(parent);
      if (it == index.end()) {
        bool later = false;
        for (const auto& q : spec.search_space()) later |= q.name() == parent;
        return Invalid(cond, later ? "'" + parent +
                                         "' must be listed before the "
                                         "parameters that depend on it"
                                   : "no parameter named '" + parent + "'");
      }
      if (values.values().empty()) {
        return Invalid(cond, "must list at least one value");
      }
      const auto& parent_spec = spec.search_space(it->second);
      for (const auto& v : values.values()) {
        const std::string value = ConditionValue(v);
        const std::optional<bool> known =
            IsValueOf(parent_spec, value, listed[it->second]);
        if (known.has_value() && !*known) {
          return Invalid(cond, "'" + value + "' is not a value of " + parent);
        }
      }
    }
    index[p.name()] = i;
  }
  return absl::OkStatus();
}

// The budget, within the scheduler's caps.
absl::Status ValidateBudget(const v1::StudySpec& spec,
                            const SpecLimits& limits) {
  const auto& budget = spec.budget();
  if (budget.max_trials() < 1 || budget.max_trials() > 1000000) {
    return Invalid("budget.max_trials",
                   absl::StrCat("must be between 1 and 1000000, got ",
                                budget.max_trials()));
  }
  if (budget.max_parallel_trials() < 0 ||
      budget.max_parallel_trials() > budget.max_trials()) {
    return Invalid("budget.max_parallel_trials",
                   absl::StrCat("must be between 0 (= min(max_trials, ",
                                limits.default_parallel_trials,
                                ")) and max_trials (", budget.max_trials(),
                                "), got ", budget.max_parallel_trials()));
  }
  // Finding: a 58-byte spec with max_trials 10^6 and no
  // max_parallel_trials made 700k PENDING rows; 0 no longer means
  // max_trials, and an explicit value is capped.
  if (budget.max_parallel_trials() > limits.max_parallel_trials) {
    return Invalid("budget.max_parallel_trials",
                   absl::StrCat("must be at most ", limits.max_parallel_trials,
                                " (the scheduler's limit), got ",
                                budget.max_parallel_trials()));
  }
  if (budget.max_failures_per_trial() < 0 ||
      budget.max_failures_per_trial() > 100) {
    return Invalid("budget.max_failures_per_trial",
                   absl::StrCat("must be between 0 and 100, got ",
                                budget.max_failures_per_trial()));
  }
  return absl::OkStatus();
}

// What runs a trial: trainer knobs, a command, resources; checkpoints.
// trial.resources.selector: at most 16 keys, each with 1-64 values.
absl::Status ValidateSelector(const v1::TrialResources& resources) {
  const std::string where = "trial.resources.selector";
  if (resources.selector_size() > 16) {
    return Invalid(where, absl::StrCat("at most 16 keys, got ",
                                       resources.selector_size()));
  }
  for (const auto& [key, list] : resources.selector()) {
    const std::string field = where + "." + absl::CHexEscape(key);
    DIAL_RETURN_IF_ERROR(ValidateWorkerLabel(field, key, "x"));
    if (list.values_size() < 1 || list.values_size() > 64) {
      return Invalid(field, "must list 1-64 allowed values");
    }
    for (int i = 0; i < list.values_size(); ++i) {
      const std::string at = absl::StrCat(field, "[", i, "]");
      if (list.values(i).kind_case() != google::protobuf::Value::kStringValue) {
        return Invalid(at, "must be a string (quote numbers: \"1\")");
      }
      DIAL_RETURN_IF_ERROR(
          ValidateWorkerLabel(at, key, list.values(i).string_value()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTrial(const v1::StudySpec& spec) {
  const auto& sched = spec.scheduler();
  const auto& trial = spec.trial();
  if (trial.has_trainer()) {
    for (const auto& [name, value] : trial.trainer().fields()) {
      DIAL_RETURN_IF_ERROR(CheckKnob("trial.trainer." + name, name, value));
    }
    // Tuned parameters override knobs of the same name: every value the
    // domain can take must be a valid knob value.
    for (int i = 0; i < spec.search_space_size(); ++i) {
      const auto& p = spec.search_space(i);
      const std::string where = absl::StrCat("search_space[", i, "]");
      if (p.has_float_()) {
        for (const Knob& k : TrainerKnobs()) {
          if (p.name() == k.name && k.type == KnobType::kInt) {
            return Invalid(where, "'" + p.name() +
                                      "' is an integer knob: use an int or "
                                      "discrete domain");
          }
        }
      }
      std::vector<google::protobuf::Value> values;
      auto number = [&](double v) {
        values.emplace_back().set_number_value(v);
      };
      switch (p.domain_case()) {
        case v1::ParameterSpec::kFloat:
          number(p.float_().min());
          number(p.float_().max());
          break;
        case v1::ParameterSpec::kInt:
          number(static_cast<double>(p.int_().min()));
          number(static_cast<double>(p.int_().max()));
          break;
        case v1::ParameterSpec::kDiscrete:
          for (double v : p.discrete().values()) number(v);
          break;
        case v1::ParameterSpec::kCategorical:
          for (const auto& v : p.categorical().values()) {
            values.emplace_back().set_string_value(v);
          }
          break;
        default:
          break;
      }
      for (const auto& v : values) {
        DIAL_RETURN_IF_ERROR(CheckKnob(where, p.name(), v));
      }
    }
  }
  const bool pauses =
      (sched.has_asha() && sched.asha().promotion()) ||
      (sched.has_hyperband() && sched.hyperband().synchronous());
  if (pauses && trial.run_case() == v1::TrialTemplate::RUN_NOT_SET) {
    return Invalid(sched.has_asha() ? "scheduler.asha.promotion"
                                    : "scheduler.hyperband.synchronous",
                   "pauses and resumes trials, which needs worker-run trials "
                   "(trial.trainer or trial.command); use the stopping "
                   "variant for ask/tell studies");
  }
  if (spec.checkpoints().keep_best() < -1) {
    return Invalid("checkpoints.keep_best",
                   "must be -1 (keep all), 0 (default 2) or more");
  }
  if (trial.has_trainer() && sched.has_pbt()) {
    for (int i = 0; i < spec.search_space_size(); ++i) {
      const std::string& name = spec.search_space(i).name();
      if (name != "lr" && name != "momentum" && name != "weight_decay") {
        return Invalid(absl::StrCat("search_space[", i, "]"),
                       "'" + name +
                           "' cannot change in a running trial; with "
                           "scheduler.pbt tune lr, momentum and weight_decay");
      }
    }
  }
  if (trial.has_command() && trial.command().argv().empty()) {
    return Invalid("trial.command.argv", "must name the program to run");
  }
  // What the worker hands to execve: no NUL inside a C string, and names
  // that cannot be misread as NAME=VALUE.
  for (int i = 0; i < trial.command().argv_size(); ++i) {
    if (trial.command().argv(i).find('\0') != std::string::npos) {
      return Invalid(absl::StrCat("trial.command.argv[", i, "]"),
                     "must not contain a NUL character");
    }
  }
  for (const auto& [name, value] : trial.command().env()) {
    DIAL_RETURN_IF_ERROR(ValidateEnvName(name));
    if (value.find('\0') != std::string::npos) {
      return Invalid("trial.command.env." + name,
                     "must not contain a NUL character");
    }
  }
  if (trial.resources().gpus() < 0 || trial.resources().gpus() > 64) {
    return Invalid("trial.resources.gpus", "must be between 0 and 64");
  }
  if (trial.timeout_s() < 0) {
    return Invalid("trial.timeout_s", "must be >= 0 (0: no limit)");
  }
  if (trial.resources().cpus() < 0) {
    return Invalid("trial.resources.cpus", "must be >= 0");
  }
  return ValidateSelector(trial.resources());
}

}  // namespace

absl::Status ValidateStudySpec(const v1::StudySpec& spec,
                               const SpecLimits& limits) {
  // First, before any work in proportion to the spec. Finding: a 1 MB spec
  // was copied into every event of every watcher.
  const size_t bytes = spec.ByteSizeLong();
  if (bytes > limits.max_spec_bytes) {
    return Invalid("spec",
                   absl::StrCat("must be at most ", limits.max_spec_bytes,
                                " bytes (serialized), got ", bytes));
  }
  DIAL_RETURN_IF_ERROR(ValidateName("name", spec.name()));
  if (spec.priority() < -100 || spec.priority() > 100) {
    return Invalid(
        "priority",
        absl::StrCat("must be between -100 and 100, got ", spec.priority()));
  }
  DIAL_RETURN_IF_ERROR(ValidateObjectives(spec));
  DIAL_RETURN_IF_ERROR(ValidateWarmStart(spec));
  DIAL_RETURN_IF_ERROR(ValidateConstraints(spec));
  DIAL_RETURN_IF_ERROR(ValidateSearchSpace(spec));
  DIAL_RETURN_IF_ERROR(ValidateLabels(spec, limits));
  DIAL_RETURN_IF_ERROR(ValidateBudget(spec, limits));
  // The searcher's own settings are its registry entry's to check
  // (searchers/registry.h).
  DIAL_RETURN_IF_ERROR(ValidateScheduler(spec));
  return ValidateTrial(spec);
}

void FillSpecDefaults(uint64_t seed, v1::StudySpec& spec) {
  FillSpecDefaults(seed, spec, SpecLimits{});
}

void FillSpecDefaults(uint64_t seed, v1::StudySpec& spec,
                      const SpecLimits& limits) {
  auto* searcher = spec.mutable_searcher();
  if (searcher->kind_case() == v1::SearcherSpec::KIND_NOT_SET) {
    searcher->mutable_random();
  }
  // Every kind's settings have a seed: 0 becomes `seed`. The kind's other
  // defaults are its registry entry's (searchers/registry.h).
  const google::protobuf::OneofDescriptor* kind =
      searcher->GetDescriptor()->FindOneofByName("kind");
  const google::protobuf::Reflection* reflection = searcher->GetReflection();
  if (const FieldDescriptor* set =
          reflection->GetOneofFieldDescriptor(*searcher, kind)) {
    google::protobuf::Message* settings =
        reflection->MutableMessage(searcher, set);
    const FieldDescriptor* field =
        settings->GetDescriptor()->FindFieldByName("seed");
    if (field != nullptr &&
        field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64 &&
        settings->GetReflection()->GetUInt64(*settings, field) == 0) {
      settings->GetReflection()->SetUInt64(settings, field, seed);
    }
  }
  // One objective lives in `objective`; several in `objectives`, with the
  // first also in `objective` (what single-objective code reads).
  if (spec.objectives_size() == 1) {
    *spec.mutable_objective() = spec.objectives(0);
    spec.clear_objectives();
  } else if (spec.objectives_size() > 1) {
    *spec.mutable_objective() = spec.objectives(0);
  }
  if (spec.scheduler().kind_case() == v1::SchedulerSpec::KIND_NOT_SET) {
    spec.mutable_scheduler()->mutable_fifo();
  }
  if (spec.budget().max_parallel_trials() == 0) {
    spec.mutable_budget()->set_max_parallel_trials(std::max(
        1,
        std::min(spec.budget().max_trials(), limits.default_parallel_trials)));
  }
}

}  // namespace dial
