"""Records real learning curves: every configuration of a task trained to
the end, one CSV row per evaluation (bench/curves/FORMAT.md).

usage: record.py [--tasks a,b] [--configs N] [--jobs J] [--out DIR]

A configuration's rows are appended to OUT/TASK.csv.partial as soon as it
ends, so an interrupted recording goes on where it stopped; the finished
table is OUT/TASK.csv.gz.
"""
import argparse
import csv
import gzip
import json
import math
import os
import re
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))


def log_uniform(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def log_int(rng, lo, hi):
    return int(round(log_uniform(rng, lo, hi)))


# Each task: how a configuration is drawn, the fixed knobs, and how it runs.
TASKS = {
    "mlp-fmnist": {
        "runner": "dial-train",
        "knobs": {"dataset": "fashion-mnist", "model": "mlp", "steps": 500,
                  "eval_every": 25, "lr_schedule": "cosine"},
        "draw": lambda r: {
            "lr": log_uniform(r, 1e-4, 0.3),
            "units": log_int(r, 16, 512),
            "layers": int(r.integers(1, 4)),
            "dropout": float(r.uniform(0, 0.5)),
            "optimizer": str(r.choice(["sgd", "adam"])),
            "batch_size": int(r.choice([32, 64, 128, 256]))},
    },
    "cnn-fmnist": {
        "runner": "dial-train",
        "knobs": {"dataset": "fashion-mnist", "model": "cnn", "steps": 400,
                  "eval_every": 20, "batch_size": 64, "val_fraction": 0.03},
        "draw": lambda r: {
            "lr": log_uniform(r, 1e-4, 0.1),
            "channels": int(r.choice([4, 8, 16])),
            "conv_layers": int(r.integers(1, 3)),
            "optimizer": str(r.choice(["sgd", "adam"])),
            "weight_decay": log_uniform(r, 1e-6, 1e-2),
            "warmup_steps": int(r.integers(0, 201))},
    },
    "resnet-subset": {
        # 300 steps of 32: the ResNet sees 9,600 images, a sixth of an
        # epoch, validated on 2% of the training set (1,200 images).
        "runner": "dial-train",
        "knobs": {"dataset": "fashion-mnist", "model": "resnet", "blocks": 1,
                  "steps": 300, "eval_every": 15, "batch_size": 32,
                  "val_fraction": 0.02, "optimizer": "sgd"},
        "draw": lambda r: {
            "lr": log_uniform(r, 1e-3, 0.5),
            "channels": int(r.choice([4, 8])),
            "momentum": float(r.uniform(0.5, 0.95)),
            "label_smoothing": float(r.uniform(0, 0.2))},
    },
    "noisy-torch": {
        # PyTorch through dial.trial (bench/curves/noisy_trial.py).
        "runner": "pytorch",
        "draw": lambda r: {
            "lr": log_uniform(r, 1e-3, 1.0),
            "momentum": float(r.uniform(0, 0.95)),
            "hidden": log_int(r, 32, 256),
            "warmup_steps": int(r.integers(0, 201)),
            "weight_decay": log_uniform(r, 1e-6, 1e-2)},
    },
}

STEP_LINE = re.compile(r"^step\s+(\d+)\s+train_loss (\S+)\s+val_loss (\S+)"
                       r"\s+val_accuracy (\S+)")
METRICS = ["val_loss", "val_accuracy", "train_loss"]


def command(task, params):
    spec = TASKS[task]
    if spec["runner"] == "dial-train":
        knobs = dict(spec["knobs"], threads=1)
        return [os.path.join(BUILD, "trainer", "dial-train"),
                "--knobs=" + json.dumps(knobs),
                "--params=" + json.dumps(params)], {}
    py = os.path.join(BUILD, "python-venv", "bin", "python")
    env = {"DIAL_TRIAL_PARAMS": json.dumps(params), "DIAL_CPU_THREADS": "1"}
    return [py, os.path.join(ROOT, "bench", "curves", "noisy_trial.py")], env


def run_one(task, config_id, params):
    """Trains one configuration; returns its rows (dicts)."""
    argv, extra = command(task, params)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               **extra)
    rows, started = [], None
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    for line in proc.stdout:
        now = time.monotonic()
        if "starting at step 0" in line:
            started = now  # data loading is not part of any step
            continue
        point = None
        m = STEP_LINE.match(line)
        if m:
            point = {"step": int(m.group(1)), "train_loss": float(m.group(2)),
                     "val_loss": float(m.group(3)),
                     "val_accuracy": float(m.group(4))}
        elif line.startswith("{"):
            msg = json.loads(line)
            point = {"step": msg["step"]}
            point.update({k: round(float(v), 5)
                          for k, v in msg["metrics"].items()})
        if point is None:
            continue
        if started is None:
            raise RuntimeError(f"{task} {config_id}: a step before the start")
        point["elapsed_s"] = round(now - started, 3)
        rows.append(point)
    if proc.wait() != 0:
        raise RuntimeError(f"{task} {config_id}: exit {proc.returncode}")
    shown = {k: round(v, 6) if isinstance(v, float) else v
             for k, v in params.items()}
    return [dict(config_id=config_id, **shown, **r) for r in rows]


def record(task, configs, jobs, out):
    rng = np.random.default_rng(zlib.crc32(task.encode()))
    drawn = [TASKS[task]["draw"](rng) for _ in range(configs)]
    columns = (["config_id"] + list(drawn[0]) + ["step"] + METRICS +
               ["elapsed_s"])
    partial = os.path.join(out, task + ".csv.partial")
    done = set()
    if os.path.exists(partial):
        with open(partial) as f:
            done = {int(r["config_id"]) for r in csv.DictReader(f)}
    todo = [i for i in range(configs) if i not in done]
    fresh = not os.path.exists(partial)
    with open(partial, "a", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        if fresh:
            writer.writeheader()
        t0 = time.monotonic()
        with ThreadPoolExecutor(jobs) as pool:
            for n, rows in enumerate(pool.map(
                    lambda i: run_one(task, i, drawn[i]), todo)):
                writer.writerows(rows)
                f.flush()
                if (n + 1) % 20 == 0:
                    print(f"{task}: {n + 1}/{len(todo)} configurations, "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
    with open(partial) as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: (int(r["config_id"]), int(r["step"])))
    with gzip.open(os.path.join(out, task + ".csv.gz"), "wt",
                   newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    os.remove(partial)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "curves",
                                                  "tables"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for task in a.tasks.split(","):
        if task not in TASKS:
            sys.exit(f"--tasks: unknown task {task!r}; known: "
                     f"{', '.join(TASKS)}")
        t0 = time.monotonic()
        record(task, a.configs, a.jobs, a.out)
        print(f"{task}: recorded in {time.monotonic() - t0:.0f} s",
              flush=True)


if __name__ == "__main__":
    main()
