#!/usr/bin/env python3
"""A trial program for the reliability tests: reports `loss` at steps
1..STEPS, STEP_SLEEP seconds apart, and hangs (never reports) when its
attempt (DIAL_ATTEMPT) equals HANG_ON_ATTEMPT. It also appends
"attempt step" lines to TRACE_FILE, if set, so a test can see what each
attempt really ran."""
import json
import os
import time


def main():
    steps = int(os.environ.get("STEPS", "40"))
    pause = float(os.environ.get("STEP_SLEEP", "0.05"))
    attempt = os.environ.get("DIAL_ATTEMPT", "")
    report = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
    decisions = os.fdopen(int(os.environ["DIAL_DECISION_FD"]), "r")
    if attempt == os.environ.get("HANG_ON_ATTEMPT"):
        time.sleep(3600)
    trace = os.environ.get("TRACE_FILE")
    for step in range(1, steps + 1):
        time.sleep(pause)
        if trace:
            with open(trace, "a") as f:
                f.write(f"{attempt} {step}\n")
        report.write(json.dumps({"step": step, "metrics": {"loss": 1.0 / step}}) + "\n")
        decision = json.loads(decisions.readline())
        if decision["action"] in ("STOP", "PAUSE"):
            break


if __name__ == "__main__":
    main()
