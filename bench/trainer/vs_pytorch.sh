#!/usr/bin/env bash
# dial-train against an idiomatic PyTorch script (bench/trainer/pytorch_peer.py:
# same model, Adam 1e-3, batch 128, same steps and threads) on Fashion-MNIST,
# in one run. MODEL: mlp (784-256-256-10) or cnn (dial-train's default CNN).
# Prints samples/s of the training loop for each and their ratio. PyTorch
# runs twice: as is, and with glibc told to keep large buffers in the heap
# (what dial-train does itself; PyTorch's speed otherwise depends on the
# allocator's history); the ratio is against the faster of the two.
# usage: bench/trainer/vs_pytorch.sh [MODEL] [STEPS] (after building into build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-mlp}
STEPS=${2:-2000}
TRAIN=${DIAL_TRAIN:-build/trainer/dial-train}
export OPENBLAS_NUM_THREADS=1
printf "%-6s %-8s %-14s %-15s %-15s %-6s\n" model threads dial_samples/s torch_as_is torch_heap ratio
for threads in 1 2; do
  dial=$($TRAIN --steps="$STEPS" --threads="$threads" \
    --params="{\"eval_every\": $STEPS, \"model\": \"$MODEL\"}" 2>/dev/null | tail -1)
  dial_sps=$(echo "$dial" | sed -n 's/.*samples\/s \([0-9]*\).*/\1/p')
  peer() {
    env "$@" /usr/bin/python3 bench/trainer/pytorch_peer.py --model="$MODEL" \
      --steps="$STEPS" --threads="$threads" | awk '{print $2}'
  }
  as_is=$(peer)
  heap=$(peer GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824)
  ratio=$(awk -v a="$dial_sps" -v b="$as_is" -v c="$heap" \
    'BEGIN {printf "%.2f", a / (b > c ? b : c)}')
  printf "%-6s %-8s %-14s %-15s %-15s %-6s\n" "$MODEL" "$threads" "$dial_sps" "$as_is" "$heap" "$ratio"
done
