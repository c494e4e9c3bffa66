#!/usr/bin/env bash
# How long a worker takes to reach a restarted scheduler: a scheduler, a
# worker running a command trial that reports every 50 ms, and a SIGKILL +
# restart of the scheduler on the same address (ROUNDS times). While the
# scheduler is away the worker logs each report it buffers; the time from
# the new scheduler's start-up line to the last such line is how long the
# worker stayed cut off after the restart (resolution: one report, 50 ms).
#
#   bench/reconnect/run.sh [BUILD_DIR]        # ROUNDS=5 by default
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${ROUNDS:-5}
work=$(mktemp -d /tmp/dial-reconnect.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
cat >"$work/trial.py" <<'PY'
import json, os, time
out = os.fdopen(int(os.environ["DIAL_REPORT_FD"]), "w", buffering=1)
back = os.fdopen(int(os.environ["DIAL_DECISION_FD"]))
for step in range(1, 100000):
    out.write(json.dumps({"step": step, "metrics": {"loss": 1.0 / step}}) + "\n")
    if json.loads(back.readline())["action"] != "CONTINUE":
        break
    time.sleep(0.05)
PY
cat >"$work/spec.yaml" <<YAML
name: reconnect
objective: {metric: loss, goal: MINIMIZE}
search_space: [{name: x, float: {min: 0, max: 1}}]
budget: {max_trials: 1}
trial: {command: {argv: [/usr/bin/python3, $work/trial.py]}}
YAML
start_scheduler() {
  "$build/scheduler/dial-scheduler" --db="$work/dial.db" \
    --checkpoint-root="$work/ckpt" --listen=127.0.0.1:$port \
    --worker-lease-ms=10000 >>"$work/scheduler.log" 2>&1 &
  sched=$!
  for _ in $(seq 600); do
    grep -c "listening on" "$work/scheduler.log" | grep -qx "$1" && return
    sleep 0.05
  done
  echo "dial-scheduler did not start" >&2; exit 1
}
start_scheduler 1
"$build/worker/dial-worker" --scheduler=127.0.0.1:$port --slots=1 \
  --work-dir="$work/w" --checkpoint-root="$work/ckpt" \
  --allow-command=/usr/bin/python3 >"$work/worker.log" 2>&1 &
"$build/client/dialctl" --scheduler=127.0.0.1:$port study create -f "$work/spec.yaml" >/dev/null
for _ in $(seq 300); do
  grep -q "starting /usr/bin/python3" "$work/worker.log" && break
  sleep 0.1
done
grep -q "starting /usr/bin/python3" "$work/worker.log" || {
  echo "the trial never started" >&2; exit 1; }
sleep 2
for round in $(seq "$rounds"); do
  kill -9 $sched; wait $sched 2>/dev/null || true
  sleep 1
  start_scheduler $((round + 1))
  up=$(grep "dial-scheduler: database" "$work/scheduler.log" | tail -1 | cut -c1-23)
  sleep 6
  last=$(grep "report(s) buffered" "$work/worker.log" | tail -1 | cut -c1-23)
  /usr/bin/python3 - "$up" "$last" <<'PY'
import sys, datetime
f = "%Y-%m-%dT%H:%M:%S.%f"
up, last = (datetime.datetime.strptime(s, f) for s in sys.argv[1:3])
print(f"cut off after the restart: {max(0.0, (last - up).total_seconds()):.2f} s")
PY
done
