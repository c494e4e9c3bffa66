// Simulated learning curves for the trial-scheduler benchmark, identical to
// curves.py. Config i of seed s: lr = 10^(-4 + 4 u1), c = u2 (u from
// SplitMix64 of (s, i)); final loss 0.1 + 0.15 (log10 lr + 2)^2 +
// 0.3 (c - 0.7)^2 (best: lr 1e-2, c 0.7); time constant
// 40 sqrt(0.01 / lr) clipped to [5, 400] steps, so fast learners look good
// early and slow ones late; loss(t) = final + (2.3 - final) e^(-t / tau)
// plus deterministic noise of amplitude 0.01.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/random.h"

namespace dial::bench {

struct Curve {
  double lr, c, final_loss, tau;
  int seed, index;
  double Loss(int step) const {
    const double noise =
        0.01 * std::sin(12.9898 * index + 78.233 * step + 37.719 * seed);
    return final_loss + (2.3 - final_loss) * std::exp(-step / tau) + noise;
  }
};

inline double Uniform(uint64_t x) {
  return static_cast<double>(SplitMix64(x) >> 11) / 9007199254740992.0;
}

inline Curve MakeCurve(int seed, int index) {
  const uint64_t base = static_cast<uint64_t>(seed) * 1000003ULL +
                        static_cast<uint64_t>(index) * 2ULL;
  Curve c;
  c.seed = seed;
  c.index = index;
  c.lr = std::pow(10.0, -4.0 + 4.0 * Uniform(base));
  c.c = Uniform(base + 1);
  c.final_loss = 0.1 + 0.15 * std::pow(std::log10(c.lr) + 2, 2) +
                 0.3 * std::pow(c.c - 0.7, 2);
  c.tau = std::clamp(40.0 * std::sqrt(0.01 / c.lr), 5.0, 400.0);
  return c;
}

}  // namespace dial::bench
