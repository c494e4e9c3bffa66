#!/usr/bin/env bash
# The Python SDK's overhead (issue 21): Dial's study.optimize against Optuna
# 3.1's study.optimize with SQLite storage, 2,000 trivial trials in 8
# threads, random and TPE samplers (bench/python/optimize_bench.py). Builds
# nothing: it needs BUILD_DIR/scheduler/dial-scheduler and a Python with the
# SDK and Debian's python3-optuna. Results: bench/python/results/.
#
#   bench/python/run.sh [BUILD_DIR] [optimize_bench.py flags]
#   bench/python/run.sh build --trials 200 --jobs 4     # a quick try
#
# The Python: $DIAL_BENCH_PYTHON, else BUILD_DIR/python-venv (the build's
# virtualenv, --system-site-packages), else /tmp/pyvenv, else /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
(($#)) && shift
if [[ ! -x "$build/scheduler/dial-scheduler" ]]; then
  echo "no $build/scheduler/dial-scheduler: build it first" >&2
  exit 2
fi
python=${DIAL_BENCH_PYTHON:-}
for candidate in "$build/python-venv/bin/python" /tmp/pyvenv/bin/python \
  /usr/bin/python3; do
  [[ -n "$python" ]] && break
  if [[ -x "$candidate" ]] && "$candidate" -c 'import dial, optuna' 2>/dev/null; then
    python=$candidate
  fi
done
if [[ -z "$python" ]]; then
  echo "no Python with the dial SDK and optuna: pip install ./python into a" \
    "virtualenv made with --system-site-packages (docs/python.md)" >&2
  exit 2
fi
exec "$python" bench/python/optimize_bench.py --build "$build" "$@"
