#!/usr/bin/env bash
# Ensembles (issue 20): a 16-trial MLP study on Fashion-MNIST run by a real
# scheduler and two workers, then `dialctl study ensemble --top=5`: the
# average of the best five trials' predicted probabilities on the held-out
# test split, against the best single trial's test accuracy.
# usage: bench/ensemble/run.sh [BUILD_DIR]   (after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
WORK=$(mktemp -d /tmp/dial-ensemble-XXXXXX)
OUT=bench/ensemble/results
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
"$BUILD/scheduler/dial-scheduler" --db="$WORK/dial.db" \
  --checkpoint-root="$WORK/checkpoints" --listen=127.0.0.1:0 \
  >"$WORK/scheduler.out" 2>"$WORK/scheduler.log" &
PIDS+=($!)
for _ in $(seq 1 300); do
  grep -q "listening on" "$WORK/scheduler.out" 2>/dev/null && break
  sleep 0.1
done
export DIAL_SCHEDULER=$(sed -n 's/.*listening on //p' "$WORK/scheduler.out")
for w in 1 2; do
  "$BUILD/worker/dial-worker" --slots=1 --cpus=1 --host="w$w" \
    --work-dir="$WORK/w$w" --checkpoint-root="$WORK/checkpoints" \
    2>"$WORK/w$w.log" &
  PIDS+=($!)
done
DIALCTL="$BUILD/client/dialctl --timeout-s=600"
START=$(date +%s)
$DIALCTL study create -f bench/ensemble/study.yaml >/dev/null
$DIALCTL study watch ensemble-bench >/dev/null
STUDY_S=$(( $(date +%s) - START ))
STAMP=$(date -u +%Y-%m-%d-%H%M%S)
{
  echo "study: 16 trials in ${STUDY_S} s"
  $DIALCTL trials list ensemble-bench
  echo
  $DIALCTL study ensemble ensemble-bench --top=5 \
    --checkpoint-root="$WORK/checkpoints"
  echo
  $DIALCTL --json study ensemble ensemble-bench --top=5 \
    --checkpoint-root="$WORK/checkpoints"
} | tee "$OUT/$STAMP.txt"
