"""Optuna 3.1 (Debian python3-optuna) on the same functions as
searcher_bench (bench/searchers/functions.h), printing the same JSON lines.

usage: /usr/bin/python3 optuna_bench.py --trials 100 --seeds 10
"""
import argparse
import json
import math
import warnings

import optuna

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")


def branin(t):
    x1 = t.suggest_float("x1", -5, 10)
    x2 = t.suggest_float("x2", 0, 15)
    b, c, s = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - s) * math.cos(x1) + 10


A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
     [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
     [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
     [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
ALPHA = [1.0, 1.2, 3.0, 3.2]


def hartmann6(t):
    x = [t.suggest_float(f"x{j}", 0, 1) for j in range(6)]
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6)))
                for i in range(4))


def rosenbrock4(t):
    x = [t.suggest_float(f"x{j}", -2, 2) for j in range(4)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3))


def mixed(t):
    lr = t.suggest_float("lr", 1e-4, 1.0, log=True)
    units = t.suggest_int("units", 8, 512, log=True)
    opt = t.suggest_categorical("opt", ["sgd", "adam", "rmsprop"])
    v = (math.log10(lr) + 2.5) ** 2 + (math.log2(units) - 6) ** 2 / 4
    if opt == "sgd":
        v += 0.5 + 4 * (t.suggest_float("momentum", 0.5, 0.99) - 0.9) ** 2
    elif opt == "rmsprop":
        v += 1
    batch = t.suggest_categorical("batch", [32, 64, 128])
    return v + (0 if batch == 64 else 0.3)


FUNCTIONS = {"branin": (branin, 0.397887357729739),
             "hartmann6": (hartmann6, -3.32236801141551),
             "rosenbrock4": (rosenbrock4, 0.0),
             "mixed": (mixed, 0.0)}
SAMPLERS = {"optuna-tpe": lambda s: optuna.samplers.TPESampler(seed=s),
            "optuna-cmaes": lambda s: optuna.samplers.CmaEsSampler(seed=s),
            "optuna-random": lambda s: optuna.samplers.RandomSampler(seed=s)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seeds", type=int, default=10)
    a = p.parse_args()
    for fname, (f, optimum) in FUNCTIONS.items():
        for sname, make in SAMPLERS.items():
            for seed in range(a.seeds):
                study = optuna.create_study(sampler=make(seed + 1))
                best, regret = math.inf, []
                for _ in range(a.trials):
                    trial = study.ask()
                    y = f(trial)
                    study.tell(trial, y)
                    best = min(best, y)
                    regret.append(best - optimum)
                print(json.dumps({"tool": "optuna", "searcher": sname, "function": fname,
                                  "seed": seed, "regret25": regret[24], "regret50": regret[49],
                                  "regret100": regret[-1]}), flush=True)


if __name__ == "__main__":
    main()
