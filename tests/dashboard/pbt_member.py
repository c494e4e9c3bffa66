#!/usr/bin/env python3
"""A fast PBT member for the dashboard's views test: a toy model whose
score approaches 1 at a rate set by `lr`, with a checkpoint every `every`
steps; on EXPLOIT it loads the donor's checkpoint and takes the new lr.
Standard library only, so 32 of them start quickly.

usage (a study's trial.command): python3 pbt_member.py STEPS EVERY
"""
import json
import os
import sys


def main():
    steps, every = int(sys.argv[1]), int(sys.argv[2])
    lr = float(json.loads(os.environ["DIAL_TRIAL_PARAMS"])["lr"])
    report = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
    decisions = os.fdopen(int(os.environ["DIAL_DECISION_FD"]), "r")
    root = os.environ["DIAL_CHECKPOINT_ROOT"]
    directory = os.environ["DIAL_CHECKPOINT_DIR"]
    step, w = 0, 1.0

    def load(checkpoint_id):
        with open(os.path.join(root, checkpoint_id)) as f:
            state = json.load(f)
        return state["step"], state["w"]

    if os.environ.get("DIAL_RESTORE_CHECKPOINT"):
        step, w = load(os.environ["DIAL_RESTORE_CHECKPOINT"])
    while step < steps:
        step += 1
        w *= 1 - min(lr, 0.9) * 0.5
        message = {"step": step, "metrics": {"score": 1 - w}}
        if step % every == 0:
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"ckpt-{step}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"step": step, "w": w}, f)
            os.replace(path + ".tmp", path)
            message["checkpoint"] = os.path.relpath(path, root)
        report.write(json.dumps(message) + "\n")
        decision = json.loads(decisions.readline() or '{"action": "STOP"}')
        if decision["action"] in ("STOP", "PAUSE"):
            break
        if decision["action"] == "EXPLOIT":
            _, w = load(decision["checkpoint"])
            lr = float(decision.get("params", {}).get("lr", lr))


if __name__ == "__main__":
    main()
