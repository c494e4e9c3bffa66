#!/usr/bin/env bash
# Builds Dial and runs every test, then fuzzes the spec parser for 20 s.
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
