#!/usr/bin/env python3
"""The Python SDK's overhead (issue 21): Dial's ``study.optimize`` against
Optuna 3.1's ``study.optimize`` with SQLite storage, in the same script.

Both sides run the same trivial objective, (x - 2)^2 + (y + 1)^2 over two
floats in [-10, 10], for N trials in J threads (default 2,000 trials, 8
threads), once per pairing of samplers:

- random: Dial ``searcher: {random: {}}`` against ``RandomSampler``;
- tpe: Dial ``searcher: {tpe: {}}`` against Optuna's default sampler,
  ``TPESampler`` (default settings).

Dial: a real ``dial-scheduler`` from the build, started for each run on a
fresh SQLite file with its default (durable) settings: every answer waits
for the commit that holds it. ``dial.connect(address)`` then
``study.optimize(fn, n_trials=N, n_jobs=J)`` on a study with
``budget: {max_trials: N, max_parallel_trials: J}``.

Optuna: ``optuna.create_study(storage="sqlite:///<fresh file>")`` and
``study.optimize(fn, n_trials=N, n_jobs=J)``; the objective calls
``trial.suggest_float`` for x and y, as Optuna's define-by-run API asks.

Timed: the ``optimize`` call alone (creating the study is not). Each side
must end with exactly N COMPLETE trials (checked). An error on either side
(e.g. SQLite's "database is locked") is recorded in the results, not hidden.
Figures: wall seconds, trials/s, the CPU seconds of this process and of the
scheduler, and Dial/Optuna trials/s per pairing. Everything printed also
goes to bench/python/results/<date>-<time>-optimize.txt (a run with other
counts: ...-optimize-<N>x<J>.txt). Exit status: 0 when every pairing meets
--target (20x), 1 when one does not, and an AssertionError when a run did
not end with N COMPLETE trials or raised.

usage: bench/python/run.sh [BUILD_DIR] [flags]
       PYTHON bench/python/optimize_bench.py --build build [--trials 200]
           [--jobs 8] [--pairings random,tpe] [--repeats 1] [--out FILE]
PYTHON needs the SDK (``pip install ./python``) and Debian's python3-optuna
(a virtualenv made with --system-site-packages sees it).
"""
import argparse
import datetime
import json
import logging
import os
import platform
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import dial
import optuna

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LOW, HIGH = -10.0, 10.0


def quadratic(x, y):
    return (x - 2.0) ** 2 + (y + 1.0) ** 2


def dial_objective(trial):
    return quadratic(trial.params["x"], trial.params["y"])


def optuna_objective(trial):
    return quadratic(trial.suggest_float("x", LOW, HIGH),
                     trial.suggest_float("y", LOW, HIGH))


def cpu_seconds():
    """This process's user + system CPU time."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu_seconds(pid):
    """Another process's user + system CPU time, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class Scheduler:
    """A dial-scheduler on a free loopback port, on a fresh database."""

    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="dial-optimize-bench-")
        self.stderr_path = os.path.join(self.dir, "scheduler.err")
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(
                [binary, "--db=" + os.path.join(self.dir, "dial.db"),
                 "--checkpoint-root=" + os.path.join(self.dir, "ckpt"),
                 "--listen=127.0.0.1:0", "--log-level=warn"],
                stdout=subprocess.PIPE, stderr=err, text=True,
                start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if "listening on" not in line:
            self.stop()
            with open(self.stderr_path, errors="replace") as f:
                raise SystemExit(f"dial-scheduler did not start: {line!r}\n"
                                 f"{f.read()}")
        self.address = line.strip().rsplit(" ", 1)[-1]

    def cpu(self):
        return proc_cpu_seconds(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_dial(binary, searcher, trials, jobs):
    scheduler = Scheduler(binary)
    result = {"side": "dial", "sampler": searcher, "trials": trials,
              "jobs": jobs, "error": None}
    try:
        with dial.connect(scheduler.address) as client:
            study = client.create_study({
                "name": f"optimize-{searcher}",
                "objective": {"metric": "value", "goal": "MINIMIZE"},
                "search_space": [
                    {"name": "x", "float": {"min": LOW, "max": HIGH}},
                    {"name": "y", "float": {"min": LOW, "max": HIGH}}],
                "searcher": {searcher: {}},
                "budget": {"max_trials": trials,
                           "max_parallel_trials": jobs}})
            cpu0, sched0 = cpu_seconds(), scheduler.cpu()
            t0 = time.perf_counter()
            try:
                finished = study.optimize(dial_objective, n_trials=trials,
                                          n_jobs=jobs)
            except Exception as e:  # recorded, not hidden
                finished = None
                result["error"] = f"{type(e).__name__}: {e}"
            wall = time.perf_counter() - t0
            cpu1, sched1 = cpu_seconds(), scheduler.cpu()
            counts = study.trial_counts
            best = study.best_trial
            result.update(
                finished=finished, wall_s=wall,
                complete=counts.get("COMPLETED", 0),
                states={k: v for k, v in counts.items() if v},
                study_state=study.state,
                best=best.value if best else None,
                client_cpu_s=cpu1 - cpu0,
                scheduler_cpu_s=None if sched0 is None or sched1 is None
                else sched1 - sched0)
    finally:
        scheduler.stop()
    return result


def run_optuna(sampler_name, trials, jobs, seed):
    tmp = tempfile.mkdtemp(prefix="optuna-optimize-bench-")
    result = {"side": "optuna", "trials": trials, "jobs": jobs,
              "error": None}
    try:
        if sampler_name == "random":
            sampler = optuna.samplers.RandomSampler(seed=seed)
        else:
            sampler = optuna.samplers.TPESampler(seed=seed)  # the default
        result["sampler"] = type(sampler).__name__
        study = optuna.create_study(
            storage="sqlite:///" + os.path.join(tmp, "optuna.db"),
            study_name=f"optimize-{sampler_name}", sampler=sampler,
            direction="minimize")
        cpu0 = cpu_seconds()
        t0 = time.perf_counter()
        try:
            study.optimize(optuna_objective, n_trials=trials, n_jobs=jobs)
        except Exception as e:  # e.g. "database is locked": recorded
            result["error"] = f"{type(e).__name__}: {e}"
        wall = time.perf_counter() - t0
        cpu1 = cpu_seconds()
        states = {}
        for t in study.get_trials(deepcopy=False):
            states[t.state.name] = states.get(t.state.name, 0) + 1
        complete = states.get("COMPLETE", 0)
        result.update(wall_s=wall, complete=complete, states=states,
                      best=study.best_value if complete else None,
                      client_cpu_s=cpu1 - cpu0, scheduler_cpu_s=None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory with scheduler/dial-scheduler")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=8,
                    help="threads (n_jobs) on both sides")
    ap.add_argument("--pairings", default="random,tpe",
                    help="comma-separated: random, tpe")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each side per pairing (Dial, Optuna, ...)")
    ap.add_argument("--seed", type=int, default=1,
                    help="Optuna's sampler seed")
    ap.add_argument("--target", type=float, default=20.0,
                    help="the Dial/Optuna trials/s ratio to meet")
    ap.add_argument("--out", default=None,
                    help="results file (default bench/python/results/"
                         "<date>-<time>-optimize[-NxJ].txt)")
    args = ap.parse_args()
    pairings = [p for p in args.pairings.split(",") if p]
    for p in pairings:
        if p not in ("random", "tpe"):
            ap.error(f"--pairings: unknown pairing {p!r}")
    binary = os.path.join(args.build, "scheduler", "dial-scheduler")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"no {binary}: build it first")

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)

    default = args.trials == 2000 and args.jobs == 8
    out = args.out or os.path.join(
        ROOT, "bench", "python", "results",
        datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S") + "-optimize"
        + ("" if default else f"-{args.trials}x{args.jobs}") + ".txt")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    lines = []

    def log(text=""):
        print(text, flush=True)
        lines.append(text)

    try:
        commit = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet"]
                               ).returncode != 0
    except OSError:
        commit, dirty = "?", False
    import grpc
    log(f"optimize benchmark {datetime.datetime.now().isoformat(timespec='seconds')}"
        f" on {platform.node()}, {os.cpu_count()} CPUs, load average"
        f" {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    log(f"commit {commit}{' (with local changes)' if dirty else ''};"
        f" scheduler {binary}")
    log(f"python {platform.python_version()} ({sys.executable}), dial"
        f" {dial.__version__}, grpcio {grpc.__version__}, optuna"
        f" {optuna.__version__}")
    log(f"{args.trials} trials, {args.jobs} threads, pairings"
        f" {', '.join(pairings)}, {args.repeats} repeat(s)")
    command = "bench/python/run.sh " + os.path.relpath(args.build, ROOT)
    if not default:
        command += f" --trials {args.trials} --jobs {args.jobs}"
    if pairings != ["random", "tpe"]:
        command += f" --pairings {','.join(pairings)}"
    if args.repeats != 1:
        command += f" --repeats {args.repeats}"
    log(f"command: {command}")

    results = []
    for pairing in pairings:
        for rep in range(args.repeats):
            for side in ("dial", "optuna"):
                log(f"--- {pairing} #{rep + 1}: {side} ...")
                if side == "dial":
                    r = run_dial(binary, pairing, args.trials, args.jobs)
                else:
                    r = run_optuna(pairing, args.trials, args.jobs,
                                   args.seed + rep)
                r["pairing"], r["repeat"] = pairing, rep + 1
                r["trials_per_s"] = r["complete"] / r["wall_s"] \
                    if r.get("wall_s") else None
                results.append(r)
                log(f"    {r['complete']} complete in {r['wall_s']:.2f} s"
                    f" ({fmt(r['trials_per_s'])} trials/s); states"
                    f" {r['states']}"
                    + (f"; ERROR {r['error']}" if r["error"] else ""))

    log("")
    header = (f"{'pairing':8} {'side':7} {'sampler':14} {'complete':>9}"
              f" {'wall s':>9} {'trials/s':>9} {'client CPU s':>13}"
              f" {'sched CPU s':>12}")
    log(header)
    log("-" * len(header))
    for r in results:
        log(f"{r['pairing']:8} {r['side']:7} {r['sampler']:14}"
            f" {r['complete']:>9} {fmt(r['wall_s'], 2):>9}"
            f" {fmt(r['trials_per_s']):>9} {fmt(r['client_cpu_s'], 2):>13}"
            f" {fmt(r['scheduler_cpu_s'], 2):>12}")
    log("")
    ok = True
    for pairing in pairings:
        runs = [r for r in results if r["pairing"] == pairing]
        d = sum(r["complete"] for r in runs if r["side"] == "dial") / sum(
            r["wall_s"] for r in runs if r["side"] == "dial")
        o = sum(r["complete"] for r in runs if r["side"] == "optuna") / sum(
            r["wall_s"] for r in runs if r["side"] == "optuna")
        ratio = d / o if o else float("inf")
        met = ratio >= args.target
        ok = ok and met
        log(f"{pairing}: Dial {d:,.1f} trials/s, Optuna {o:,.1f} trials/s:"
            f" Dial/Optuna {ratio:.1f}x (target >= {args.target:g}x:"
            f" {'met' if met else 'NOT met'})")
    problems = []
    for r in results:
        if r["error"]:
            problems.append(f"{r['pairing']} #{r['repeat']} {r['side']}:"
                            f" {r['error']}")
        if r["complete"] != args.trials:
            problems.append(f"{r['pairing']} #{r['repeat']} {r['side']}:"
                            f" {r['complete']} of {args.trials} trials"
                            f" COMPLETE ({r['states']})")
    for p in problems:
        log(f"!!! {p}")
    log("")
    for r in results:
        log(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                        for k, v in r.items()}, default=str))
    log(f"results: {os.path.relpath(out, ROOT)}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    # Every run must have finished all its trials: a figure from fewer
    # trials would not be the figure.
    assert not problems, "; ".join(problems)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
