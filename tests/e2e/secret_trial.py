#!/usr/bin/env python3
"""A trial program for netns_security_test: checks that the worker gave it
its secret (the SHA-256 of $DIAL_TEST_SECRET must equal $SECRET_SHA256; the
secret itself is never printed), reports `loss` at step 1, waits (at most
GATE_TIMEOUT_S seconds) until GATE_FILE exists, so the test can attack a
trial that is surely running, then reports steps 2..STEPS."""
import hashlib
import json
import os
import sys
import time


def main():
    secret = os.environ.get("DIAL_TEST_SECRET", "")
    if hashlib.sha256(secret.encode()).hexdigest() != os.environ.get("SECRET_SHA256"):
        sys.exit("DIAL_TEST_SECRET is missing or is not the worker's secret")
    steps = int(os.environ.get("STEPS", "5"))
    gate = os.environ.get("GATE_FILE", "")
    gate_timeout = float(os.environ.get("GATE_TIMEOUT_S", "120"))
    lr = json.loads(os.environ.get("DIAL_TRIAL_PARAMS", "{}")).get("lr", 0.1)
    report = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
    decisions = os.fdopen(int(os.environ["DIAL_DECISION_FD"]), "r")
    for step in range(1, steps + 1):
        report.write(json.dumps({"step": step, "metrics": {"loss": lr / step}}) + "\n")
        decision = json.loads(decisions.readline())
        if decision["action"] in ("STOP", "PAUSE"):
            break
        if step == 1 and gate:
            deadline = time.monotonic() + gate_timeout
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)


if __name__ == "__main__":
    main()
