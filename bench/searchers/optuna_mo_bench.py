"""Optuna 3.1 (Debian python3-optuna) on the problems of searcher_bench
--multi (mo_problems.py), printing the same JSON lines: NSGAIISampler,
MOTPESampler and RandomSampler on the multi-objective problems;
TPESampler and NSGAIISampler with constraints_func, and RandomSampler, on
the constrained single-objective ones. Default settings otherwise
(NSGA-II's population is 50, as Dial's). With --latency, the peer of
searcher_bench --mo_latency: ask() on a 2-objective study (ZDT1) holding 100
and 500 random completed trials.

usage: /usr/bin/python3 optuna_mo_bench.py --trials 100 --seeds 10
           [--functions zdt1,zdt2,zdt3,dtlz2,branin_c,mixed_c]
       /usr/bin/python3 optuna_mo_bench.py --latency
"""
import argparse
import json
import random
import time
import warnings

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from mo_problems import PROBLEMS, hypervolume

optuna.logging.set_verbosity(optuna.logging.WARNING)
# constraints_func is experimental in 3.1 and MOTPESampler deprecated (for
# TPESampler, which runs the same algorithm on several objectives); both
# say so on every study.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", category=FutureWarning, message="MOTPESampler")


def constraints(trial):
    return trial.user_attrs["constraints"]


# Sampler factories of (seed, constraints_func or None), by problem kind.
MULTI_OBJECTIVE = {
    "optuna-nsga2": lambda s, c: optuna.samplers.NSGAIISampler(seed=s, constraints_func=c),
    "optuna-motpe": lambda s, c: optuna.samplers.MOTPESampler(seed=s),  # no constraints
    "optuna-random": lambda s, c: optuna.samplers.RandomSampler(seed=s),
}
SINGLE_OBJECTIVE = {
    "optuna-tpe": lambda s, c: optuna.samplers.TPESampler(seed=s, constraints_func=c),
    "optuna-nsga2": lambda s, c: optuna.samplers.NSGAIISampler(seed=s, constraints_func=c),
    "optuna-random": lambda s, c: optuna.samplers.RandomSampler(seed=s),
}


def distributions(space):
    out = {}
    for name, kind, *args in space:
        if kind == "categorical":
            out[name] = CategoricalDistribution(args[0])
        elif kind == "int":
            out[name] = IntDistribution(args[0], args[1], log=args[2])
        else:
            out[name] = FloatDistribution(args[0], args[1], log=args[2])
    return out


def ask(study, dists):
    """A new trial and its params (what a Dial suggestion is)."""
    trial = study.ask()
    params = {}
    for name, d in dists.items():
        if isinstance(d, CategoricalDistribution):
            params[name] = trial.suggest_categorical(name, d.choices)
        elif isinstance(d, IntDistribution):
            params[name] = trial.suggest_int(name, d.low, d.high, log=d.log)
        else:
            params[name] = trial.suggest_float(name, d.low, d.high, log=d.log)
    return trial, params


def score(problem, outcomes):
    """The hypervolume of the feasible outcomes (several objectives), or the
    best feasible value, None while there is none (one objective)."""
    feasible = [f for f, c in outcomes if all(v <= 0 for v in c)]
    if problem.objectives > 1:
        return hypervolume(feasible, problem.reference)
    return min((f[0] for f in feasible), default=None)


def run(problem, sampler, trials):
    """One study, ask/tell; the (objectives, constraints) of each trial and
    the seconds spent asking."""
    study = optuna.create_study(directions=["minimize"] * problem.objectives, sampler=sampler)
    dists = distributions(problem.space)
    outcomes, seconds = [], 0.0
    for _ in range(trials):
        start = time.perf_counter()
        trial, params = ask(study, dists)
        seconds += time.perf_counter() - start
        f, c = problem.evaluate(params)
        if c:
            trial.set_user_attr("constraints", c)
        study.tell(trial, f if problem.objectives > 1 else f[0])
        outcomes.append((f, c))
    return outcomes, seconds


def run_all(args):
    functions = args.functions.split(",")
    for fname, problem in PROBLEMS.items():
        if fname not in functions:
            continue
        samplers = MULTI_OBJECTIVE if problem.objectives > 1 else SINGLE_OBJECTIVE
        key = "hv" if problem.objectives > 1 else "best_feasible"
        for sname, make in samplers.items():
            for seed in range(args.seeds):
                sampler = make(seed + 1, constraints if problem.constraints else None)
                outcomes, seconds = run(problem, sampler, args.trials)
                print(json.dumps({
                    "tool": "optuna", "searcher": sname, "function": fname, "seed": seed,
                    f"{key}25": score(problem, outcomes[:25]),
                    f"{key}50": score(problem, outcomes[:50]),
                    f"{key}100": score(problem, outcomes),
                    "trials": args.trials, "seconds_per_suggest": seconds / args.trials}),
                    flush=True)


def latency():
    """As searcher_bench --mo_latency: 20 timed asks (with the suggestions)
    from 100 and 500 random completed ZDT1 trials, each told its values
    untimed."""
    problem = PROBLEMS["zdt1"]
    dists = distributions(problem.space)
    for sname in ("optuna-nsga2", "optuna-motpe"):
        rng = random.Random(7)
        for size in (100, 500):
            study = optuna.create_study(directions=["minimize"] * 2,
                                        sampler=MULTI_OBJECTIVE[sname](1, None))
            history = []
            for n in range(size):
                params = {name: rng.random() for name in dists}  # ZDT1: [0, 1]^6
                # NSGA-II builds its populations from the trials' generation
                # (its system attribute in Optuna 3.1), 50 a generation.
                history.append(optuna.trial.create_trial(
                    params=params, distributions=dists, values=problem.evaluate(params)[0],
                    system_attrs={"nsga2:generation": n // 50}))
            study.add_trials(history)
            ms = []
            for _ in range(20):
                start = time.perf_counter()
                trial, params = ask(study, dists)
                ms.append((time.perf_counter() - start) * 1000)
                study.tell(trial, problem.evaluate(params)[0])
            ms.sort()
            print(json.dumps({"tool": "optuna", "mo_latency": sname, "observations": size,
                              "median_ms": round((ms[9] + ms[10]) / 2, 1),
                              "p95_ms": round(ms[18], 1), "max_ms": round(ms[19], 1)}),
                  flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--functions", default=",".join(PROBLEMS))
    p.add_argument("--latency", action="store_true")
    args = p.parse_args()
    if args.latency:
        latency()
    else:
        run_all(args)


if __name__ == "__main__":
    main()
