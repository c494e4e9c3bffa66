"""Dial's trial schedulers against Optuna 3.1's pruners on a table of
recorded learning curves (bench/curves/FORMAT.md), at equal consumed
budget.

usage: compare.py TABLE [--seeds N] [--budget EPOCHS] [--metric M]
                  [--goal minimize|maximize] [--resource steps|seconds]
                  [--methods a,b] [--parallel K]

Dial's methods run through the real scheduler and a real worker, with
``dial-replay`` as the trial command (each study one trial at a time, so
its decisions are deterministic; studies run side by side). Optuna's
pruners see the same curves in-process. Both draw configurations at random
(Dial's random searcher, Optuna's RandomSampler, seeded per run) from the
table's parameter ranges; a proposal maps to the nearest recorded
configuration.

The budget is in full curves: --budget 20 is what 20 configurations trained
to the end consume (steps, or with --resource seconds their elapsed_s). A
run is cut at that point; the configuration it would return is the best at
the last step among the trials that reached it (or, if none did, the best
at the furthest step reached); its regret is its recorded final value
minus the best final value in the table. One JSON line per method: the
median regret over seeds at the budget, its quartiles, the median regret at
a quarter, half and three quarters of it, and the configurations tried.
"""
import argparse
import csv
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
import local_dial  # noqa: E402
from local_dial import BUILD  # noqa: E402
FRACTIONS = (0.25, 0.5, 0.75, 1.0)


# -- the table ------------------------------------------------------------
class Table:
    def __init__(self, path, metric, goal):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            rows = list(reader)
        if header[0] != "config_id" or "step" not in header or \
                "elapsed_s" not in header:
            sys.exit(f"{path}: not a curve table (bench/curves/FORMAT.md)")
        if metric not in header:
            sys.exit(f"--metric: {metric!r} is not a column of {path}")
        s = header.index("step")
        self.params = header[1:s]
        col = {h: i for i, h in enumerate(header)}
        self.sign = 1.0 if goal == "minimize" else -1.0
        numeric = {p: all(_is_number(r[col[p]]) for r in rows)
                   for p in self.params}
        self.curves = {}  # config -> [(step, elapsed, signed value)]
        self.values = {}  # config -> params
        for r in rows:
            c = int(r[0])
            self.values.setdefault(c, {
                p: float(r[col[p]]) if numeric[p] else r[col[p]]
                for p in self.params})
            v = float(r[col[metric]])
            v = self.sign * v if math.isfinite(v) else math.inf
            self.curves.setdefault(c, []).append(
                (int(r[s]), float(r[col["elapsed_s"]]), v))
        for pts in self.curves.values():
            pts.sort()
        self.final = {c: pts[-1][2] for c, pts in self.curves.items()}
        self.best_final = min(self.final.values())
        self.steps = sorted({p[0] for pts in self.curves.values()
                             for p in pts})
        self.space = {}
        for p in self.params:
            vals = [v[p] for v in self.values.values()]
            if not numeric[p]:
                self.space[p] = ("cat", sorted(set(vals)))
                continue
            lo, hi = min(vals), max(vals)
            log = lo > 0 and hi >= 10 * lo
            whole = all(float(v).is_integer() for v in vals)
            self.space[p] = ("int" if whole else "float", lo, hi, log)
        self.ranges = {}
        for p, spec in self.space.items():
            if spec[0] != "cat":
                lo, hi, log = spec[1], spec[2], spec[3]
                f = math.log if log else float
                self.ranges[p] = (f(lo), f(hi), log)

    def nearest(self, params):
        """The same mapping as dial-replay's (FORMAT.md)."""
        best, best_d = None, math.inf
        for c in sorted(self.values):
            d = 0.0
            for p, want in params.items():
                have = self.values[c][p]
                if p not in self.ranges:
                    d += 0.0 if str(have) == str(want) else 1.0
                    continue
                lo, hi, log = self.ranges[p]
                f = (lambda x: math.log(max(x, 1e-300))) if log else float
                scale = (hi - lo) if hi > lo else 1.0
                d += ((f(want) - f(have)) / scale) ** 2 if hi > lo else 0.0
            if d < best_d:
                best, best_d = c, d
        return best

    def cost(self, point, resource):
        return point[1] if resource == "seconds" else point[0]

    def rungs(self, resource):
        """The first and last reported step the schedulers are set by: the
        table's steps, or with seconds the median first and full elapsed
        times in milliseconds (what dial-replay reports)."""
        if resource != "seconds":
            return self.steps[0], self.steps[-1]
        return (max(1, round(1000 * statistics.median(
            pts[0][1] for pts in self.curves.values()))),
            round(1000 * self.full_cost("seconds")))

    def full_cost(self, resource):
        return statistics.median(self.cost(pts[-1], resource)
                                 for pts in self.curves.values())


def _is_number(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


# -- what a run returns, cut at a budget ------------------------------------
def outcome(table, events, budget, resource):
    """events: (trial, config, step, elapsed) in report order. The regret
    of what the run returns after `budget` is consumed, and the configs
    tried by then."""
    consumed, seen, at = 0.0, {}, {}
    for trial, config, step, elapsed in events:
        before = seen.get(trial, (0, 0.0))
        cost = elapsed - before[1] if resource == "seconds" else \
            step - before[0]
        if consumed + cost > budget + 1e-9:
            break
        consumed += cost
        seen[trial] = (step, elapsed)
        at[trial] = (config, step)
    if not at:
        return None, 0
    top = max(step for _, step in at.values())
    value = {}
    for trial, (config, step) in at.items():
        if step != top:
            continue
        v = next(p[2] for p in table.curves[config] if p[0] == step)
        value[trial] = (v, trial)
    chosen = at[min(value, key=lambda t: value[t])][0]
    tried = len({config for config, _ in at.values()})
    return table.final[chosen] - table.best_final, tried


# -- Optuna ----------------------------------------------------------------
def optuna_run(table, pruner_name, seed, budget, resource):
    """optuna-PRUNER with RandomSampler; optuna-tpe-PRUNER with TPESampler
    (defaults)."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    first, last = table.rungs(resource)
    pruners = {
        "optuna-nop": lambda: optuna.pruners.NopPruner(),
        "optuna-median": lambda: optuna.pruners.MedianPruner(
            n_startup_trials=3, n_warmup_steps=first),
        "optuna-percentile": lambda: optuna.pruners.PercentilePruner(
            25.0, n_startup_trials=3, n_warmup_steps=first),
        "optuna-sha": lambda: optuna.pruners.SuccessiveHalvingPruner(
            min_resource=first, reduction_factor=3),
        "optuna-hyperband": lambda: optuna.pruners.HyperbandPruner(
            min_resource=first, max_resource=last, reduction_factor=3),
    }
    if pruner_name.startswith("optuna-tpe-"):
        sampler = optuna.samplers.TPESampler(seed=seed)
        pruner_name = "optuna-" + pruner_name[len("optuna-tpe-"):]
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    # A fixed name: HyperbandPruner picks a trial's bracket from a hash of
    # the study's name and the trial number, and the default name is random.
    study = optuna.create_study(study_name=f"curves-{seed}", sampler=sampler,
                                pruner=pruners[pruner_name]())
    events, spent = [], {"total": 0.0}

    def objective(trial):
        params = {}
        for p, spec in table.space.items():
            if spec[0] == "cat":
                params[p] = trial.suggest_categorical(p, spec[1])
            elif spec[0] == "int":
                params[p] = trial.suggest_int(p, int(spec[1]), int(spec[2]),
                                              log=spec[3])
            else:
                params[p] = trial.suggest_float(p, spec[1], spec[2],
                                                log=spec[3])
        config = table.nearest(params)
        last_ms, before = 0, (0, 0.0)
        for step, elapsed, value in table.curves[config]:
            events.append((trial.number, config, step, elapsed))
            spent["total"] += elapsed - before[1] if resource == "seconds" \
                else step - before[0]
            before = (step, elapsed)
            at = step
            if resource == "seconds":
                at = max(round(elapsed * 1000), last_ms + 1)
                last_ms = at
            trial.report(value, at)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return value

    while spent["total"] <= budget:
        study.optimize(objective, n_trials=1)
    return events


# -- Dial ------------------------------------------------------------------
class DialFleet:
    """A local scheduler and one worker with `slots` slots."""

    def __init__(self, slots):
        self.dir = tempfile.mkdtemp(prefix="dial-curves-")
        try:
            scheduler, address = local_dial.start_scheduler(self.dir)
        except RuntimeError as e:
            sys.exit(str(e))
        self.procs = [scheduler]
        self.replay = os.path.join(BUILD, "replay", "dial-replay")
        self.procs.append(subprocess.Popen(
            [os.path.join(BUILD, "worker", "dial-worker"),
             "--scheduler=" + address, f"--slots={slots}",
             f"--cpus={slots}", "--host=replay",
             "--work-dir=" + os.path.join(self.dir, "w"),
             "--checkpoint-root=" + os.path.join(self.dir, "ckpt"),
             "--allow-command=" + self.replay, "--max-log-bytes=65536"],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "w.log"), "w"),
            stdin=subprocess.DEVNULL))
        try:
            import dial
            self.client = dial.connect(address)
        except BaseException:
            self.close()  # nothing started here outlives the run
            raise

    def close(self):
        local_dial.stop(self.procs)
        if not os.environ.get("DIAL_KEEP"):
            subprocess.run(["rm", "-rf", self.dir], check=False)


CURVE = {}  # more fields of scheduler.curve (--curve-optimism)
RANK_CHECK = {}  # fields of scheduler.rank_check (--rank-check-min-trials)


def dial_scheduler_spec(method, table, resource):
    """(searcher, scheduler) of a Dial method; NAME-checked is NAME with
    scheduler.rank_check at its defaults."""
    if method.endswith("-checked"):
        searcher, scheduler = dial_scheduler_spec(method[:-len("-checked")],
                                                  table, resource)
        return searcher, dict(scheduler, rank_check=dict(RANK_CHECK))
    for prefix, searcher in (("dial-gp-", "bayesian"), ("dial-tpe-", "tpe")):
        if method.startswith(prefix):
            _, scheduler = dial_scheduler_spec(
                "dial-" + method[len(prefix):], table, resource)
            return {searcher: {}}, scheduler
    first, last = table.rungs(resource)
    asha = {"min_steps": first, "max_steps": last, "reduction_factor": 3}
    return {
        "dial-fifo": ({"random": {}}, {"fifo": {}}),
        "dial-median": ({"random": {}}, {"median": {
            "grace_steps": first, "min_samples": 3}}),
        "dial-asha": ({"random": {}}, {"asha": asha}),
        "dial-asha-promotion": ({"random": {}},
                                {"asha": dict(asha, promotion=True)}),
        "dial-hyperband": ({"random": {}}, {"hyperband": asha}),
        "dial-hyperband-sync": ({"random": {}},
                                {"hyperband": dict(asha, synchronous=True)}),
        "dial-bohb": ({"tpe": {}}, {"hyperband": asha}),
        "dial-curve": ({"random": {}}, {"curve": dict(
            max_steps=last, grace_steps=first, **CURVE)}),
    }[method]


def dial_run(fleet, table_path, table, method, seed, budget, resource, tag,
             metric, goal):
    searcher, scheduler = dial_scheduler_spec(method, table, resource)
    searcher = {k: dict(v, seed=seed) for k, v in searcher.items()}
    space = []
    for p, spec in table.space.items():
        if spec[0] == "cat":
            space.append({"name": p, "categorical": {"values": spec[1]}})
        else:
            kind = "int" if spec[0] == "int" else "float"
            lo, hi = (int(spec[1]), int(spec[2])) if kind == "int" else \
                (spec[1], spec[2])
            space.append({"name": p, kind: {
                "min": lo, "max": hi, "scale": "LOG" if spec[3] else
                "LINEAR"}})
    argv = [fleet.replay, "--table=" + os.path.abspath(table_path)]
    if resource == "seconds":
        argv.append("--resource=milliseconds")
    name = f"{method}-{seed}-{tag}"
    full = table.full_cost(resource)
    first = min(table.cost(pts[0], resource)
                for pts in table.curves.values())
    spec = {
        "name": name,
        "objective": {"metric": metric, "goal": goal.upper()},
        "search_space": space, "searcher": searcher,
        "scheduler": scheduler,
        "budget": {"max_trials": int(min(5000, math.ceil(
            budget * full / max(first, 1e-9)) + 1)),
            "max_parallel_trials": 1},
        "trial": {"command": {"argv": argv}},
    }
    study = fleet.client.create_study(spec)
    # Stop once the budget is consumed; the run is cut there afterwards, so
    # what ran past it changes nothing.
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        trials = list(study.trials())
        spent = sum(t.last_step for t in trials)
        if resource == "seconds":
            spent /= 1000.0  # replayed steps are milliseconds
        if study.state != "STUDY_ACTIVE" or spent > budget:
            break
        time.sleep(0.2)
    if study.state == "STUDY_ACTIVE":
        study.stop()
    events = []
    for t in study.trials():
        record = study.get_trial(t.number)
        for p in record.history:
            if "config_id" not in p.metrics:
                continue
            events.append((p.time, t.number, int(p.metrics["config_id"]),
                           int(p.metrics["table_step"]),
                           p.metrics["elapsed_s"]))
    events.sort()
    return [e[1:] for e in events]


# -- the comparison ----------------------------------------------------------
DIAL = ["dial-fifo", "dial-median", "dial-asha", "dial-asha-promotion",
        "dial-hyperband", "dial-bohb", "dial-curve"]
# Synchronous Hyperband sizes its brackets from max_trials, which a budget
# cut here sets far above what runs: its first bracket never finishes.
# NAME-checked: NAME with scheduler.rank_check (docs/searchers.md).
CHECKED = [m + "-checked" for m in DIAL if m != "dial-fifo"]
# dial-gp-NAME, dial-tpe-NAME: NAME with the bayesian (GP) or tpe searcher
# instead of random;
# optuna-tpe-NAME: Optuna's pruner NAME with its TPESampler.
MODEL = ["dial-gp-fifo", "dial-gp-asha", "dial-gp-asha-promotion",
         "dial-gp-hyperband", "dial-gp-median", "dial-tpe-fifo"]
MORE = ["dial-hyperband-sync"] + CHECKED + MODEL + \
    [m + "-checked" for m in MODEL if not m.endswith("-fifo")]
OPTUNA = ["optuna-nop", "optuna-median", "optuna-percentile", "optuna-sha",
          "optuna-hyperband"]
OPTUNA_TPE = ["optuna-tpe-" + m[len("optuna-"):] for m in OPTUNA]


def quantile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=float, default=20,
                    help="in full curves (default 20)")
    ap.add_argument("--metric", default="val_loss")
    ap.add_argument("--goal", default="minimize",
                    choices=["minimize", "maximize"])
    ap.add_argument("--resource", default="steps",
                    choices=["steps", "seconds"])
    ap.add_argument("--methods", default=",".join(DIAL + OPTUNA),
                    help="comma-separated, or 'all' (with NAME-checked, "
                    "dial-gp-NAME and optuna-tpe-NAME)")
    ap.add_argument("--parallel", type=int, default=8,
                    help="Dial studies replayed side by side")
    ap.add_argument("--curve-optimism", type=float, default=0,
                    help="scheduler.curve.optimism for dial-curve")
    ap.add_argument("--curve-min-curves", type=int, default=0,
                    help="scheduler.curve.min_curves for dial-curve")
    ap.add_argument("--rank-check-min-trials", type=int, default=0,
                    help="scheduler.rank_check.min_trials for NAME-checked")
    ap.add_argument("--rank-check-min-correlation", type=float, default=0,
                    help="scheduler.rank_check.min_correlation")
    a = ap.parse_args()
    if a.rank_check_min_trials:
        RANK_CHECK["min_trials"] = a.rank_check_min_trials
    if a.rank_check_min_correlation:
        RANK_CHECK["min_correlation"] = a.rank_check_min_correlation
    if a.curve_optimism:
        CURVE["optimism"] = a.curve_optimism
    if a.curve_min_curves:
        CURVE["min_curves"] = a.curve_min_curves
    methods = a.methods.split(",")
    if a.methods == "all":
        methods = DIAL + CHECKED + MODEL + \
            [m + "-checked" for m in MODEL if not m.endswith("-fifo")] + \
            OPTUNA + OPTUNA_TPE
    for m in methods:
        if m not in DIAL + MORE + OPTUNA + OPTUNA_TPE:
            sys.exit(f"--methods: unknown {m!r}; known: "
                     f"{', '.join(DIAL + MORE + OPTUNA + OPTUNA_TPE)}")
    if a.seeds < 1 or a.budget <= 0:
        sys.exit("--seeds and --budget must be positive")
    table = Table(a.table, a.metric, a.goal)
    budget = a.budget * table.full_cost(a.resource)
    runs = {}  # (method, seed) -> events
    dial_jobs = [(m, s) for m in methods if m in DIAL + MORE
                 for s in range(1, a.seeds + 1)]
    if dial_jobs:
        fleet = DialFleet(a.parallel)
        lock = threading.Lock()
        tag = str(os.getpid())
        try:
            def worker():
                while True:
                    with lock:
                        if not dial_jobs:
                            return
                        m, s = dial_jobs.pop(0)
                    events = dial_run(fleet, a.table, table, m, s, budget,
                                      a.resource, tag, a.metric, a.goal)
                    with lock:
                        runs[(m, s)] = events
            threads = [threading.Thread(target=worker)
                       for _ in range(a.parallel)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            fleet.close()
    for m in methods:
        if m in OPTUNA + OPTUNA_TPE:
            for s in range(1, a.seeds + 1):
                runs[(m, s)] = optuna_run(table, m, s, budget, a.resource)
    for m in methods:
        curve, finals, tried = [], [], []
        for f in FRACTIONS:
            regrets = []
            for s in range(1, a.seeds + 1):
                r, n = outcome(table, runs[(m, s)], f * budget, a.resource)
                regrets.append(math.inf if r is None else r)
                if f == 1.0:
                    finals.append(regrets[-1])
                    tried.append(n)
            curve.append([round(f * budget, 3),
                          round(statistics.median(regrets), 6)])
        print(json.dumps({
            "table": os.path.basename(a.table), "method": m,
            "seeds": a.seeds, "budget": round(budget, 3),
            "resource": a.resource,
            "median_regret": round(statistics.median(finals), 6),
            "quartiles": [round(quantile(finals, 0.25), 6),
                          round(quantile(finals, 0.75), 6)],
            "regret_vs_consumed": curve,
            "configs_tried": statistics.median(tried)}), flush=True)


if __name__ == "__main__":
    main()
