"""examples/python/ask_tell.py and analyze.py run against a real scheduler
as a user would run them, and say what they should."""
import os
import subprocess
import sys

import dial
from conftest import SOURCE_DIR


def run_example(name, address, *args):
    return subprocess.run(
        [sys.executable, os.path.join(SOURCE_DIR, "examples", "python", name),
         *args], env={**os.environ, "DIAL_SCHEDULER": address},
        capture_output=True, text=True, timeout=300, check=True).stdout


def test_ask_tell_then_analyze(start_scheduler):
    scheduler = start_scheduler()
    out = run_example("ask_tell.py", scheduler.address)
    study = dial.connect(scheduler.address).study("py-ask-tell")
    counts = study.trial_counts
    assert counts == {"COMPLETED": 40}
    best = study.best_trial
    # It prints the study's real best trial.
    assert out.strip() == (f"best: {best.number} {best.params} {best.value}")
    # Every trial reported its 5-step curve, ending at its final value.
    trial = study.get_trial(best.number)
    assert [p.step for p in trial.history] == [1, 2, 3, 4, 5]
    assert trial.history[-1].metrics["loss"] == best.value

    # Run again: the study exists and its budget is used, so it only
    # prints the best again.
    assert run_example("ask_tell.py", scheduler.address) == out

    report = run_example("analyze.py", scheduler.address, "py-ask-tell")
    assert "py-ask-tell" in report and "40 trials" in report
    assert "COMPLETED" in report
    for name in ("lr", "act"):
        assert name in report
    for category in ("relu", "tanh", "gelu"):
        assert category in report
