"""The multi-objective and constrained problems of searcher_bench --multi,
for optuna_mo_bench.py and summarize_mo.py: the same definitions, reference
points and ideal values as bench/searchers/mo_functions.h (change both
together), and the exact hypervolume both benches score fronts with.

Every objective is minimised; a trial is feasible when every constraint
value is <= 0. Run as a script, checks the hypervolume and the ideal values.
"""
import math
from collections import namedtuple

# space: (name, "float" | "int", low, high, log) or (name, "categorical",
# values). evaluate(params) -> (objectives, constraints): `objectives` and
# `constraints` values. reference: the fixed hypervolume reference point
# (several objectives only). ideal: the true front's hypervolume (several
# objectives) or the best feasible value.
Problem = namedtuple("Problem", "space objectives constraints evaluate reference ideal")

UNIT_CUBE6 = [(f"x{i}", "float", 0.0, 1.0, False) for i in range(6)]


def _unit(p):
    return [p[f"x{i}"] for i in range(6)]


# ZDT (Zitzler, Deb and Thiele 2000) with n = 6: g = 1 + 9 mean(x1..x5).
def _zdt_g(x):
    return 1 + 9 * sum(x[1:]) / (len(x) - 1)


def zdt1(p):
    x = _unit(p)
    g = _zdt_g(x)
    return [x[0], g * (1 - math.sqrt(x[0] / g))], []


def zdt2(p):
    x = _unit(p)
    g = _zdt_g(x)
    return [x[0], g * (1 - (x[0] / g) ** 2)], []


def zdt3(p):
    x = _unit(p)
    g = _zdt_g(x)
    r = x[0] / g
    return [x[0], g * (1 - math.sqrt(r) - r * math.sin(10 * math.pi * x[0]))], []


# DTLZ2 (Deb et al. 2002), 3 objectives, n = 6.
def dtlz2(p):
    x = _unit(p)
    g = sum((v - 0.5) ** 2 for v in x[2:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b),
            (1 + g) * math.sin(a)], []


def branin(x1, x2):
    b, c, s = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - s) * math.cos(x1) + 10


# Branin inside the disc (x1 - 2.5)^2 + (x2 - 7.5)^2 <= 50 (Gardner et al.
# 2014): only the minimum at (pi, 2.275) is feasible.
def branin_c(p):
    x1, x2 = p["x1"], p["x2"]
    return [branin(x1, x2)], [(x1 - 2.5) ** 2 + (x2 - 7.5) ** 2 - 50]


# A training loss under a memory budget: units x the optimiser's weight
# copies <= 180. Unconstrained optimum adam/256 units (0) is infeasible; the
# constrained one is sgd/90 units, lr 10^-2.5, dropout 0.2.
COPIES = {"sgd": 2, "rmsprop": 3, "adam": 4}
OPT_PENALTY = {"sgd": 0.6, "rmsprop": 0.3, "adam": 0.0}


def mixed_c(p):
    loss = ((math.log10(p["lr"]) + 2.5) ** 2 + (math.log2(p["units"]) - 8) ** 2 / 4
            + 4 * (p["dropout"] - 0.2) ** 2 + OPT_PENALTY[p["opt"]])
    return [loss], [p["units"] * COPIES[p["opt"]] - 180]


# ZDT reference (1.1, 11): f1 <= 1 and f2 <= g <= 10 on [0, 1]^6, so every
# evaluated point counts from the first trial on (see mo_functions.h).
PROBLEMS = {
    "zdt1": Problem(UNIT_CUBE6, 2, 0, zdt1, (1.1, 11.0), 11.766666666666667),
    "zdt2": Problem(UNIT_CUBE6, 2, 0, zdt2, (1.1, 11.0), 11.433333333333334),
    "zdt3": Problem(UNIT_CUBE6, 2, 0, zdt3, (1.1, 11.0), 12.2217629087),
    "dtlz2": Problem(UNIT_CUBE6, 3, 0, dtlz2, (1.1, 1.1, 1.1), 0.8074012244017016),
    "branin_c": Problem([("x1", "float", -5.0, 10.0, False), ("x2", "float", 0.0, 15.0, False)],
                        1, 1, branin_c, None, 0.397887357729739),
    "mixed_c": Problem([("lr", "float", 1e-4, 1.0, True), ("units", "int", 8, 512, True),
                        ("opt", "categorical", ["sgd", "adam", "rmsprop"]),
                        ("dropout", "float", 0.0, 0.5, False)],
                       1, 1, mixed_c, None, 1.1686267707625972),
}


def _slice_volume(points, reference, dims):
    """The volume below `reference` dominated by the first `dims`
    coordinates of `points` (all strictly below it): slices along the last
    coordinate, a sweep in two dimensions."""
    if not points:
        return 0.0
    last = dims - 1
    points = sorted(points, key=lambda p: p[last])
    volume, best_x = 0.0, reference[0]
    for i, p in enumerate(points):
        nxt = points[i + 1][last] if i + 1 < len(points) else reference[last]
        if dims == 2:
            best_x = min(best_x, p[0])
            volume += (reference[0] - best_x) * (nxt - p[1])
        elif nxt > p[last]:
            volume += _slice_volume(points[:i + 1], reference, dims - 1) * (nxt - p[last])
    return volume


def hypervolume(points, reference):
    """Exact hypervolume (minimising) of `points` up to `reference`, 2 or
    more objectives; points not strictly better than the reference in every
    coordinate add nothing."""
    inside = [list(p) for p in points if all(a < r for a, r in zip(p, reference))]
    return _slice_volume(inside, reference, len(reference))


def _check():
    import random

    import numpy as np
    from optuna._hypervolume import WFG

    rng = random.Random(1)
    for dims, reference in ((2, (1.1, 11.0)), (3, (1.1, 1.1, 1.1))):
        for n in (1, 5, 60):
            pts = [[rng.uniform(0, 1.3) for _ in range(dims)] for _ in range(n)]
            pts.append(list(pts[0]))  # a duplicate
            inside = [p for p in pts if all(a < r for a, r in zip(p, reference))]
            ours = hypervolume(pts, reference)
            theirs = WFG().compute(np.array(inside), np.array(reference)) if inside else 0.0
            assert abs(ours - theirs) < 1e-9 * max(1.0, theirs), (dims, n, ours, theirs)
    # Dense samples of the true fronts approach the ideal values from below.
    k = 2000
    for name, front in (("zdt1", lambda a: 1 - math.sqrt(a)), ("zdt2", lambda a: 1 - a * a),
                        ("zdt3", lambda a: 1 - math.sqrt(a) - a * math.sin(10 * math.pi * a))):
        hv = hypervolume([[i / k, front(i / k)] for i in range(k + 1)], PROBLEMS[name].reference)
        assert 0 <= PROBLEMS[name].ideal - hv < 2e-3, (name, hv)
    m = 60
    sphere = [[math.cos(a) * math.cos(b), math.cos(a) * math.sin(b), math.sin(a)]
              for a in np.linspace(0, math.pi / 2, m) for b in np.linspace(0, math.pi / 2, m)]
    hv = hypervolume(sphere, PROBLEMS["dtlz2"].reference)
    assert 0 <= PROBLEMS["dtlz2"].ideal - hv < 3e-2, hv
    best = PROBLEMS["branin_c"].evaluate({"x1": math.pi, "x2": 2.275})
    assert abs(best[0][0] - PROBLEMS["branin_c"].ideal) < 1e-6 and best[1][0] <= 0
    best = PROBLEMS["mixed_c"].evaluate({"lr": 10 ** -2.5, "units": 90, "opt": "sgd",
                                         "dropout": 0.2})
    assert abs(best[0][0] - PROBLEMS["mixed_c"].ideal) < 1e-12 and best[1][0] == 0
    assert PROBLEMS["mixed_c"].evaluate({"lr": 10 ** -2.5, "units": 256, "opt": "adam",
                                         "dropout": 0.2})[1][0] > 0
    print("ok")


if __name__ == "__main__":
    _check()
