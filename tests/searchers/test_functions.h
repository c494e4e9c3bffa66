// Objectives shared by the searcher tests.
#pragma once

#include <cmath>
#include <string>

#include "searchers/space.h"

namespace dial::searchers {

// An ellipsoid of the given condition in x0..x3, its axes rotated 45
// degrees in the (x0, x1) and (x2, x3) planes, its minimum (0) off the
// centre, at x = (0.5, 0.75, 1, 1.25): a valley diagonal to the axes.
inline double RotatedEllipsoid(const Params& p, double condition) {
  double x[4];
  for (int i = 0; i < 4; ++i) {
    x[i] = p.at("x" + std::to_string(i)).double_value() - 0.5 - 0.25 * i;
  }
  const double r = std::sqrt(0.5);
  const double y[4] = {r * (x[0] + x[1]), r * (x[0] - x[1]), r * (x[2] + x[3]),
                       r * (x[2] - x[3])};
  double s = 0;
  for (int i = 0; i < 4; ++i) s += std::pow(condition, i / 3.0) * y[i] * y[i];
  return s;
}

}  // namespace dial::searchers
