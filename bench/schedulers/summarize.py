"""Median [quartiles] of configs tried and regret per method, from the JSON
lines of scheduler_bench and optuna_pruners."""
import json
import sys
from collections import defaultdict

ORDER = ["fifo", "median", "asha", "hyperband",
         "optuna-nop", "optuna-median", "optuna-sha", "optuna-hyperband"]


def q(v, x):
    v = sorted(v)
    pos = x * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


rows = defaultdict(lambda: defaultdict(list))
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        for k in ("configs", "steps", "regret"):
            rows[r["method"]][k].append(r[k])
print("| method | configs tried | steps spent | regret of chosen config |")
print("|---|---|---|---|")
for m in ORDER:
    if m not in rows:
        continue
    r = rows[m]
    name = m if m.startswith("optuna") else f"dial-{m}"
    print(f"| {name} | {q(r['configs'], .5):.0f} [{q(r['configs'], .25):.0f}, {q(r['configs'], .75):.0f}] "
          f"| {q(r['steps'], .5):.0f} | {q(r['regret'], .5):.4f} [{q(r['regret'], .25):.4f}, {q(r['regret'], .75):.4f}] |")
