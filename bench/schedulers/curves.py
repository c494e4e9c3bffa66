"""Simulated learning curves, identical to curves.h (see there)."""
import math

MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def uniform(x):
    return (splitmix64(x & MASK) >> 11) / 9007199254740992.0


class Curve:
    def __init__(self, seed, index):
        base = seed * 1000003 + index * 2
        self.seed, self.index = seed, index
        self.lr = 10 ** (-4 + 4 * uniform(base))
        self.c = uniform(base + 1)
        self.final_loss = 0.1 + 0.15 * (math.log10(self.lr) + 2) ** 2 + 0.3 * (self.c - 0.7) ** 2
        self.tau = min(max(40 * math.sqrt(0.01 / self.lr), 5.0), 400.0)

    def loss(self, step):
        noise = 0.01 * math.sin(12.9898 * self.index + 78.233 * step + 37.719 * self.seed)
        return self.final_loss + (2.3 - self.final_loss) * math.exp(-step / self.tau) + noise
