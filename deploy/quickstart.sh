#!/usr/bin/env bash
# Quickstart: installs what is missing, builds, starts a local scheduler
# (SQLite file + checkpoint directory under a work folder), runs an ask/tell
# study from Python against it, prints the best trial, and shuts down.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

deploy/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j2 --target dial-scheduler dialctl

WORK=${DIAL_QUICKSTART_DIR:-$ROOT/quickstart-run}
rm -rf "$WORK" && mkdir -p "$WORK"
SCHED_OUT="$WORK/scheduler.out"
"$BUILD_DIR/scheduler/dial-scheduler" --db="$WORK/dial.db" \
  --checkpoint-root="$WORK/checkpoints" --listen=127.0.0.1:0 \
  >"$SCHED_OUT" 2>"$WORK/scheduler.log" &
SCHED_PID=$!
trap 'kill $SCHED_PID 2>/dev/null || true; wait $SCHED_PID 2>/dev/null || true' EXIT

# Wait for the readiness line (bounded).
for _ in $(seq 1 300); do
  grep -q "listening on" "$SCHED_OUT" 2>/dev/null && break
  kill -0 $SCHED_PID 2>/dev/null || { cat "$WORK/scheduler.log"; exit 1; }
  sleep 0.1
done
export DIAL_SCHEDULER=$(sed -n 's/.*listening on //p' "$SCHED_OUT")
DIALCTL="$BUILD_DIR/client/dialctl"

$DIALCTL study create -f examples/quadratic-random.yaml
/usr/bin/python3 examples/ask_tell.py --study quadratic
echo
$DIALCTL study get quadratic
echo
echo "best trials:"
$DIALCTL trials best quadratic --count=3
echo
echo "database:    $WORK/dial.db"
echo "checkpoints: $WORK/checkpoints"
kill -TERM $SCHED_PID
wait $SCHED_PID
trap - EXIT
echo "scheduler stopped"
