#!/usr/bin/env bash
# Test-set accuracy of dial-train's default MLP and CNN on Fashion-MNIST
# after 5 epochs with the default knobs (Adam 1e-3, batch 128, 10% of the
# training data held out for validation), and the time it took.
# usage: bench/trainer/accuracy.sh [THREADS] (after building into build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS=${1:-2}
TRAIN=${DIAL_TRAIN:-build/trainer/dial-train}
export OPENBLAS_NUM_THREADS=1
ckpt=$(mktemp -d)
trap 'rm -rf "$ckpt"' EXIT
per_epoch=$(( 54000 / 128 ))
steps=$(( 5 * per_epoch ))
for model in mlp cnn; do
  start=$(date +%s.%N)
  $TRAIN --threads="$THREADS" --checkpoint-root="$ckpt" --study=acc \
    --trial=0 --knobs="{\"model\": \"$model\", \"steps\": $steps, \
\"eval_every\": $per_epoch}" 2>/dev/null | sed "s/^/$model epoch-report: /"
  end=$(date +%s.%N)
  test=$($TRAIN --knobs="{\"model\": \"$model\"}" --checkpoint-root="$ckpt" \
    --restore="acc/0/$steps" --evaluate=test 2>/dev/null)
  awk -v m="$model" -v s="$start" -v e="$end" -v t="$test" -v st="$steps" \
    'BEGIN {printf "%s: 5 epochs (%d steps) in %.0f s; test %s\n", m, st, e - s, t}'
  rm -rf "${ckpt:?}"/acc
done
