#!/usr/bin/env bash
# Fairness on a shared fleet (issue 34): bench/fairness/fairness_bench.cc
# on a simulated fleet (64 one-slot workers, owners weighted 2:1:1, a
# priority-10 study at 40 min), then a plot of each owner's share over
# time (python3-matplotlib); then the same run with --fair-share-preempt
# (printed and recorded, not plotted). Appends a JSON line per run to
# bench/fairness/results/<date>.jsonl and writes bench/fairness/shares.png.
#
#   bench/fairness/run.sh [BUILD_DIR]   # default: build; about 30 s
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
bench="$build/bench/fairness_bench"
if [[ ! -x "$bench" ]]; then
  echo "no $bench: build it first (cmake --build $build --target fairness_bench)" >&2
  exit 2
fi
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
"$bench" --out="bench/fairness/results/$(date +%Y-%m-%d).jsonl" \
  --shares_csv="$csv"
echo
echo "=== the same with --fair-share-preempt"
"$bench" --out="bench/fairness/results/$(date +%Y-%m-%d).jsonl" \
  --fair_share_preempt
/usr/bin/python3 - "$csv" bench/fairness/shares.png <<'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
t = [int(r["t"]) / 60 for r in rows]
fig, ax = plt.subplots(figsize=(8, 3.5))
for owner, target in (("ann", "2/4"), ("bo", "1/4"), ("cy", "1/4")):
    ax.plot(t, [100 * int(r[owner]) / 64 for r in rows], label=f"{owner} (weight {target[0]})")
for at, label in ((10, "bo arrives"), (20, "cy arrives"), (40, "cy's priority-10 study")):
    ax.axvline(at, color="grey", lw=0.5)
    ax.text(at + 0.3, 95, label, fontsize=7, va="top")
for y in (50, 25):
    ax.axhline(y, color="grey", lw=0.5, ls=":")
ax.set_xlabel("simulated minutes")
ax.set_ylabel("share of 64 slots (%)")
ax.set_ylim(0, 100)
ax.legend(fontsize=8, loc="center right")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
PY
echo "plot: bench/fairness/shares.png"
