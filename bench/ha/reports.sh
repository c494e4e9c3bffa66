#!/usr/bin/env bash
# Durable reports/s on PostgreSQL: Dial's scheduler on a local PostgreSQL
# (from Debian) beside Optuna 3.1's RDB storage on the same server, in one
# script: the max-rate load of bench/scale (200 simulated workers and 8
# ask/tell clients, ASHA, each keeping one call out), a paced run at 2,000
# reports/s for the latency, then Optuna's reports (4 processes, each
# report = trial.report + should_prune). Also Dial on SQLite on the same
# VM, for scale. Everything printed also goes to
# bench/ha/results/<date>-reports.txt.
#
#   bench/ha/reports.sh [BUILD_DIR]      # BUILD_DIR defaults to build
#
# Environment: PG_BENCH_SECONDS (default 20) for each run.
set -uo pipefail

cd "$(dirname "$0")/../.."
build=${1:-build}
bench="$build/bench/scale_bench"
python=/usr/bin/python3
seconds=${PG_BENCH_SECONDS:-20}
if [[ ! -x "$bench" ]]; then
  echo "no $bench: build it first (cd $build && ninja scale_bench dial-scheduler)" >&2
  exit 2
fi
source bench/ha/pg_server.sh

mkdir -p bench/ha/results
out="bench/ha/results/$(date +%Y-%m-%d-%H%M%S)-reports.txt"
tmp=$(mktemp -d)
cleanup() {
  pg_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
log() { echo "$*" | tee -a "$out"; }

# run NAME CMD...: its output to the screen and the results file; its last
# JSON line lands in $tmp/NAME.json (empty if it failed).
failed=()
run() {
  local name=$1
  shift
  log ""
  log "=== $name: $*"
  "$@" 2>&1 </dev/null | tee "$tmp/$name.txt" | tee -a "$out"
  local rc=${PIPESTATUS[0]}
  grep '^{' "$tmp/$name.txt" | tail -n 1 >"$tmp/$name.json"
  if [[ $rc != 0 ]]; then
    log "!!! $name failed (exit $rc)"
    failed+=("$name")
    : >"$tmp/$name.json"
  fi
}

log "PostgreSQL reports benchmark $(date -Iseconds) on $(hostname), $(nproc) CPUs"
pg_start || { log "cannot start PostgreSQL"; exit 2; }
log "server: $("$PG_BIN/postgres" --version), fsync on, synchronous_commit on"
for db in dial_max dial_max2 dial_paced optuna; do pg_createdb "$db" || exit 2; done

load=(--mode=load --workers=200 --clients=8 --steps=81 --trial_scheduler=asha
  --seconds="$seconds" --json)
run dial_max "$bench" "${load[@]}" --scheduler_args="--db=$(pg_url dial_max)"
run optuna "$python" bench/scale/optuna_scale.py --mode reports --workers 4 --steps 81 \
  --seconds "$seconds" --db "$(pg_sqlalchemy optuna)" --json
run dial_max2 "$bench" "${load[@]}" --scheduler_args="--db=$(pg_url dial_max2)"
run dial_paced "$bench" "${load[@]}" --rate=2000 \
  --scheduler_args="--db=$(pg_url dial_paced)"
run dial_sqlite "$bench" "${load[@]}"

log ""
log "=== summary"
"$python" - "$tmp" <<'PY' 2>&1 | tee -a "$out"
import json, os, sys

tmp = sys.argv[1]

def load(name):
    try:
        with open(os.path.join(tmp, name + ".json")) as f:
            text = f.read().strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None

def get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d

def fmt(x, digits=0):
    return "n/a" if x is None else f"{x:,.{digits}f}"

r = {n: load(n) for n in ["dial_max", "dial_max2", "dial_paced", "optuna",
                          "dial_sqlite"]}
rates = [get(r[n], "reports_per_s") for n in ("dial_max", "dial_max2")]
rates = [x for x in rates if x is not None]
dial = sum(rates) / len(rates) if rates else None
p99s = [get(r[n], "ReportProgress", "p99_ms") for n in ("dial_max", "dial_max2")]
p99s = [x for x in p99s if x is not None]
optuna = get(r["optuna"], "reports_per_s")
print(f"Dial on PostgreSQL, durable reports/s at max rate (mean of 2): "
      f"{fmt(dial)} [{', '.join(fmt(x) for x in rates)}], ReportProgress p99 "
      f"{fmt(max(p99s) if p99s else None, 1)} ms")
print(f"Dial on PostgreSQL, paced at 2,000 reports/s: ReportProgress p50 "
      f"{fmt(get(r['dial_paced'], 'ReportProgress', 'p50_ms'), 2)} ms, p99 "
      f"{fmt(get(r['dial_paced'], 'ReportProgress', 'p99_ms'), 2)} ms")
print(f"Optuna {get(r['optuna'], 'version') or '?'} RDB on the same PostgreSQL "
      f"(4 processes): {fmt(optuna, 1)} reports/s, p99 "
      f"{fmt(get(r['optuna'], 'p99_ms'), 1)} ms")
print(f"Dial on SQLite, same VM, same load: "
      f"{fmt(get(r['dial_sqlite'], 'reports_per_s'))} reports/s")
ratio = dial / optuna if dial and optuna else None
print(f"Dial / Optuna: {fmt(ratio, 1)}x")
print(f"issue 35 targets: >= 3,000 reports/s: "
      f"{'yes' if dial and dial >= 3000 else 'NO'}; >= 20x Optuna: "
      f"{'yes' if ratio and ratio >= 20 else 'NO'}")
PY
if ((${#failed[@]})); then
  log "FAILED: ${failed[*]}"
fi
log "results: $out"
((${#failed[@]} == 0))
