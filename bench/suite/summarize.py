"""Per-function tables from compare.py's JSON lines (stdin): for each
sampler, the median regret over seeds of Dial and of Optuna at each budget,
and how many functions Dial's is no worse at (a median within 1e-9, or
below).

usage: compare.py ... | summarize.py [--json]
"""
import argparse
import collections
import json
import math
import statistics
import sys


def no_worse(dial, optuna):
    return dial <= optuna * (1 + 1e-9) + 1e-9


def tables(lines):
    runs = collections.defaultdict(list)  # (sampler, function, side) -> [run]
    for line in lines:
        runs[(line["sampler"], line["function"], line["side"])].append(line)
    out = {}
    for (sampler, function, side), rs in runs.items():
        budgets = sorted(int(b) for b in rs[0]["regret"])
        out.setdefault(sampler, {}).setdefault(function, {})[side] = {
            b: statistics.median(r["regret"][str(b)] if str(b) in r["regret"]
                                 else r["regret"][b] for r in rs)
            for b in budgets}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true",
                    help="print the counts as one JSON line per sampler")
    args = ap.parse_args()
    lines = [json.loads(l) for l in sys.stdin if l.strip()]
    for sampler, per_function in sorted(tables(lines).items()):
        both = {f: s for f, s in per_function.items()
                if "dial" in s and "optuna" in s}
        if not both:
            continue
        budgets = sorted(next(iter(both.values()))["dial"])
        wins = {b: sum(no_worse(s["dial"][b], s["optuna"][b])
                       for s in both.values()) for b in budgets}
        # Geometric mean of Dial's median over Optuna's (both floored at
        # 1e-12): below 1, Dial's regret is lower on the whole.
        ratio = {b: math.exp(statistics.fmean(
            math.log(max(s["dial"][b], 1e-12) / max(s["optuna"][b], 1e-12))
            for s in both.values())) for b in budgets}
        if args.json:
            print(json.dumps({"sampler": sampler, "functions": len(both),
                              "no_worse": wins, "ratio": ratio}))
            continue
        print(f"\n**{sampler}**: median regret over seeds, Dial / Optuna "
              "(bold: Dial no worse)\n")
        print("| function | " + " | ".join(f"{b} trials" for b in budgets)
              + " |")
        print("|---|" + "---|" * len(budgets))
        for f in sorted(both):
            cells = []
            for b in budgets:
                d, o = both[f]["dial"][b], both[f]["optuna"][b]
                cell = f"{d:.3g} / {o:.3g}"
                cells.append(f"**{cell}**" if no_worse(d, o) else cell)
            print(f"| {f} | " + " | ".join(cells) + " |")
        print("\nNo worse than Optuna on " + ", ".join(
            f"{wins[b]} of {len(both)} at {b}" for b in budgets) +
            "; Dial's median regret over Optuna's, geometric mean: " +
            ", ".join(f"{ratio[b]:.2f} at {b}" for b in budgets) + ".")


if __name__ == "__main__":
    main()
