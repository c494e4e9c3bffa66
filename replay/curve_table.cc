#include "replay/curve_table.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dial::replay {
namespace {

bool ToDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

std::vector<std::string> Fields(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return absl::StrSplit(line, ',');
}

}  // namespace

absl::StatusOr<CurveTable> CurveTable::Load(const std::string& path) {
  // gzread reads a file that is not compressed as it is.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open table ", path));
  }
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(f, buffer, sizeof buffer)) > 0) text.append(buffer, n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", path, ": not a readable CSV or gzip file"));
  }
  auto table = Parse(text);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", path, ": ", table.status().message()));
  }
  return table;
}

absl::StatusOr<CurveTable> CurveTable::Parse(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return absl::InvalidArgumentError("empty: no header");
  const std::vector<std::string> header = Fields(lines[0]);
  auto column = [&](const std::string& name) -> int {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : int(it - header.begin());
  };
  const int id_col = column("config_id"), step_col = column("step"),
            elapsed_col = column("elapsed_s");
  if (id_col != 0 || step_col < 0 || elapsed_col < 0) {
    return absl::InvalidArgumentError(
        "header: the first column must be config_id, and step and elapsed_s "
        "must be columns (bench/curves/FORMAT.md)");
  }
  CurveTable t;
  for (int c = 1; c < step_col; ++c) t.params_.push_back(header[c]);
  for (int c = step_col + 1; c < int(header.size()); ++c) {
    if (c != elapsed_col) t.metrics_.push_back(header[c]);
  }
  if (t.metrics_.empty()) {
    return absl::InvalidArgumentError("header: no metric column after step");
  }
  // Parameters are numeric unless some value in their column is not.
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    rows.push_back(Fields(lines[i]));
    if (rows.back().size() != header.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", i + 1, ": ", rows.back().size(),
                       " fields, the header has ", header.size()));
    }
  }
  for (size_t p = 0; p < t.params_.size(); ++p) {
    Scale& s = t.scales_[t.params_[p]];
    double v;
    for (const auto& r : rows) s.numeric &= ToDouble(r[p + 1], &v);
  }
  std::map<int64_t, Config> by_id;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string where = absl::StrCat("line ", i + 2, ": ");
    int64_t id, step;
    if (!absl::SimpleAtoi(r[id_col], &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "config_id '", r[id_col], "' is not an integer"));
    }
    if (!absl::SimpleAtoi(r[step_col], &step) || step <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "step '", r[step_col], "' is not a positive integer"));
    }
    std::map<std::string, Value> params;
    for (size_t p = 0; p < t.params_.size(); ++p) {
      double v;
      if (t.scales_[t.params_[p]].numeric && ToDouble(r[p + 1], &v)) {
        params[t.params_[p]] = v;
      } else {
        params[t.params_[p]] = r[p + 1];
      }
    }
    CurvePoint point;
    point.step = step;
    if (!ToDouble(r[elapsed_col], &point.elapsed_s) || point.elapsed_s < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "elapsed_s '", r[elapsed_col], "' is not a number >= 0"));
    }
    for (int c = step_col + 1; c < int(header.size()); ++c) {
      if (c == elapsed_col) continue;
      double v;
      if (!ToDouble(r[c], &v)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, header[c], " '", r[c], "' is not a number"));
      }
      point.metrics[header[c]] = v;
    }
    auto [it, fresh] = by_id.try_emplace(id);
    Config& config = it->second;
    if (fresh) {
      config.id = id;
      config.params = std::move(params);
    } else if (config.params != params) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "config_id ", id,
                       " has other parameters than on its first "
                       "line"));
    }
    config.points.push_back(std::move(point));
  }
  for (auto& [id, config] : by_id) {
    auto& pts = config.points;
    std::sort(pts.begin(), pts.end(),
              [](const auto& a, const auto& b) { return a.step < b.step; });
    for (size_t i = 1; i < pts.size(); ++i) {
      if (pts[i].step == pts[i - 1].step) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config_id ", id, ": step ", pts[i].step, " appears twice"));
      }
    }
    t.configs_.push_back(std::move(config));
  }
  if (t.configs_.empty()) return absl::InvalidArgumentError("no rows");
  for (auto& [name, s] : t.scales_) {
    if (!s.numeric) continue;
    s.lo = std::numeric_limits<double>::infinity();
    s.hi = -s.lo;
    for (const auto& c : t.configs_) {
      const double v = std::get<double>(c.params.at(name));
      s.lo = std::min(s.lo, v);
      s.hi = std::max(s.hi, v);
    }
    s.log = s.lo > 0 && s.hi >= 10 * s.lo;
    if (s.log) {
      s.lo = std::log(s.lo);
      s.hi = std::log(s.hi);
    }
  }
  return t;
}

const Config* CurveTable::Find(int64_t id) const {
  auto it =
      std::lower_bound(configs_.begin(), configs_.end(), id,
                       [](const Config& c, int64_t v) { return c.id < v; });
  return it != configs_.end() && it->id == id ? &*it : nullptr;
}

absl::StatusOr<const Config*> CurveTable::Nearest(
    const std::map<std::string, Value>& params) const {
  for (const auto& [name, value] : params) {
    if (!scales_.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name,
                       "' is not a column of the table; its "
                       "parameters: ",
                       absl::StrJoin(params_, ", ")));
    }
    if (scales_.at(name).numeric && !std::holds_alternative<double>(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", name, "' is a number in the table, not a category"));
    }
  }
  const Config* best = nullptr;
  double best_d = std::numeric_limits<double>::infinity();
  for (const Config& c : configs_) {
    double d = 0;
    for (const auto& [name, value] : params) {
      const Scale& s = scales_.at(name);
      const Value& have = c.params.at(name);
      if (!s.numeric) {
        const std::string want = std::holds_alternative<std::string>(value)
                                     ? std::get<std::string>(value)
                                     : absl::StrCat(std::get<double>(value));
        d += std::get<std::string>(have) == want ? 0 : 1;
        continue;
      }
      auto scaled = [&s](double v) {
        if (s.log) v = std::log(std::max(v, 1e-300));
        return s.hi > s.lo ? (v - s.lo) / (s.hi - s.lo) : 0.0;
      };
      const double diff =
          scaled(std::get<double>(value)) - scaled(std::get<double>(have));
      d += diff * diff;
    }
    if (d < best_d) {
      best_d = d;
      best = &c;
    }
  }
  return best;
}

}  // namespace dial::replay
