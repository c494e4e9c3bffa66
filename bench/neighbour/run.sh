#!/usr/bin/env bash
# One study beside another (issue 33): study B (random search) asks and
# tells alone, then beside study A (Bayesian, Hartmann6's 6 floats, 400
# completed trials) whose client keeps asking. Runs a real dial-scheduler
# with --suggestion-threads=1 (one suggestion thread for every study, as
# before issue 33) and then with the default (one per core), each RUNS
# times, and appends JSON lines to bench/neighbour/results/<date>.jsonl.
#
#   bench/neighbour/run.sh [BUILD_DIR] [RUNS]   # defaults: build, 3
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-3}
bench="$build/bench/neighbour_bench"
if [[ ! -x "$bench" ]]; then
  echo "no $bench: build it first (cmake --build $build --target neighbour_bench dial-scheduler)" >&2
  exit 2
fi
out="bench/neighbour/results/$(date +%Y-%m-%d).jsonl"
threads=1
for _ in $(seq 2 "$runs"); do threads="$threads,1"; done
for _ in $(seq 1 "$runs"); do threads="$threads,0"; done
export OPENBLAS_NUM_THREADS=1
"$bench" --threads="$threads" --seconds=10 --a_trials=400 --out="$out"
echo "results: $out"
