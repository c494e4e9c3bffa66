#!/usr/bin/env python3
"""DialSearchCV against scikit-learn's RandomizedSearchCV at equal trials.

usage: build/python-venv/bin/python bench/sklearn/compare.py
           [--seeds 5] [--trials 30] [--tasks digits-svc,cancer-svc,cancer-gb]
           [--searcher bayesian]

Each task is one of scikit-learn's bundled datasets (no download), split
75/25 once (fixed seed); both searches cross-validate on the same
StratifiedKFold(5) folds of the 75% over the same ranges, n_trials =
n_iter, seeds 0..N-1 (Dial: the searcher's seed, its default `bayesian`,
on a local scheduler; scikit-learn: random_state). Prints one JSON line per
task, method and seed, then a Markdown table of medians: best CV accuracy
(the must-hold), the refit model's accuracy on the held-out 25%, and wall
time.
"""
import argparse
import json
import os
import statistics
import sys
import time

from scipy.stats import loguniform, randint, uniform
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.model_selection import (RandomizedSearchCV, StratifiedKFold,
                                     train_test_split)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from dial.sklearn import DialSearchCV

# name -> (loader, estimator, Dial parameter specs, scipy distributions)
TASKS = {
    "digits-svc": (
        load_digits, lambda: SVC(),
        {"C": {"float": {"min": 1e-2, "max": 1e3, "scale": "LOG"}},
         "gamma": {"float": {"min": 1e-5, "max": 1e-1, "scale": "LOG"}}},
        {"C": loguniform(1e-2, 1e3), "gamma": loguniform(1e-5, 1e-1)}),
    "cancer-svc": (
        load_breast_cancer, lambda: make_pipeline(StandardScaler(), SVC()),
        {"svc__C": {"float": {"min": 1e-2, "max": 1e3, "scale": "LOG"}},
         "svc__gamma": {"float": {"min": 1e-5, "max": 1.0, "scale": "LOG"}}},
        {"svc__C": loguniform(1e-2, 1e3), "svc__gamma": loguniform(1e-5, 1.0)}),
    "cancer-gb": (
        load_breast_cancer, lambda: GradientBoostingClassifier(random_state=0),
        {"learning_rate": {"float": {"min": 1e-3, "max": 1.0,
                                     "scale": "LOG"}},
         "n_estimators": {"int": {"min": 10, "max": 150, "scale": "LOG"}},
         "max_depth": {"int": {"min": 1, "max": 6}},
         "subsample": {"float": {"min": 0.5, "max": 1.0}}},
        {"learning_rate": loguniform(1e-3, 1.0),
         "n_estimators": randint(10, 151), "max_depth": randint(1, 7),
         "subsample": uniform(0.5, 0.5)}),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--searcher", default="bayesian",
                    help="DialSearchCV's searcher (default: its default)")
    args = ap.parse_args()
    rows = []
    for task in args.tasks.split(","):
        load, make, dial_space, scipy_space = TASKS[task]
        X, y = load(return_X_y=True)
        xtr, xte, ytr, yte = train_test_split(X, y, test_size=0.25,
                                              random_state=0, stratify=y)
        cv = StratifiedKFold(5)
        for seed in range(args.seeds):
            for method in ("dial", "random"):
                if method == "dial":
                    search = DialSearchCV(make(), dial_space,
                                          n_trials=args.trials, cv=cv,
                                          random_state=seed,
                                          searcher=args.searcher)
                else:
                    search = RandomizedSearchCV(make(), scipy_space,
                                                n_iter=args.trials, cv=cv,
                                                random_state=seed)
                start = time.monotonic()
                search.fit(xtr, ytr)
                row = {"task": task, "method": method, "seed": seed,
                       "trials": args.trials,
                       "best_cv": round(search.best_score_, 5),
                       "test": round(search.score(xte, yte), 5),
                       "seconds": round(time.monotonic() - start, 2)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| task | method | best CV accuracy, median [min, max] | "
          "held-out accuracy, median | seconds, median |")
    print("|---|---|---|---|---|")
    for task in args.tasks.split(","):
        for method, label in (("dial", "DialSearchCV"),
                              ("random", "RandomizedSearchCV")):
            mine = [r for r in rows if r["task"] == task and
                    r["method"] == method]
            cvs = [r["best_cv"] for r in mine]
            print(f"| {task} | {label} | {statistics.median(cvs):.4f} "
                  f"[{min(cvs):.4f}, {max(cvs):.4f}] | "
                  f"{statistics.median(r['test'] for r in mine):.4f} | "
                  f"{statistics.median(r['seconds'] for r in mine):.1f} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
