#!/usr/bin/env bash
# Builds Dial and runs every test, fuzzes the spec parser for 20 s, then
# runs the tests that need no trainer again under ASan + UBSan.
# This is the README's test command, and .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
# Unformatted code fails the run before anything is built.
deploy/check-format.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j2
# OpenBLAS's own threads fight LibTorch's OpenMP threads on small machines.
export OPENBLAS_NUM_THREADS=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 600
# A short libFuzzer run over the spec parser (docs/testing.md); its own
# clang build in build-fuzz/, common/ and the protos only.
deploy/fuzz.sh 20
# Everything but the trainer again under AddressSanitizer + UBSan, in
# build-asan/ (about 20 minutes on 2 cores; DIAL_SKIP_SANITIZE=1 skips it
# for a quick local run, CI never does).
if [ "${DIAL_SKIP_SANITIZE:-0}" = 0 ]; then
  deploy/sanitize.sh asan
fi
