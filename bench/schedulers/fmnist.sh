#!/usr/bin/env bash
# Real training on Fashion-MNIST with real workers (a local scheduler and two
# workers), for the trial schedulers:
#  1. ASHA against random search with full budgets: the same 12 random MLP
#     configurations (same searcher seed), best val_accuracy and total steps.
#  2. PBT (population 8) against 8 independent random trials of the same
#     steps, on SGD with momentum, where the learning-rate schedule matters,
#     over SEEDS seeds.
# usage: [PART=all|asha|pbt] [PBT_STEPS=2000] [PBT_QUANTILE=0.5] \
#        bench/schedulers/fmnist.sh [SEEDS]   (after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${1:-5}
PART=${PART:-all}            # all, asha or pbt
PBT_STEPS=${PBT_STEPS:-2000}
PBT_QUANTILE=${PBT_QUANTILE:-0.5}
B=${BUILD_DIR:-build}
WORK=$(mktemp -d /tmp/dial-fmnist-bench.XXXXXX)
export OPENBLAS_NUM_THREADS=1
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$B/scheduler/dial-scheduler" --db="$WORK/dial.db" --checkpoint-root="$WORK/ckpt" \
  --listen=127.0.0.1:0 --sync-full=false >"$WORK/s.out" 2>"$WORK/s.log" &
PIDS+=($!)
for _ in $(seq 1 300); do grep -q "listening on" "$WORK/s.out" 2>/dev/null && break; sleep 0.1; done
export DIAL_SCHEDULER=$(sed -n 's/.*listening on //p' "$WORK/s.out")
for w in 1 2; do
  "$B/worker/dial-worker" --slots=4 --cpus=4 --host="w$w" --work-dir="$WORK/w$w" \
    --checkpoint-root="$WORK/ckpt" 2>"$WORK/w$w.log" &
  PIDS+=($!)
done
D="$B/client/dialctl"
run() {  # name, yaml
  printf '%s\n' "$2" > "$WORK/$1.yaml"
  $D study create -f "$WORK/$1.yaml" >/dev/null
  $D study watch "$1" >/dev/null
  $D --json trials list "$1" > "$WORK/$1.json"
}
summary() {  # name -> "best steps"
  /usr/bin/python3 -c '
import json, sys
t = json.load(open(sys.argv[1])).get("trials", [])
best = max((x.get("objective_value", 0) for x in t if x["state"] == "COMPLETED"), default=0)
steps = sum(int(x.get("last_step", 0)) for x in t)
print(f"{best:.4f} {steps}")' "$WORK/$1.json"
}
SPACE='search_space:
  - {name: lr, float: {min: 1.0e-4, max: 1.0e-2, scale: LOG}}
  - {name: units, int: {min: 32, max: 512, scale: LOG}}
  - {name: dropout, float: {min: 0.0, max: 0.5}}'
COMMON='objective: {metric: val_accuracy, goal: MAXIMIZE}
searcher: {random: {seed: 17}}
budget: {max_trials: 12, max_parallel_trials: 4}
trial: {trainer: {dataset: fashion-mnist, steps: 1200, eval_every: 100, batch_size: 128}}'
if [ "$PART" != pbt ]; then
run random-full "name: random-full
$COMMON
$SPACE"
run asha "name: asha
$COMMON
scheduler: {asha: {min_steps: 100, max_steps: 1200, reduction_factor: 3}}
$SPACE"
read -r RB RS <<<"$(summary random-full)"
read -r AB AS <<<"$(summary asha)"
echo "| study | best val_accuracy | total steps |"
echo "|---|---|---|"
echo "| random search, full budgets (12 trials x 1200 steps) | $RB | $RS |"
echo "| ASHA (min 100, max 1200, eta 3), same 12 configs | $AB | $AS |"
/usr/bin/python3 -c "import sys; r,rs,a,as_=map(float,sys.argv[1:]); print(f'ASHA: {100*(a-r):+.2f} points with {as_/rs:.2f} of the steps')" "$RB" "$RS" "$AB" "$AS"
echo
fi
[ "$PART" = asha ] && exit 0
echo "| seed | PBT best val_accuracy | random best val_accuracy | PBT better |"
echo "|---|---|---|---|"
WINS=0
for seed in $(seq 1 "$SEEDS"); do
  PSPACE='search_space: [{name: lr, float: {min: 5.0e-3, max: 0.5, scale: LOG}}]'
  PCOMMON="objective: {metric: val_accuracy, goal: MAXIMIZE}
searcher: {random: {seed: $seed}}
budget: {max_trials: 8, max_parallel_trials: 8}
trial: {trainer: {dataset: fashion-mnist, optimizer: sgd, momentum: 0.9, steps: $PBT_STEPS, eval_every: 250, batch_size: 128, seed: $seed}}"
  run "pbt-$seed" "name: pbt-$seed
$PCOMMON
scheduler: {pbt: {perturbation_interval: 250, quantile: $PBT_QUANTILE, seed: $seed}}
$PSPACE"
  run "rand-$seed" "name: rand-$seed
$PCOMMON
$PSPACE"
  read -r PB PS <<<"$(summary "pbt-$seed")"
  read -r QB QS <<<"$(summary "rand-$seed")"
  BETTER=$(/usr/bin/python3 -c "import sys; print('yes' if float(sys.argv[1]) > float(sys.argv[2]) else 'no')" "$PB" "$QB")
  [ "$BETTER" = yes ] && WINS=$((WINS + 1))
  echo "| $seed | $PB | $QB | $BETTER |"
done
echo
echo "PBT better in $WINS of $SEEDS seeds"
