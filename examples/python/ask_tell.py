#!/usr/bin/env python3
"""Ask/tell with the Python SDK: a TPE search over a learning rate and an
activation, each trial reporting a toy training curve for 5 steps.

usage: DIAL_SCHEDULER=127.0.0.1:7070 build/python-venv/bin/python examples/python/ask_tell.py
Run again, it finds the study (exist_ok) and goes on until its budget is used.
"""
import math
import dial

study = dial.connect().create_study({
    "name": "py-ask-tell", "objective": {"metric": "loss", "goal": "MINIMIZE"},
    "search_space": [{"name": "lr", "float": {"min": 1e-4, "max": 1.0, "scale": "LOG"}},
                     {"name": "act", "categorical": {"values": ["relu", "tanh", "gelu"]}}],
    "searcher": {"tpe": {}}, "budget": {"max_trials": 40}}, exist_ok=True)
while (trial := study.ask()) is not None:  # None once the budget is used
    lr, act = trial.params["lr"], trial.params["act"]
    for step in range(1, 6):  # a "training curve" that ends near the true loss
        loss = (math.log10(lr) + 2.5) ** 2 + {"relu": 0, "tanh": 0.5, "gelu": 0.2}[act] + 1 / step
        trial.report(step, loss=loss)
    trial.complete(loss)
print("best:", study.best_trial.number, study.best_trial.params, study.best_trial.value)
