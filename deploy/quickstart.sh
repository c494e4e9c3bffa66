#!/usr/bin/env bash
# Quickstart: installs what is missing, builds, starts a local scheduler and
# two workers (SQLite database and checkpoints under a work folder), runs the
# random-search study in examples/fashion-mnist-random.yaml on real
# Fashion-MNIST, shows live progress, prints the best trial, and shuts
# everything down cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

deploy/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j2 --target dial-scheduler dial-worker dial-train dialctl

WORK=${DIAL_QUICKSTART_DIR:-$ROOT/quickstart-run}
rm -rf "$WORK" && mkdir -p "$WORK"
export OPENBLAS_NUM_THREADS=1
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

"$BUILD_DIR/scheduler/dial-scheduler" --db="$WORK/dial.db" \
  --checkpoint-root="$WORK/checkpoints" --listen=127.0.0.1:0 \
  >"$WORK/scheduler.out" 2>"$WORK/scheduler.log" &
SCHEDULER=$!
PIDS+=($SCHEDULER)
# Wait (bounded) for the scheduler's readiness line.
for _ in $(seq 1 300); do
  grep -q "listening on" "$WORK/scheduler.out" 2>/dev/null && break
  kill -0 $SCHEDULER 2>/dev/null || { cat "$WORK/scheduler.log"; exit 1; }
  sleep 0.1
done
export DIAL_SCHEDULER=$(sed -n 's/.*listening on //p' "$WORK/scheduler.out")
echo "scheduler on $DIAL_SCHEDULER"

CPUS=$(nproc)
PER_WORKER=$(( CPUS > 1 ? CPUS / 2 : 1 ))
for w in 1 2; do
  "$BUILD_DIR/worker/dial-worker" --slots=1 --cpus=$PER_WORKER \
    --host="worker$w" --work-dir="$WORK/worker$w" \
    --checkpoint-root="$WORK/checkpoints" 2>"$WORK/worker$w.log" &
  PIDS+=($!)
done

DIALCTL="$BUILD_DIR/client/dialctl"
$DIALCTL study create -f examples/fashion-mnist-random.yaml
$DIALCTL study watch fashion-mnist-random
echo
$DIALCTL trials list fashion-mnist-random
echo
echo "best trial:"
$DIALCTL trials best fashion-mnist-random --count=1
BEST=$($DIALCTL --json trials best fashion-mnist-random --count=1 |
  /usr/bin/python3 -c 'import json,sys; t=json.load(sys.stdin)["trials"][0]; print(t["number"])')
echo
$DIALCTL trials get fashion-mnist-random "$BEST"
echo
echo "final evaluation of the best trial on the held-out test split:"
$DIALCTL trials evaluate fashion-mnist-random "$BEST" \
  --checkpoint-root="$WORK/checkpoints"
echo
echo "database:    $WORK/dial.db"
echo "checkpoints: $WORK/checkpoints"
echo "logs:        $WORK/*.log, $WORK/worker*/"
cleanup
trap - EXIT
echo "scheduler and workers stopped"
