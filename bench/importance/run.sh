#!/usr/bin/env bash
# Parameter importance: Dial's GetParameterImportance (PED-ANOVA, over
# gRPC) at 1,000, 10,000 and 100,000 trials x 8 parameters, and Optuna's
# evaluators on the same trials: fANOVA (Optuna's default) at 1,000 (it
# takes minutes beyond that), mean decrease in impurity at 1,000 and 10,000.
# usage: bench/importance/run.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 1000 10000 100000; do
  echo "dial ped-anova: $("$build/bench/importance_bench" --trials=$n \
    --data_out="$tmp/$n.jsonl" | tr '\n' ' ')"
done
/usr/bin/python3 bench/importance/optuna_peer.py "$tmp/1000.jsonl" fanova mdi
/usr/bin/python3 bench/importance/optuna_peer.py "$tmp/10000.jsonl" mdi
