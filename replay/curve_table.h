#ifndef DIAL_REPLAY_CURVE_TABLE_H_
#define DIAL_REPLAY_CURVE_TABLE_H_

// A table of recorded learning curves (bench/curves/FORMAT.md): one row per
// evaluation of a configuration. Columns: config_id, the parameters, step,
// the metrics, elapsed_s.

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace dial::replay {

// A parameter value as the table holds it: a number or a category.
using Value = std::variant<double, std::string>;

struct CurvePoint {
  int64_t step = 0;
  double elapsed_s = 0;  // seconds from the configuration's start
  std::map<std::string, double> metrics;
};

struct Config {
  int64_t id = 0;
  std::map<std::string, Value> params;
  std::vector<CurvePoint> points;  // steps rising
};

class CurveTable {
 public:
  // Reads a CSV table, gzip-compressed or not. INVALID_ARGUMENT names the
  // line and the column of anything malformed.
  static absl::StatusOr<CurveTable> Load(const std::string& path);
  static absl::StatusOr<CurveTable> Parse(const std::string& text);

  const std::vector<Config>& configs() const { return configs_; }
  const std::vector<std::string>& param_names() const { return params_; }
  const std::vector<std::string>& metric_names() const { return metrics_; }
  const Config* Find(int64_t id) const;

  // The recorded configuration nearest to `params`: each numeric parameter
  // is scaled to [0, 1] over the table's range (on a log scale when all its
  // values are positive and span at least a factor of 10), a categorical
  // one counts 0 when equal and 1 otherwise; the smallest Euclidean distance
  // wins, ties going to the lowest config_id. Parameters the table does not
  // have are an error; table parameters missing from `params` are ignored.
  absl::StatusOr<const Config*> Nearest(
      const std::map<std::string, Value>& params) const;

 private:
  struct Scale {
    bool numeric = true;
    bool log = false;
    double lo = 0, hi = 0;
  };
  std::vector<std::string> params_, metrics_;
  std::vector<Config> configs_;
  std::map<std::string, Scale> scales_;
};

}  // namespace dial::replay

#endif  // DIAL_REPLAY_CURVE_TABLE_H_
