#!/usr/bin/env python3
"""A finished study in pandas: trials by state, the best trials, the
objective by category (or by quartile bins of a numeric parameter), the
correlation of each numeric parameter with the objective, and Dial's
parameter importance.

usage: DIAL_SCHEDULER=127.0.0.1:7070 build/python-venv/bin/python examples/python/analyze.py STUDY
(e.g. the study examples/python/ask_tell.py makes, py-ask-tell). With
several objectives, the first is analysed.
"""
import sys

import pandas as pd

import dial


def title(text):
    print(f"\n{text}\n{'-' * len(text)}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    study = dial.connect().study(sys.argv[1])
    metric, goal = study.objectives[0]
    lower_is_better = goal == "MINIMIZE"
    pd.set_option("display.width", 120)
    pd.set_option("display.max_columns", 20)
    pd.set_option("display.precision", 4)

    df = study.to_dataframe()
    print(f"study {study.name}: {study.state}, {len(df)} trials,"
          f" objective {metric} ({goal.lower()})")
    if df.empty:
        return

    title("Trials by state")
    best = "min" if lower_is_better else "max"
    print(df.groupby("state").agg(
        trials=("number", "size"), best_value=("value", best),
        mean_duration_s=("duration", "mean"), max_step=("last_step", "max")))

    title("Best trials")
    params = [c for c in df.columns if c.startswith("params_")]
    top = pd.DataFrame([{"number": t.number, "value": t.value, **t.params}
                        for t in study.best_trials(5)])
    print(top.to_string(index=False) if not top.empty else "(none completed)")

    done = df[df.state == "COMPLETED"].dropna(subset=["value"])
    if len(done) < 2:
        return
    for column in params:
        name = column[len("params_"):]
        values = done[column]
        if pd.api.types.is_numeric_dtype(values) and values.nunique() > 4:
            groups = pd.qcut(values, 4, labels=False, duplicates="drop")
            title(f"{metric} by quartile of {name}")
        else:
            groups = values
            title(f"{metric} by {name}")
        table = done.groupby(groups)["value"].agg(
            ["count", "mean", "median", best])
        if groups is not values:  # name each bin by the values in it
            ranges = done.groupby(groups)[column].agg(["min", "max"])
            table.index = [f"{lo:.3g} .. {hi:.3g}" for lo, hi in
                           zip(ranges["min"], ranges["max"])]
        table.index.name = name
        print(table)

    numeric = [c for c in params if pd.api.types.is_numeric_dtype(done[c])]
    if numeric:
        title(f"Correlation of numeric parameters with {metric}")
        print(pd.DataFrame({
            "pearson": done[numeric].corrwith(done["value"]),
            "spearman": done[numeric].corrwith(done["value"],
                                               method="spearman"),
        }).rename(index=lambda c: c[len("params_"):]))

    title("Parameter importance (PED-ANOVA, shares of 1)")
    for name, share in study.importance().items():
        print(f"{name:>20}  {share:6.3f}  {'#' * round(40 * share)}")


if __name__ == "__main__":
    main()
