"""Dial's `tpe` and `cmaes` searchers against Optuna 3.1's TPESampler and
CmaEsSampler (their defaults) on the function suite of functions.py.

usage: compare.py [--seeds N] [--budgets 50,100,200] [--samplers tpe,cmaes]
                  [--functions a,b] [--parallel K] [--side dial|optuna|both]
                  [--module FILE]

--module FILE runs the functions of another Python file instead of
functions.py's: it must define SUITE (a sequence of functions.Function),
by_name(name) and is_active(param, point) as functions.py does (importing
them from functions.py is enough), so functions the suite does not hold can
be checked the same way.

Dial runs through the real ask/tell API (the Python SDK over gRPC to a
local dial-scheduler), one study per function, sampler and seed, trials one
at a time. Optuna runs in-process with the same seeds. A run goes to the
largest budget; its regret at each budget is the best value seen by then
minus the function's known optimum.

One JSON line per run: side, sampler, function, seed, regret (a dict from
budget to regret), seconds. summarize.py turns them into the per-function
table. `cmaes` is compared on the functions without conditional parameters
(Dial's refuses them; Optuna's samples them independently).
"""
import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import functions  # noqa: E402
import local_dial  # noqa: E402


def regrets(fn, values, budgets):
    best, out = float("inf"), {}
    for i, v in enumerate(values, 1):
        best = min(best, v)
        if i in budgets:
            out[i] = max(0.0, best - fn.optimum)
    for b in budgets:  # a run that ended early keeps its last best
        out.setdefault(b, max(0.0, best - fn.optimum))
    return out


# -- Optuna ------------------------------------------------------------------
def optuna_run(args):
    name, sampler, seed, budgets = args
    import warnings
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    fn = functions.by_name(name)
    make = {"tpe": optuna.samplers.TPESampler,
            "cmaes": optuna.samplers.CmaEsSampler}[sampler]
    study = optuna.create_study(sampler=make(seed=seed))

    def objective(trial):
        point = {}
        for p in fn.params:
            if not functions.is_active(p, point):
                continue
            if p.kind == "float":
                point[p.name] = trial.suggest_float(p.name, p.low, p.high,
                                                    log=p.log)
            elif p.kind == "int":
                point[p.name] = trial.suggest_int(p.name, int(p.low),
                                                  int(p.high), log=p.log)
            else:
                point[p.name] = trial.suggest_categorical(p.name,
                                                          list(p.choices))
        return fn.f(point)

    start = time.monotonic()
    study.optimize(objective, n_trials=max(budgets))
    values = [t.value for t in study.trials]
    return {"side": "optuna", "sampler": sampler, "function": name,
            "seed": seed, "regret": regrets(fn, values, budgets),
            "seconds": round(time.monotonic() - start, 2)}


# -- Dial --------------------------------------------------------------------
# More searcher fields per sampler, for experiments: DIAL_SEARCHER='{"cmaes":
# {"sigma0": 0.2}}'.
EXTRA = json.loads(os.environ.get("DIAL_SEARCHER", "{}"))


def dial_space(fn):
    space = []
    for p in fn.params:
        if p.kind == "categorical":
            entry = {"name": p.name, "categorical": {"values": list(p.choices)}}
        else:
            lo, hi = (int(p.low), int(p.high)) if p.kind == "int" else \
                (p.low, p.high)
            entry = {"name": p.name, p.kind: {
                "min": lo, "max": hi, "scale": "LOG" if p.log else "LINEAR"}}
        if p.when:
            entry["when"] = {p.when[0]: list(p.when[1])}
        space.append(entry)
    return space


def dial_run(client, name, sampler, seed, budgets):
    fn = functions.by_name(name)
    study = client.create_study({
        "name": f"{name}-{sampler}-{seed}",
        "objective": {"metric": "value", "goal": "MINIMIZE"},
        "search_space": dial_space(fn),
        "searcher": {sampler: dict(EXTRA.get(sampler, {}), seed=seed)},
        "budget": {"max_trials": max(budgets), "max_parallel_trials": 1},
    })
    start = time.monotonic()
    values = []
    while True:
        trial = study.ask()
        if trial is None:
            break
        value = fn.f(trial.params)
        study.tell(trial, value)
        values.append(value)
    return {"side": "dial", "sampler": sampler, "function": name,
            "seed": seed, "regret": regrets(fn, values, budgets),
            "seconds": round(time.monotonic() - start, 2)}


def use_module(path):
    """Replaces the suite by the functions of the Python file `path`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("suite_functions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    global functions
    functions = module


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budgets", default="50,100,200")
    ap.add_argument("--samplers", default="tpe,cmaes")
    ap.add_argument("--functions", default="")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--side", default="both",
                    choices=["dial", "optuna", "both"])
    ap.add_argument("--module", default="",
                    help="a Python file with other functions (see above)")
    args = ap.parse_args()
    if args.module:
        use_module(args.module)
    budgets = sorted(int(b) for b in args.budgets.split(","))
    names = [n for n in args.functions.split(",") if n] or \
        [f.name for f in functions.SUITE]
    runs = []
    for sampler in args.samplers.split(","):
        for name in names:
            fn = functions.by_name(name)
            if sampler == "cmaes" and any(p.when for p in fn.params):
                continue
            runs += [(name, sampler, seed, budgets)
                     for seed in range(1, args.seeds + 1)]

    def emit(line):
        print(json.dumps(line), flush=True)

    if args.side in ("dial", "both"):
        directory = tempfile.mkdtemp(prefix="dial-suite-")
        proc, address = local_dial.start_scheduler(directory)
        try:
            import dial
            client = dial.connect(address)
            with ThreadPoolExecutor(args.parallel) as pool:
                for line in pool.map(lambda r: dial_run(client, *r), runs):
                    emit(line)
        finally:
            local_dial.stop([proc])
            if not os.environ.get("DIAL_KEEP"):
                import shutil
                shutil.rmtree(directory, ignore_errors=True)
    if args.side in ("optuna", "both"):
        with ProcessPoolExecutor(args.parallel) as pool:
            for line in pool.map(optuna_run, runs):
                emit(line)


if __name__ == "__main__":
    main()
