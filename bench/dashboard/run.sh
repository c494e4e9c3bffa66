#!/usr/bin/env bash
# Dashboard speed at 100,000 trials (bench/README.md, "Dashboard"): fills an
# ask/tell study through the JSON API (about 7 minutes on 2 cores; kept in
# DB so a second run measures at once), then times the study page in
# headless Chromium. Needs the build (dial-scheduler, build/dashboard) and
# dashboard/node_modules (npm ci).
# usage: bench/dashboard/run.sh [BUILD_DIR] [TRIALS] [DB]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
trials=${2:-100000}
db=${3:-/tmp/dial-dashboard-bench-$trials.db}
exec node bench/dashboard/bench.mjs --scheduler="$build/scheduler/dial-scheduler" \
  --dashboard="$build/dashboard" --node-modules=dashboard/node_modules \
  --trials="$trials" --db="$db" --loads=3 --pages=20 \
  --chromium="$(command -v chromium || echo /usr/bin/chromium)"
