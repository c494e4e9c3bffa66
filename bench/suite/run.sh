#!/usr/bin/env bash
# Dial's tpe and cmaes against Optuna 3.1's TPESampler and CmaEsSampler on
# the 33-function suite (functions.py), SEEDS seeds, budgets 50/100/200;
# the per-function tables go to results/DATE.md (bench/README.md quotes
# them). About 25 minutes on 2 cores, most of it Optuna's TPE.
# usage: bench/suite/run.sh [SEEDS]   (after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${1:-10}
OUT=${OUT:-bench/suite/results}
DATE=$(date +%F)
PY=build/python-venv/bin/python
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
/usr/bin/python3 bench/suite/functions.py --check > /dev/null
$PY bench/suite/compare.py --seeds "$SEEDS" --side dial > "$OUT/$DATE-dial.jsonl"
$PY bench/suite/compare.py --seeds "$SEEDS" --side optuna > "$OUT/$DATE-optuna.jsonl"
cat "$OUT/$DATE-dial.jsonl" "$OUT/$DATE-optuna.jsonl" |
  /usr/bin/python3 bench/suite/summarize.py | tee "$OUT/$DATE.md"
