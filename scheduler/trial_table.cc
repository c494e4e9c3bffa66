#include "scheduler/trial_table.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "searchers/pareto.h"

namespace dial::scheduler {
namespace {

void Sep(std::string& s) {
  if (!s.empty()) s += ",";
}

}  // namespace

void AppendJsonNumber(double v, std::string& out) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

TrialTableBuilder::TrialTableBuilder(const v1::StudySpec& spec) : spec_(spec) {
  for (const auto& p : spec.search_space()) {
    names_.push_back(p.name());
    columns_.emplace_back();
  }
  if (searchers::IsMultiObjective(spec)) {
    objective_columns_.resize(spec.objectives_size());
  }
}

void TrialTableBuilder::Add(const v1::Trial& t) {
  Sep(number_);
  absl::StrAppend(&number_, t.number());
  Sep(state_);
  AppendJsonString(v1::TrialState_Name(t.state()), state_);
  Sep(value_);
  if (t.has_objective_value()) {
    AppendJsonNumber(t.objective_value(), value_);
  } else {
    value_ += "null";
  }
  Sep(last_step_);
  absl::StrAppend(&last_step_, t.last_step());
  for (size_t i = 0; i < names_.size(); ++i) {
    std::string& col = columns_[i];
    Sep(col);
    auto it = t.params().find(names_[i]);
    if (it == t.params().end()) {
      col += "null";
    } else if (it->second.has_string_value()) {
      AppendJsonString(it->second.string_value(), col);
    } else if (it->second.has_int_value()) {
      absl::StrAppend(&col, it->second.int_value());
    } else {
      AppendJsonNumber(it->second.double_value(), col);
    }
  }
  for (size_t k = 0; k < objective_columns_.size(); ++k) {
    std::string& col = objective_columns_[k];
    Sep(col);
    if (static_cast<int>(k) < t.objective_values_size()) {
      AppendJsonNumber(t.objective_values(static_cast<int>(k)), col);
    } else {
      col += "null";
    }
  }
  if (spec_.constraints_size() > 0) {
    Sep(feasible_);
    const bool finished =
        t.state() == v1::COMPLETED ||
        (t.state() == v1::STOPPED && !t.final_metrics().empty());
    feasible_ += !finished                                         ? "null"
                 : searchers::IsFeasible(spec_, t.final_metrics()) ? "true"
                                                                   : "false";
  }
}

std::string TrialTableBuilder::Finish() const {
  std::string out = "{\"params\": [";
  for (int i = 0; i < spec_.search_space_size(); ++i) {
    const auto& p = spec_.search_space(i);
    if (i) out += ", ";
    out += "{\"name\": ";
    AppendJsonString(p.name(), out);
    out += ", \"type\": ";
    AppendJsonString(p.has_categorical() ? "categorical"
                     : p.has_discrete()  ? "discrete"
                     : p.has_int_()      ? "int"
                                         : "float",
                     out);
    const bool log = (p.has_float_() && p.float_().scale() == v1::LOG) ||
                     (p.has_int_() && p.int_().scale() == v1::LOG);
    out += log ? ", \"log\": true}" : ", \"log\": false}";
  }
  absl::StrAppend(&out, "], \"number\": [", number_, "], \"state\": [", state_,
                  "], \"value\": [", value_, "], \"lastStep\": [", last_step_,
                  "], \"param\": {");
  for (size_t i = 0; i < names_.size(); ++i) {
    if (i) out += ", ";
    AppendJsonString(names_[i], out);
    absl::StrAppend(&out, ": [", columns_[i], "]");
  }
  out += "}";
  if (!objective_columns_.empty()) {
    out += ", \"objectives\": [";
    for (int k = 0; k < spec_.objectives_size(); ++k) {
      const auto& o = spec_.objectives(k);
      if (k) out += ", ";
      out += "{\"metric\": ";
      AppendJsonString(o.metric(), out);
      out += ", \"goal\": ";
      AppendJsonString(v1::Goal_Name(o.goal()), out);
      out += "}";
    }
    out += "], \"values\": {";
    for (size_t k = 0; k < objective_columns_.size(); ++k) {
      if (k) out += ", ";
      AppendJsonString(spec_.objectives(static_cast<int>(k)).metric(), out);
      absl::StrAppend(&out, ": [", objective_columns_[k], "]");
    }
    out += "}";
  }
  if (spec_.constraints_size() > 0) {
    absl::StrAppend(&out, ", \"feasible\": [", feasible_, "]");
  }
  out += "}\n";
  return out;
}

}  // namespace dial::scheduler
