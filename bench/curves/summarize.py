"""Turns compare.py's JSON lines into a markdown table (stdout) and a plot
of median regret against consumed budget, one panel per table.

usage: summarize.py RESULTS.jsonl [--plot OUT.png] [--plot-methods A,B,..]
                    [--matrix]

--matrix prints one table of every method's median regret on every table
instead (bold: lower than FIFO with the same searcher, or the best of its
side).
"""
import argparse
import json
import math
from collections import OrderedDict


def fifo_of(method):
    """The FIFO run with the same searcher as `method`."""
    for prefix in ("dial-gp-", "dial-tpe-", "optuna-tpe-"):
        if method.startswith(prefix):
            return prefix + ("nop" if prefix.startswith("optuna") else "fifo")
    if method.startswith("dial-bohb"):
        return "dial-tpe-fifo"
    return "optuna-nop" if method.startswith("optuna") else "dial-fifo"


def matrix(by_table):
    tables = list(by_table)
    methods = []
    for rows in by_table.values():
        for r in rows:
            if r["method"] not in methods:
                methods.append(r["method"])
    value = {(t, r["method"]): r["median_regret"]
             for t, rows in by_table.items() for r in rows}
    best = {(t, side): min(v for (tt, m), v in value.items()
                           if tt == t and m.startswith(side))
            for t in tables for side in ("dial", "optuna")}
    print("| method | " + " | ".join(t.split(".")[0] for t in tables) +
          " |")
    print("|---|" + "---|" * len(tables))
    for m in methods:
        cells = []
        for t in tables:
            v = value.get((t, m))
            if v is None:
                cells.append("")
                continue
            fifo = value.get((t, fifo_of(m)))
            cell = f"{v:.4f}"
            if fifo is not None and m != fifo_of(m):
                cell += " <" if v < fifo else " =" if v == fifo else " >"
            if v == best[(t, m.split("-")[0])]:
                cell = f"**{cell}**"
            cells.append(cell)
        print(f"| {m} | " + " | ".join(cells) + " |")
    print()
    for t in tables:
        d, o = best[(t, "dial")], best[(t, "optuna")]
        verdict = "lower" if d < o else "equal" if d == o else "higher"
        print(f"- {t.split('.')[0]}: Dial's best {d:.4f}, Optuna's best "
              f"{o:.4f}: Dial {verdict}.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--plot")
    ap.add_argument("--plot-methods",
                    help="comma-separated: only these in the plot")
    ap.add_argument("--matrix", action="store_true")
    a = ap.parse_args()
    by_table = OrderedDict()
    with open(a.results) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                by_table.setdefault(r["table"], []).append(r)
    if a.matrix:
        matrix(by_table)
    for table, rows in ([] if a.matrix else by_table.items()):
        best = {}
        for side in ("dial", "optuna"):
            mine = [r for r in rows if r["method"].startswith(side)]
            best[side] = min(r["median_regret"] for r in mine) if mine \
                else math.nan
        print(f"\n**{table}** (budget {rows[0]['budget']:g} "
              f"{rows[0]['resource']}, {rows[0]['seeds']} seeds)\n")
        print("| method | median regret [quartiles] | at 1/4, 1/2, 3/4 of "
              "the budget | configs tried |")
        print("|---|---|---|---|")
        for r in rows:
            mark = " **best of its side**" if \
                r["median_regret"] == best[r["method"].split("-")[0]] else ""
            curve = ", ".join(f"{c[1]:.4f}" for c in
                              r["regret_vs_consumed"][:-1])
            q = r["quartiles"]
            print(f"| {r['method']}{mark} | {r['median_regret']:.4f} "
                  f"[{q[0]:.4f}, {q[1]:.4f}] | {curve} | "
                  f"{r['configs_tried']:g} |")
        verdict = "lower" if best["dial"] < best["optuna"] else \
            "equal" if best["dial"] == best["optuna"] else "higher"
        print(f"\nDial's best {best['dial']:.4f}, Optuna's best "
              f"{best['optuna']:.4f}: Dial {verdict}.")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        n = len(by_table)
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
        for ax, (table, rows) in zip(axes[0], by_table.items()):
            for r in rows:
                if a.plot_methods and \
                        r["method"] not in a.plot_methods.split(","):
                    continue
                xs = [c[0] / r["budget"] for c in r["regret_vs_consumed"]]
                ys = [c[1] for c in r["regret_vs_consumed"]]
                ax.plot(xs, ys, marker="o", markersize=3,
                        linestyle="-" if r["method"].startswith("dial")
                        else "--", label=r["method"])
            ax.set_title(table, fontsize=9)
            ax.set_xlabel("share of the budget consumed")
            ax.set_ylabel("median regret")
            ax.set_yscale("symlog", linthresh=1e-3)
        axes[0][-1].legend(fontsize=6, loc="upper right")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
