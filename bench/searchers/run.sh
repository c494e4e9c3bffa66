#!/usr/bin/env bash
# The searcher comparison in one run: Dial's random, TPE and Bayesian
# searchers through the real ask/tell gRPC API, and Optuna 3.1's TPE, CMA-ES
# and random samplers, on Branin, Hartmann6, Rosenbrock (4-D) and a mixed
# float/int/categorical/conditional function, TRIALS trials x SEEDS seeds
# each; then the Bayesian searcher's suggestion latency in 6-D.
# usage: bench/searchers/run.sh [TRIALS] [SEEDS]   (after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIALS=${1:-100}
SEEDS=${2:-10}
OUT=${OUT:-bench/searchers/results}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
build/bench/searcher_bench --trials="$TRIALS" --seeds="$SEEDS" > "$OUT/dial.jsonl"
/usr/bin/python3 bench/searchers/optuna_bench.py --trials "$TRIALS" --seeds "$SEEDS" > "$OUT/optuna.jsonl"
build/bench/searcher_bench --latency > "$OUT/latency.jsonl"
cat "$OUT/dial.jsonl" "$OUT/optuna.jsonl" "$OUT/latency.jsonl" | /usr/bin/python3 bench/searchers/summarize.py
