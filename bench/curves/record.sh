#!/usr/bin/env bash
# Records the learning-curve tables in bench/curves/tables (FORMAT.md):
# 4 tasks x 200 configurations x 20 evaluations, trained with dial-train and
# (one task) PyTorch through dial.trial. Not run by CI: about an hour on two
# cores. An interrupted recording goes on where it stopped.
# usage: bench/curves/record.sh [--tasks a,b] [--configs N] [--jobs J]
#        (after the build; BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
exec /usr/bin/python3 bench/curves/record.py "$@"
