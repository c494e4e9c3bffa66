"""Optuna 3.1's pruners on the same simulated curves and budget as
scheduler_bench (see curves.h): NopPruner (FIFO), MedianPruner,
SuccessiveHalvingPruner and HyperbandPruner, with settings matching Dial's.

usage: /usr/bin/python3 optuna_pruners.py --seeds 10
"""
import argparse
import json
import os
import sys
import warnings

import optuna

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from curves import Curve  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")
MAX_STEPS = 243
BUDGET = 16 * MAX_STEPS
PRUNERS = {
    "optuna-nop": lambda: optuna.pruners.NopPruner(),
    "optuna-median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=9),
    "optuna-sha": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=3, reduction_factor=3),
    "optuna-hyperband": lambda: optuna.pruners.HyperbandPruner(
        min_resource=3, max_resource=MAX_STEPS, reduction_factor=3),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=10)
    a = p.parse_args()
    for seed in range(a.seeds):
        for name, make in PRUNERS.items():
            study = optuna.create_study(direction="minimize", pruner=make(),
                                        sampler=optuna.samplers.RandomSampler(seed=seed))
            steps = configs = 0
            chosen_observed, chosen_true = float("inf"), float("inf")
            while steps < BUDGET:
                trial = study.ask()
                trial.suggest_float("x", 0, 1)  # ignored, as in Dial's run
                curve = Curve(seed, configs)
                configs += 1
                loss, step, pruned = 0.0, 0, False
                while step < MAX_STEPS and steps < BUDGET:
                    step += 1
                    steps += 1
                    loss = curve.loss(step)
                    trial.report(loss, step)
                    if trial.should_prune():
                        pruned = True
                        break
                if pruned:
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                else:
                    study.tell(trial, loss)
                    if step == MAX_STEPS and loss < chosen_observed:
                        chosen_observed, chosen_true = loss, curve.final_loss
            print(json.dumps({"tool": "optuna", "method": name, "seed": seed, "configs": configs,
                              "steps": steps, "regret": chosen_true - 0.1}), flush=True)


if __name__ == "__main__":
    main()
