#!/usr/bin/env bash
# dial-train against an idiomatic PyTorch script (same MLP 784-256-256-10,
# Adam 1e-3, batch 128, same steps and threads) on Fashion-MNIST, in one run.
# Prints samples/s of the training loop for each and their ratio.
# usage: bench/trainer/mlp_vs_pytorch.sh [STEPS] (after building into build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-2000}
TRAIN=${DIAL_TRAIN:-build/trainer/dial-train}
export OPENBLAS_NUM_THREADS=1
printf "%-8s %-14s %-14s %-8s %-10s %-10s\n" threads dial_samples/s torch_samples/s ratio dial_acc torch_acc
for threads in 1 2; do
  dial=$($TRAIN --steps="$STEPS" --threads="$threads" \
    --params="{\"eval_every\": $STEPS, \"units\": 256, \"layers\": 2}" 2>/dev/null | tail -1)
  dial_sps=$(echo "$dial" | sed -n 's/.*samples\/s \([0-9]*\).*/\1/p')
  dial_acc=$(echo "$dial" | sed -n 's/.*val_accuracy \([0-9.]*\).*/\1/p')
  torch=$(/usr/bin/python3 bench/trainer/pytorch_mlp.py --steps="$STEPS" --threads="$threads")
  torch_sps=$(echo "$torch" | awk '{print $2}')
  torch_acc=$(echo "$torch" | awk '{print $4}')
  ratio=$(awk -v a="$dial_sps" -v b="$torch_sps" 'BEGIN {printf "%.2f", a / b}')
  printf "%-8s %-14s %-14s %-8s %-10s %-10s\n" "$threads" "$dial_sps" "$torch_sps" "$ratio" "$dial_acc" "$torch_acc"
done
