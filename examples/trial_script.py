#!/usr/bin/env python3
"""A trial program in plain Python, run by dial-worker (trial.command).

It speaks the trial protocol: hyperparameters arrive as JSON in
DIAL_TRIAL_PARAMS; each report is one JSON line written to the file
descriptor DIAL_REPORT_FD; the decision comes back as one JSON line on
DIAL_DECISION_FD. Checkpoints go under DIAL_CHECKPOINT_DIR, and a resumed
attempt finds the one to load in DIAL_RESTORE_CHECKPOINT.

It "trains" a toy model: gradient descent on a quadratic whose curvature and
step size are the hyperparameters.

A trial never talks to the scheduler and needs no TLS files or token: the
worker relays its reports over its own (TLS, token) connection, and never
passes the worker's DIAL_TOKEN or other DIAL_* variables on. A secret the
trial needs (an API key, a data-store password) comes through the study's
trial.command.secret_env, which names the worker-side secret to put in a
variable; the spec holds names only (docs/workers.md).
"""
import json
import os
import sys


def main():
    params = json.loads(os.environ.get("DIAL_TRIAL_PARAMS", "{}"))
    lr = float(params.get("lr", 0.1))
    steps = int(params.get("steps", 50))
    report = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
    decisions = os.fdopen(int(os.environ["DIAL_DECISION_FD"]), "r")
    ckpt_root = os.environ.get("DIAL_CHECKPOINT_ROOT", "")
    ckpt_dir = os.environ.get("DIAL_CHECKPOINT_DIR", "")

    step, w = 0, 5.0
    restore = os.environ.get("DIAL_RESTORE_CHECKPOINT", "")
    if restore:
        # The id is relative to the checkpoint root.
        with open(os.path.join(ckpt_root, restore)) as f:
            state = json.load(f)
        step, w = state["step"], state["w"]
        print(f"resuming from {restore} at step {step}", file=sys.stderr)

    while step < steps:
        step += 1
        w -= lr * 2.0 * w  # gradient of w^2
        loss = w * w
        message = {"step": step, "metrics": {"loss": loss}}
        if ckpt_dir and step % 10 == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            path = os.path.join(ckpt_dir, f"script-{step}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"step": step, "w": w}, f)
            os.replace(path + ".tmp", path)
            # Report the id: the path relative to the checkpoint root.
            message["checkpoint"] = os.path.relpath(path, ckpt_root)
        report.write(json.dumps(message) + "\n")
        decision = json.loads(decisions.readline())
        if decision["action"] in ("STOP", "PAUSE"):
            break


if __name__ == "__main__":
    main()
