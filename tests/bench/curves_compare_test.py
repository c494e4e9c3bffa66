"""bench/curves/compare.py on a small table of its documented format (one
numeric, one integer and one categorical parameter, rows out of order):
every method prints its line, the regrets are sane, ASHA tries more
configurations than FIFO at equal budget, and the Dial runs (real
scheduler, worker and dial-replay) repeat exactly.

usage: curves_compare_test.py PYTHON SOURCE_DIR BUILD_DIR
"""
import json
import math
import os
import random
import subprocess
import sys
import tempfile

python, source, build = sys.argv[1:4]
rng = random.Random(4)
with tempfile.TemporaryDirectory(prefix="dial-curves-test-") as tmp:
    table = os.path.join(tmp, "toy.csv")
    rows = []
    for c in range(30):
        lr = 10 ** rng.uniform(-3, -1)
        width = rng.choice([16, 32, 64])
        act = rng.choice(["relu", "tanh"])
        speed = 0.05 + lr * 20
        floor = 0.1 + lr * 3 + (0.05 if act == "tanh" else 0) + 0.2 / width
        for s in range(1, 11):
            rows.append(f"{c},{lr:.6g},{width},{act},{s * 10},"
                        f"{floor + math.exp(-speed * s):.6g},{0.3 * s}")
    rng.shuffle(rows)
    with open(table, "w") as f:
        f.write("config_id,lr,width,act,step,val_loss,elapsed_s\n")
        f.write("\n".join(rows) + "\n")
    methods = ["dial-fifo", "dial-asha", "dial-asha-checked", "dial-curve",
               "optuna-nop", "optuna-sha", "optuna-tpe-sha"]

    def run():
        out = subprocess.run(
            [python, os.path.join(source, "bench/curves/compare.py"), table,
             "--seeds", "2", "--budget", "5", "--parallel", "2",
             "--methods", ",".join(methods)],
            env=dict(os.environ, BUILD_DIR=build), capture_output=True,
            text=True, timeout=240)
        assert out.returncode == 0, out.stderr
        return {r["method"]: r for r in map(json.loads,
                                            out.stdout.splitlines())}

    first = run()
    assert sorted(first) == sorted(methods), first.keys()
    for m, r in first.items():
        assert 0 <= r["median_regret"] < 1, (m, r)
        assert r["configs_tried"] >= 1, (m, r)
        assert len(r["regret_vs_consumed"]) == 4, (m, r)
    assert first["dial-asha"]["configs_tried"] > \
        first["dial-fifo"]["configs_tried"], first
    second = run()
    for m in methods:
        assert first[m] == second[m], (m, first[m], second[m])
print("ok")
