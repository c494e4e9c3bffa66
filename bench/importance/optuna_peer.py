#!/usr/bin/python3
"""The Optuna peer of importance_bench: the same trials (JSON lines from
importance_bench --data_out) as an Optuna study, scored by Optuna's own
evaluators, timed. Prints one line per evaluator: seconds and the
importances, most important first.

usage: optuna_peer.py DATA.jsonl [EVALUATOR ...]   (fanova, mdi)"""

import json
import sys
import time

import optuna
from optuna.distributions import (CategoricalDistribution,
                                  FloatDistribution, IntDistribution)

DISTRIBUTIONS = {
    "lr": FloatDistribution(1e-4, 1.0, log=True),
    "x1": FloatDistribution(0, 1),
    "x2": FloatDistribution(0, 1),
    "x3": FloatDistribution(0, 1),
    "x4": FloatDistribution(0, 1),
    "units": IntDistribution(1, 1000),
    "depth": IntDistribution(1, 8),
    "optimizer": CategoricalDistribution(["sgd", "adam", "rmsprop"]),
}


def main():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = [json.loads(line) for line in open(sys.argv[1])]
    study = optuna.create_study(direction="minimize")
    study.add_trials([
        optuna.trial.create_trial(
            params={k: r[k] for k in DISTRIBUTIONS},
            distributions=DISTRIBUTIONS, value=r["loss"]) for r in rows])
    evaluators = {
        "fanova": lambda: optuna.importance.FanovaImportanceEvaluator(seed=0),
        "mdi": lambda: optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0),
    }
    for name in sys.argv[2:] or ["fanova", "mdi"]:
        start = time.perf_counter()
        imp = optuna.importance.get_param_importances(
            study, evaluator=evaluators[name]())
        took = time.perf_counter() - start
        print(f"optuna {name}: trials {len(rows)}, {took:.2f} s, importance " +
              " ".join(f"{k}={v:.4f}" for k, v in imp.items()), flush=True)


if __name__ == "__main__":
    main()
