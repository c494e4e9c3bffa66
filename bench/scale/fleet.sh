#!/usr/bin/env bash
# Fleet-scale dispatch (issue 34, item 6): simulated workers that register,
# heartbeat every 2.5 s (a quarter of the default 10 s lease, as
# dial-worker does), long-poll AcquireTrial for 5 s and report 5 times per
# trial, against a real dial-scheduler with 10 worker-run studies. Every
# fleet size carries the same load (--rate reports/s in all: 400 trials/s),
# so what grows with the fleet is the fleet itself: parked calls,
# heartbeats, workers to look through. Prints, per size, trials/s, the
# scheduler's CPU per finished trial and its ratio to the smallest fleet's,
# heartbeat and AcquireTrial latencies, and leases lost. Results also go to
# bench/scale/results/<date>-fleet.txt.
#
#   bench/scale/fleet.sh [BUILD_DIR]
#
# Environment: FLEET_SIZES (default "200 2000 10000"), FLEET_REPEATS
# (default 2, sizes interleaved), FLEET_SECONDS (measured, default 40),
# FLEET_WARMUP (default 30: longer than a trial, so the fleet is in steady
# state), FLEET_RATE (reports/s, default 2000).
set -uo pipefail

cd "$(dirname "$0")/../.."
build=${1:-build}
bench="$build/bench/scale_bench"
if [[ ! -x "$bench" ]]; then
  echo "no $bench: build it first (cd $build && ninja scale_bench dial-scheduler)" >&2
  exit 2
fi
sizes=${FLEET_SIZES:-200 2000 10000}
repeats=${FLEET_REPEATS:-2}
seconds=${FLEET_SECONDS:-40}
warmup=${FLEET_WARMUP:-30}
rate=${FLEET_RATE:-2000}

mkdir -p bench/scale/results
out="bench/scale/results/$(date +%Y-%m-%d-%H%M%S)-fleet.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log() { echo "$*" | tee -a "$out"; }

log "fleet benchmark $(date -Iseconds) on $(hostname), $(nproc) CPUs"
log "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
log "sizes: $sizes; $repeats rounds; ${seconds} s measured after ${warmup} s; $rate reports/s"
failed=0
for ((round = 1; round <= repeats; round++)); do
  for n in $sizes; do
    log ""
    log "=== $n workers, round $round"
    "$bench" --mode=load --workers="$n" --studies=10 --clients=0 --steps=5 \
      --trial_scheduler=fifo --rate="$rate" --heartbeat_ms=2500 \
      --wait_ms=5000 --seconds="$seconds" --warmup="$warmup" \
      --scheduler_args=--worker-lease-ms=10000 --json >"$tmp/run.txt" 2>&1
    rc=$?
    # Per-call error lines can run to thousands: the first few are enough.
    grep -v '^    error' "$tmp/run.txt" | tee -a "$out"
    grep '^    error' "$tmp/run.txt" | head -n 5 | tee -a "$out"
    if [[ $rc != 0 ]]; then
      log "!!! $n workers, round $round: exit $rc"
      failed=1
    fi
    grep '^{' "$tmp/run.txt" | tail -n 1 >>"$tmp/all.jsonl"
  done
done

log ""
log "=== summary"
/usr/bin/python3 - "$tmp/all.jsonl" <<'PY' 2>&1 | tee -a "$out"
import json, statistics, sys

runs = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        r = json.loads(line)
        runs.setdefault(r["workers"], []).append(r)

def med(rs, *path):
    xs = []
    for r in rs:
        for p in path:
            r = r.get(p, {}) if isinstance(r, dict) else {}
        if isinstance(r, (int, float)):
            xs.append(r)
    return statistics.median(xs) if xs else float("nan")

base = None
print("| workers | trials/s | scheduler CPU per trial | vs smallest fleet |"
      " heartbeat p50 / p99 | AcquireTrial p99 | leases lost | reports fenced |")
print("|---|---|---|---|---|---|---|---|")
for n in sorted(runs):
    rs = runs[n]
    cpu = med(rs, "cpu_ms_per_trial")
    base = cpu if base is None else base
    trials = med(rs, "trials_finished") / med(rs, "seconds")
    lost = sum(r.get("lost_leases", 0) for r in rs)
    fenced = sum(r.get("fenced", 0) for r in rs)
    print(f"| {n:,} | {trials:.0f} | {cpu:.2f} ms | {cpu / base:.2f}x |"
          f" {med(rs, 'Heartbeat', 'p50_ms'):.1f} / {med(rs, 'Heartbeat', 'p99_ms'):.1f} ms |"
          f" {med(rs, 'AcquireTrial', 'p99_ms'):.1f} ms | {lost} | {fenced} |")
print("(medians of the rounds; leases lost and reports fenced summed)")
PY
log "results: $out"
exit $failed
