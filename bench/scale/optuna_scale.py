"""Peer for Dial's scheduler-throughput benchmark: the same work Dial's load
generator does, done through Optuna 3.1 with SQLite storage
(optuna.storages.RDBStorage('sqlite:///PATH'), always a fresh database file),
or with --db=postgresql+psycopg2://... on PostgreSQL (a fresh database the
caller made).

--mode reports: one study (minimize, SuccessiveHalvingPruner(min_resource=1,
  reduction_factor=3)); each worker loops until the deadline: ask, suggest
  x in [0, 1], then for step 1..K report x * (1 + 1/step) and ask
  should_prune (tell PRUNED and stop if so), tell the value after step K.
  One report = trial.report + trial.should_prune; its latency is timed.
  Prints reports/s, trials/s, p50/p99 report latency (ms), total reports.
--mode asktell: N trivial trials split over the workers (ask, suggest x, one
  report at step 1 + should_prune, tell). Prints trials/s and elapsed s.

Workers are separate processes (multiprocessing, 'spawn'), each with its own
RDBStorage connection: threads in one process would serialise on the GIL,
so processes are Optuna's best case with SQLite. The measured window starts
when every worker has loaded the study (a Barrier) and ends when the last
worker stops; a trial running at the deadline is finished and counted.

usage: /usr/bin/python3 bench/scale/optuna_scale.py --mode reports --workers 4 --seconds 20 --json
       /usr/bin/python3 bench/scale/optuna_scale.py --mode asktell --workers 4 --trials 2000 --json
(/usr/bin/python3 is Debian's, with python3-optuna 3.1.)
"""
import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
import warnings

import optuna

STUDY = "dial-scale"


def storage(db):
    # --db may be a server database's SQLAlchemy URL (PostgreSQL); a path is
    # SQLite, with a long busy timeout, so concurrent writers wait for the
    # lock rather than fail with "database is locked".
    if "://" in db:
        return optuna.storages.RDBStorage(db)
    return optuna.storages.RDBStorage(
        "sqlite:///" + db, engine_kwargs={"connect_args": {"timeout": 300}})


def quiet():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")


def worker(args, n_trials, barrier, queue):
    quiet()
    out = {"reports": 0, "trials": 0, "lat": [], "end": 0.0, "error": None}
    try:
        study = optuna.load_study(study_name=STUDY, storage=storage(args.db))
        barrier.wait()
        deadline = time.monotonic() + args.seconds
        steps = args.steps if args.mode == "reports" else 1
        while (time.monotonic() < deadline if args.mode == "reports"
               else out["trials"] < n_trials):
            trial = study.ask()
            x = trial.suggest_float("x", 0.0, 1.0)
            value = x
            for step in range(1, steps + 1):
                value = x * (1.0 + 1.0 / step)
                t0 = time.perf_counter()
                trial.report(value, step)
                prune = trial.should_prune()
                out["lat"].append(time.perf_counter() - t0)
                out["reports"] += 1
                if prune:
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    break
            else:
                study.tell(trial, value)
            out["trials"] += 1
    except Exception as e:  # report it to the parent rather than hang it
        out["error"] = repr(e)
        barrier.abort()
    out["end"] = time.monotonic()
    queue.put(out)


def percentile(sorted_xs, p):
    if not sorted_xs:
        return float("nan")
    return sorted_xs[min(len(sorted_xs) - 1, int(p / 100.0 * len(sorted_xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["reports", "asktell"], default="reports")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=27)
    ap.add_argument("--db", default=None,
                    help="SQLite file (default: a fresh one) or an SQLAlchemy URL")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    quiet()

    if args.db is None:
        args.db = os.path.join(tempfile.mkdtemp(prefix="optuna_scale_"), "optuna.db")
    for suffix in ("", "-journal", "-wal", "-shm"):  # always a fresh database
        if "://" not in args.db and os.path.exists(args.db + suffix):
            os.remove(args.db + suffix)
    optuna.create_study(
        study_name=STUDY, storage=storage(args.db), direction="minimize",
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
        load_if_exists=True)

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.workers + 1)
    queue = ctx.Queue()
    share = [args.trials // args.workers + (i < args.trials % args.workers)
             for i in range(args.workers)]
    procs = [ctx.Process(target=worker, args=(args, share[i], barrier, queue))
             for i in range(args.workers)]
    for p in procs:
        p.start()
    try:
        barrier.wait()
    except Exception:
        pass  # a worker failed; its error is reported below
    start = time.monotonic()
    results = [queue.get() for _ in procs]  # drain before join
    for p in procs:
        p.join()
    errors = [r["error"] for r in results if r["error"]]
    if errors:
        raise SystemExit("worker failed: " + "; ".join(errors))

    elapsed = max(r["end"] for r in results) - start
    reports = sum(r["reports"] for r in results)
    trials = sum(r["trials"] for r in results)
    lat = sorted(x for r in results for x in r["lat"])
    res = {"peer": "optuna", "version": optuna.__version__, "mode": args.mode,
           "workers": args.workers}
    if args.mode == "reports":
        res.update(steps=args.steps, reports=reports, trials=trials,
                   reports_per_s=round(reports / elapsed, 1),
                   trials_per_s=round(trials / elapsed, 2),
                   p50_ms=round(percentile(lat, 50) * 1e3, 3),
                   p99_ms=round(percentile(lat, 99) * 1e3, 3),
                   seconds=round(elapsed, 2))
        print(f"optuna {res['version']} reports, {args.workers} workers: "
              f"{reports} reports, {trials} trials in {elapsed:.2f} s = "
              f"{res['reports_per_s']} reports/s, {res['trials_per_s']} trials/s; "
              f"report latency p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms")
    else:
        res.update(trials=trials, trials_per_s=round(trials / elapsed, 2),
                   seconds=round(elapsed, 2))
        print(f"optuna {res['version']} asktell, {args.workers} workers: "
              f"{trials} trials in {elapsed:.2f} s = {res['trials_per_s']} trials/s")
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
