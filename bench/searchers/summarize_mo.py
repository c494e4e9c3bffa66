"""Reads the JSON lines of searcher_bench --multi / --mo_latency and
optuna_mo_bench.py on stdin and prints Markdown: per problem, the median
[q25, q75] over seeds of the hypervolume (multi-objective) or the best
feasible value (constrained single-objective) at 25, 50 and the final trial
count, per tool and searcher; whether Dial's best model-based searcher
reaches Optuna's best; and suggestion latency against Optuna's."""
import json
import math
import sys
from collections import defaultdict

from mo_problems import PROBLEMS

ORDER = ["nsga2", "tpe", "bayesian", "random",
         "optuna-nsga2", "optuna-motpe", "optuna-tpe", "optuna-random"]
DIAL_MODEL_BASED = ["nsga2", "tpe", "bayesian"]
# Optuna's reference per problem kind: the best of NSGA-II and MOTPE with
# several objectives; TPE with constraints_func with one.
OPTUNA_PEERS = {True: ["optuna-nsga2", "optuna-motpe"], False: ["optuna-tpe"]}
# Dial searcher -> the Optuna sampler its latency is compared with.
LATENCY_PEER = {"nsga2": "optuna-nsga2", "tpe": "optuna-motpe"}


def quantile(v, q):
    """Interpolated quantile; None (no feasible point yet) counts as +inf."""
    v = sorted(math.inf if x is None else x for x in v)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    if v[lo] == v[hi]:
        return v[lo]
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def fmt(x):
    return "none" if math.isinf(x) else f"{x:.4g}"


def label(searcher):
    return searcher if searcher.startswith("optuna") else f"dial-{searcher}"


def main():
    runs = defaultdict(list)  # (function, searcher) -> records
    latency = {}  # (searcher, observations) -> record
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "mo_latency" in r:
            latency[(r["mo_latency"], r["observations"])] = r
        else:
            runs[(r["function"], r["searcher"])].append(r)

    verdicts = []
    for fname, problem in PROBLEMS.items():
        searchers = [s for s in ORDER if (fname, s) in runs]
        if not searchers:
            continue
        multi = problem.objectives > 1
        key = "hv" if multi else "best_feasible"
        trials = max(r["trials"] for s in searchers for r in runs[(fname, s)])
        if multi:
            print(f"### {fname}: hypervolume (higher is better), reference "
                  f"{tuple(problem.reference)}, true front {problem.ideal:.6g}")
        else:
            print(f"### {fname}: best feasible value (lower is better), "
                  f"optimum {problem.ideal:.6g}")
        print()
        print(f"| searcher | @25 | @50 | @{trials} | ms per suggestion |")
        print("|---|---|---|---|---|")
        final = {}
        for s in searchers:
            rs = runs[(fname, s)]
            cells = []
            for k in ("25", "50", "100"):
                v = [r[key + k] for r in rs]
                cells.append(f"{fmt(quantile(v, .5))} [{fmt(quantile(v, .25))}, "
                             f"{fmt(quantile(v, .75))}]")
            final[s] = quantile([r[key + "100"] for r in rs], .5)
            ms = 1000 * quantile([r["seconds_per_suggest"] for r in rs], .5)
            print(f"| {label(s)} | " + " | ".join(cells) + f" | {ms:.3g} |")
        print()
        better = max if multi else min
        dial = [s for s in DIAL_MODEL_BASED if s in final]
        optuna = [s for s in OPTUNA_PEERS[multi] if s in final]
        if dial and optuna:
            d = better(dial, key=final.get)
            o = better(optuna, key=final.get)
            met = final[d] >= final[o] if multi else final[d] <= final[o]
            verdicts.append(f"| {fname} | {label(d)} {fmt(final[d])} | {label(o)} "
                            f"{fmt(final[o])} | {'yes' if met else 'no'} |")

    if verdicts:
        print("### Dial's best against Optuna's best (medians at the final trial count)")
        print()
        print("| problem | Dial | Optuna | Dial reaches or beats |")
        print("|---|---|---|---|")
        print("\n".join(verdicts))
        print()
    if latency:
        print("### Suggestion latency, 2 objectives (ZDT1, 6-D)")
        print()
        print("| searcher | observations | median ms | p95 ms | max ms | Optuna peer median ms "
              "| ratio |")
        print("|---|---|---|---|---|---|---|")
        for (s, n), r in sorted(latency.items(), key=lambda kv: (ORDER.index(kv[0][0]), kv[0][1])):
            if s.startswith("optuna"):
                continue
            peer = latency.get((LATENCY_PEER.get(s), n))
            peer_cells = (f"{label(LATENCY_PEER[s])} {peer['median_ms']} | "
                          f"{r['median_ms'] / max(peer['median_ms'], 0.05):.2g}" if peer
                          else "- | -")
            print(f"| {label(s)} | {n} | {r['median_ms']} | {r['p95_ms']} | {r['max_ms']} | "
                  f"{peer_cells} |")


if __name__ == "__main__":
    main()
