// Benchmark functions for the searcher comparison (minimised). The same
// definitions are in optuna_bench.py.
#pragma once

#include <cmath>
#include <string>

#include "searchers/space.h"

namespace dial::bench {

struct Function {
  const char* name;
  const char* space_yaml;  // search_space entries
  double optimum;
  double (*f)(const searchers::Params&);
};

inline double X(const searchers::Params& p, const std::string& k) {
  const auto& v = p.at(k);
  return v.has_double_value() ? v.double_value() : double(v.int_value());
}

inline double Branin(const searchers::Params& p) {
  const double x1 = X(p, "x1"), x2 = X(p, "x2");
  const double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
  return std::pow(x2 - b * x1 * x1 + c * x1 - 6, 2) +
         10 * (1 - t) * std::cos(x1) + 10;
}

inline double Hartmann6(const searchers::Params& p) {
  static const double a[4] = {1.0, 1.2, 3.0, 3.2};
  static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                 {0.05, 10, 17, 0.1, 8, 14},
                                 {3, 3.5, 1.7, 10, 17, 8},
                                 {17, 8, 0.05, 10, 0.1, 14}};
  static const double P[4][6] = {
      {0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
      {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
      {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
      {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) {
      const double x = X(p, "x" + std::to_string(j));
      inner += A[i][j] * (x - P[i][j]) * (x - P[i][j]);
    }
    sum += a[i] * std::exp(-inner);
  }
  return -sum;
}

inline double Rosenbrock4(const searchers::Params& p) {
  double s = 0;
  for (int i = 0; i < 3; ++i) {
    const double x = X(p, "x" + std::to_string(i));
    const double y = X(p, "x" + std::to_string(i + 1));
    s += 100 * (y - x * x) * (y - x * x) + (1 - x) * (1 - x);
  }
  return s;
}

// Mixed float/int/categorical with a conditional parameter: a stand-in for
// a training loss over (lr, units, optimizer, momentum, batch).
inline double Mixed(const searchers::Params& p) {
  double v = std::pow(std::log10(X(p, "lr")) + 2.5, 2) +
             std::pow(std::log2(X(p, "units")) - 6, 2) / 4;
  const std::string opt = p.at("opt").string_value();
  if (opt == "sgd") {
    v += 0.5 + 4 * std::pow(X(p, "momentum") - 0.9, 2);
  } else if (opt == "rmsprop") {
    v += 1;
  }
  return v + (X(p, "batch") == 64 ? 0 : 0.3);
}

inline const Function kFunctions[] = {
    {"branin",
     "  - {name: x1, float: {min: -5, max: 10}}\n"
     "  - {name: x2, float: {min: 0, max: 15}}\n",
     0.397887357729739, Branin},
    {"hartmann6",
     "  - {name: x0, float: {min: 0, max: 1}}\n"
     "  - {name: x1, float: {min: 0, max: 1}}\n"
     "  - {name: x2, float: {min: 0, max: 1}}\n"
     "  - {name: x3, float: {min: 0, max: 1}}\n"
     "  - {name: x4, float: {min: 0, max: 1}}\n"
     "  - {name: x5, float: {min: 0, max: 1}}\n",
     -3.32236801141551, Hartmann6},
    {"rosenbrock4",
     "  - {name: x0, float: {min: -2, max: 2}}\n"
     "  - {name: x1, float: {min: -2, max: 2}}\n"
     "  - {name: x2, float: {min: -2, max: 2}}\n"
     "  - {name: x3, float: {min: -2, max: 2}}\n",
     0.0, Rosenbrock4},
    {"mixed",
     "  - {name: lr, float: {min: 1.0e-4, max: 1.0, scale: LOG}}\n"
     "  - {name: units, int: {min: 8, max: 512, scale: LOG}}\n"
     "  - {name: opt, categorical: {values: [sgd, adam, rmsprop]}}\n"
     "  - {name: momentum, float: {min: 0.5, max: 0.99}, when: {opt: [sgd]}}\n"
     "  - {name: batch, discrete: {values: [32, 64, 128]}}\n",
     0.0, Mixed},
};

}  // namespace dial::bench
