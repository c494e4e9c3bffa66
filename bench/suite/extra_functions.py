"""A second set of functions, outside functions.py's suite, for checking
that what the samplers gained on the suite holds elsewhere:

    compare.py --module bench/suite/extra_functions.py --seeds 10

Written after the samplers' settings were chosen on the suite, and not used
to choose them (bench/README.md has the figures). Beale, Powell, Trid,
Colville, Alpine, Salomon, Perm(0, d, 10), Cross-in-tray, Qing, a log-scaled
weighted sphere, and a mixed function with a categorical, a log float, a
log int and a conditional float; optima as published (Trid 6: -50, Cross-in-
tray: -2.06261187), unshifted. No --check of its own: each optimum is
attained at its textbook argmin.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from functions import Param, Function, is_active  # noqa: E402,F401

SUITE = []


def add(name, bounds, f, optimum, kind="multimodal"):
    names = [f"x{i}" for i in range(len(bounds))]
    params = tuple(Param(n, "float", lo, hi) for n, (lo, hi) in zip(names, bounds))
    SUITE.append(Function(name, params, lambda p: f([p[n] for n in names]),
                          float(optimum), kind))


def beale(x):
    a, b = x
    return (1.5 - a + a * b) ** 2 + (2.25 - a + a * b * b) ** 2 + (2.625 - a + a * b ** 3) ** 2


def powell(x):
    s = 0.0
    for i in range(0, len(x), 4):
        a, b, c, d = x[i:i + 4]
        s += (a + 10 * b) ** 2 + 5 * (c - d) ** 2 + (b - 2 * c) ** 4 + 10 * (a - d) ** 4
    return s


def trid(x):
    return sum((v - 1) ** 2 for v in x) - sum(x[i] * x[i - 1] for i in range(1, len(x)))


def colville(x):
    a, b, c, d = x
    return (100 * (a * a - b) ** 2 + (a - 1) ** 2 + (c - 1) ** 2 + 90 * (c * c - d) ** 2
            + 10.1 * ((b - 1) ** 2 + (d - 1) ** 2) + 19.8 * (b - 1) * (d - 1))


def alpine(x):
    return sum(abs(v * math.sin(v) + 0.1 * v) for v in x)


def salomon(x):
    r = math.sqrt(sum(v * v for v in x))
    return 1 - math.cos(2 * math.pi * r) + 0.1 * r


def perm0(x):
    d = len(x)
    return sum(sum((j + 10) * (x[j - 1] ** i - 1.0 / j ** i) for j in range(1, d + 1)) ** 2
               for i in range(1, d + 1))


def cross_in_tray(x):
    a, b = x
    e = abs(100 - math.sqrt(a * a + b * b) / math.pi)
    return -0.0001 * (abs(math.sin(a) * math.sin(b) * math.exp(e)) + 1) ** 0.1


def qing(x):
    return sum((v * v - (i + 1)) ** 2 for i, v in enumerate(x))


def shifted_sphere_log(x):
    # log-scaled sum of squares with a shift: smooth, many orders of magnitude
    return math.log1p(sum((v - 0.37 * (i + 1)) ** 2 * (i + 1) for i, v in enumerate(x)))


add("beale2", [(-4.5, 4.5)] * 2, beale, 0.0)
add("powell4", [(-4, 5)] * 4, powell, 0.0, "ill-conditioned")
add("trid6", [(-36, 36)] * 6, trid, -50.0, "ill-conditioned")
add("colville4", [(-10, 10)] * 4, colville, 0.0, "ill-conditioned")
add("alpine6", [(-10, 10)] * 6, alpine, 0.0)
add("salomon4", [(-100, 100)] * 4, salomon, 0.0)
add("perm0_4", [(-4, 4)] * 4, perm0, 0.0, "ill-conditioned")
add("cross_in_tray2", [(-10, 10)] * 2, cross_in_tray, -2.06261187)
add("qing5", [(-500, 500)] * 5, qing, 0.0)
add("logsphere5", [(-5, 5)] * 5, shifted_sphere_log, 0.0)

_MIXED = Function("mixed_heldout", (
    Param("kind", "categorical", choices=("p", "q", "r")),
    Param("a", "float", 1e-4, 1.0, log=True),
    Param("b", "float", -2.0, 2.0),
    Param("n", "int", 1, 64, log=True),
    Param("c", "float", 0.0, 1.0, when=("kind", ("q",))),
), lambda p: ((math.log10(p["a"]) + 2.3) ** 2 + (p["b"] - 0.4 - 0.3 * math.log10(p["a"])) ** 2
              + (math.log2(p["n"]) - 3) ** 2 / 5
              + {"p": 0.5, "q": 0.0, "r": 0.8}[p["kind"]]
              + ((p["c"] - 0.7) ** 2 if p["kind"] == "q" else 0.0)),
    0.0, "mixed")
SUITE.append(_MIXED)
SUITE = tuple(SUITE)
_BY = {f.name: f for f in SUITE}


def by_name(name):
    return _BY[name]
