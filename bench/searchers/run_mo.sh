#!/usr/bin/env bash
# The multi-objective and constrained comparison in one run: Dial's nsga2,
# tpe, bayesian and random searchers through the real ask/tell gRPC API
# (searcher_bench --multi), and Optuna 3.1's NSGAIISampler, MOTPESampler,
# TPESampler with constraints_func and RandomSampler
# (optuna_mo_bench.py), on ZDT1-3 (6-D), DTLZ2 (3 objectives, 6-D),
# Branin in a disc and a constrained mixed float/int/categorical problem
# (mo_functions.h, mo_problems.py), TRIALS trials x SEEDS seeds each; then
# 2-objective suggestion latency of both at 100 and 500 observations.
# usage: bench/searchers/run_mo.sh [TRIALS] [SEEDS]   (after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIALS=${1:-100}
SEEDS=${2:-10}
OUT=${OUT:-bench/searchers/results}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
build/bench/searcher_bench --multi --trials="$TRIALS" --seeds="$SEEDS" > "$OUT/mo-dial.jsonl"
/usr/bin/python3 bench/searchers/optuna_mo_bench.py --trials "$TRIALS" --seeds "$SEEDS" > "$OUT/mo-optuna.jsonl"
{
  build/bench/searcher_bench --mo_latency
  /usr/bin/python3 bench/searchers/optuna_mo_bench.py --latency
} > "$OUT/mo-latency.jsonl"
cat "$OUT/mo-dial.jsonl" "$OUT/mo-optuna.jsonl" "$OUT/mo-latency.jsonl" | /usr/bin/python3 bench/searchers/summarize_mo.py
