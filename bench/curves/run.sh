#!/usr/bin/env bash
# Dial's trial schedulers against Optuna's pruners on every recorded table
# (bench/curves/tables), at equal consumed budget: compare.py per table, then
# summarize.py for the markdown tables and the plot in bench/README.md.
# usage: bench/curves/run.sh [SEEDS] [BUDGET] [RESOURCE]   (after the build)
#        defaults 10 seeds, 20 full curves, steps
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${1:-10}
BUDGET=${2:-20}
RESOURCE=${3:-steps}
PY=${BUILD_DIR:-build}/python-venv/bin/python
OUT=bench/curves/results
mkdir -p "$OUT"
STAMP=$(date -u +%Y-%m-%d-%H%M%S)
RESULTS="$OUT/$STAMP-$RESOURCE.jsonl"
# The plot keeps to FIFO, the guarded schedulers and each side's best.
PLOTTED=dial-fifo,dial-asha,dial-asha-checked,dial-hyperband-checked,dial-gp-fifo,dial-gp-asha,dial-gp-hyperband-checked,optuna-nop,optuna-sha,optuna-hyperband,optuna-tpe-hyperband
# Every table by its validation loss (lower is better).
for t in bench/curves/tables/*.csv.gz; do
  "$PY" bench/curves/compare.py "$t" --seeds "$SEEDS" --budget "$BUDGET" \
    --resource "$RESOURCE" --metric val_loss --goal minimize \
    --parallel 2 --methods all | tee -a "$RESULTS"
done
/usr/bin/python3 bench/curves/summarize.py "$RESULTS" \
  --plot "$OUT/$STAMP-$RESOURCE.png" --plot-methods "$PLOTTED" \
  > "$OUT/$STAMP-$RESOURCE.md"
/usr/bin/python3 bench/curves/summarize.py "$RESULTS" --matrix \
  | tee "$OUT/$STAMP-$RESOURCE-matrix.md"
echo "results: $RESULTS"
