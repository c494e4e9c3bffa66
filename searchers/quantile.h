// Linear-interpolation quantile (numpy's default), shared by the searchers
// and trial schedulers. Thread-safe: a pure function.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace dial::searchers {

// q in [0, 1]; `values` must not be empty.
inline double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - lo) * (values[hi] - values[lo]);
}

}  // namespace dial::searchers
