"""Reads the JSON lines of searcher_bench and optuna_bench and prints a
Markdown table of median [q25, q75] simple regret at 25, 50 and 100 trials."""
import json
import sys
from collections import defaultdict

ORDER = ["bayesian", "tpe", "random", "optuna-tpe", "optuna-cmaes", "optuna-random"]


def quantile(v, q):
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


rows = defaultdict(lambda: defaultdict(list))
latency = []
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "latency_observations" in r:
        latency.append(r)
        continue
    for k in ("regret25", "regret50", "regret100"):
        rows[(r["function"], r["searcher"])][k].append(r[k])

functions = sorted({f for f, _ in rows}, key=["branin", "hartmann6", "rosenbrock4", "mixed"].index)
print("| function | searcher | regret@25 | regret@50 | regret@100 |")
print("|---|---|---|---|---|")
for f in functions:
    for s in ORDER:
        if (f, s) not in rows:
            continue
        cells = []
        for k in ("regret25", "regret50", "regret100"):
            v = rows[(f, s)][k]
            cells.append(f"{quantile(v, .5):.3g} [{quantile(v, .25):.3g}, {quantile(v, .75):.3g}]")
        name = s if s.startswith("optuna") else f"dial-{s}"
        print(f"| {f} | {name} | " + " | ".join(cells) + " |")
if latency:
    print()
    print("| observations (6-D) | median ms | p95 ms | max ms |")
    print("|---|---|---|---|")
    for r in latency:
        print(f"| {r['latency_observations']} | {r['median_ms']} | {r['p95_ms']} | {r['max_ms']} |")
