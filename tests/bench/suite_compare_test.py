"""bench/suite: the function suite's self-check passes, and compare.py runs
Dial's tpe and cmaes (real scheduler, ask/tell over gRPC) and Optuna's on
three functions, one of them mixed and conditional (cmaes skips it); the
regrets are sane, Dial's runs repeat exactly, and summarize.py counts the
functions.

usage: suite_compare_test.py PYTHON SOURCE_DIR
"""
import json
import os
import subprocess
import sys

python, source = sys.argv[1:3]
suite = os.path.join(source, "bench", "suite")
subprocess.run(["/usr/bin/python3", os.path.join(suite, "functions.py"),
                "--check"], check=True, stdout=subprocess.DEVNULL)


def run(side):
    out = subprocess.run(
        [python, os.path.join(suite, "compare.py"), "--seeds", "2",
         "--budgets", "12,25", "--functions", "branin2,hartmann3,mixed_nn",
         "--side", side],
        check=True, capture_output=True, text=True, timeout=600).stdout
    return [json.loads(l) for l in out.splitlines()]


dial = run("dial")
optuna = run("optuna")
for lines, side in ((dial, "dial"), (optuna, "optuna")):
    # tpe on 3 functions, cmaes on the 2 without conditional parameters.
    assert len(lines) == 2 * 5, (side, lines)
    for line in lines:
        assert line["side"] == side, line
        assert not (line["sampler"] == "cmaes"
                    and line["function"] == "mixed_nn"), line
        r = line["regret"]
        assert set(r) == {"12", "25"}, line
        assert 0 <= r["25"] <= r["12"] < float("inf"), line
assert [l["regret"] for l in run("dial")] == [l["regret"] for l in dial], \
    "Dial's runs differ between two runs with the same seeds"
summary = subprocess.run(
    ["/usr/bin/python3", os.path.join(suite, "summarize.py"), "--json"],
    input="\n".join(json.dumps(l) for l in dial + optuna), check=True,
    capture_output=True, text=True).stdout
counts = {json.loads(l)["sampler"]: json.loads(l) for l in summary.splitlines()}
assert counts["tpe"]["functions"] == 3 and counts["cmaes"]["functions"] == 2, \
    counts
print("suite compare smoke: ok")
