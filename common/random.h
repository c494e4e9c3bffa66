// Seed mixing shared by everything that derives reproducible random streams
// from (seed, index) pairs. Thread-safe: a pure function.
#pragma once

#include <cstdint>

namespace dial {

// SplitMix64's finaliser: spreads nearby inputs (seed 1, 2, 3...) over the
// whole 64-bit range, so streams seeded from them do not correlate.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace dial
