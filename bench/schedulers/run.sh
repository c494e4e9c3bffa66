#!/usr/bin/env bash
# Trial schedulers on simulated learning curves, Dial (through the real
# ask/tell gRPC API) and Optuna 3.1's pruners in one run, equal budgets.
# usage: bench/schedulers/run.sh [SEEDS]   (after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${1:-10}
OUT=${OUT:-bench/schedulers/results}
mkdir -p "$OUT"
build/bench/scheduler_bench --seeds="$SEEDS" > "$OUT/dial.jsonl"
/usr/bin/python3 bench/schedulers/optuna_pruners.py --seeds "$SEEDS" > "$OUT/optuna.jsonl"
cat "$OUT/dial.jsonl" "$OUT/optuna.jsonl" | /usr/bin/python3 bench/schedulers/summarize.py
