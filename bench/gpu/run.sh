#!/usr/bin/env bash
# GPU checks and benchmarks of dial-train, for a machine with CUDA and a
# PyTorch install (whose bundled CUDA LibTorch the build uses). One script:
# builds dial-train into build-gpu/, then
#   1. the trainer tests against the CUDA build (CPU paths; fp16 refusal
#      becomes acceptance where CUDA is present),
#   2. ResNet (blocks 3, channels 32 = ResNet-20 width) on Fashion-MNIST at
#      batch 512: samples/s for fp32, bf16 and fp16 on 1 GPU, and the ratios
#      bf16/fp32 and fp16/fp32 (target >= 1.8),
#   3. with more than one GPU: samples/s for 1, 2, 4 and 8 replicas
#      (as many as there are) at a global batch of 512 per GPU, and the
#      scaling efficiency speedup / replicas.
# Results go to bench/gpu/results.txt (and stdout).
# usage: bench/gpu/run.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-300}
OUT=bench/gpu/results.txt
PY=${PYTHON:-python3}
prefix=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')
abi=$($PY -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
if [ "$abi" != 1 ]; then
  echo "this PyTorch's LibTorch uses the pre-C++11 string ABI; Dial's other" >&2
  echo "libraries use the C++11 one, so they cannot link together" >&2
  exit 2
fi
# NCCL: the one pip installs beside PyTorch (nvidia-nccl-*), else NCCL_ROOT.
nccl=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' \
  2>/dev/null || echo "${NCCL_ROOT:-}")
cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DNCCL_ROOT="$nccl" -DCMAKE_BUILD_TYPE=Release | grep -i nccl || true
ninja -C build-gpu dial-train trainer_test trainer_internals_test
build-gpu/tests/trainer_internals_test
build-gpu/tests/trainer_test --gtest_filter=-TrainerConfigTest.*

gpus=$(nvidia-smi -L | wc -l)
TRAIN=build-gpu/trainer/dial-train
run() {  # precision replicas batch -> samples/s of the last report
  $TRAIN --steps="$STEPS" --threads=8 --params="{\"model\": \"resnet\", \
\"blocks\": 3, \"channels\": 32, \"batch_size\": $3, \"eval_every\": $STEPS, \
\"precision\": \"$1\", \"replicas\": $2}" 2>/dev/null | tail -1 |
    sed -n 's/.*samples\/s \([0-9]*\).*/\1/p'
}
{
  echo "# bench/gpu/run.sh $STEPS on $(nvidia-smi -L | head -1), $gpus GPU(s)"
  fp32=$(run fp32 1 512)
  bf16=$(run bf16 1 512)
  fp16=$(run fp16 1 512)
  echo "resnet-20 batch 512, 1 GPU: fp32 $fp32, bf16 $bf16, fp16 $fp16 samples/s"
  awk -v a="$bf16" -v b="$fp16" -v c="$fp32" \
    'BEGIN {printf "bf16/fp32 %.2f  fp16/fp32 %.2f\n", a / c, b / c}'
  if [ "$gpus" -gt 1 ]; then
    one=$(run bf16 1 512)
    for n in 2 4 8; do
      [ "$n" -le "$gpus" ] || break
      sps=$(run bf16 "$n" $((512 * n)))
      awk -v n="$n" -v s="$sps" -v o="$one" \
        'BEGIN {printf "%d GPUs: %d samples/s, efficiency %.2f\n", n, s, s / (n * o)}'
    done
  fi
} | tee "$OUT"
