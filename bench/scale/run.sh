#!/usr/bin/env bash
# Scheduler scale benchmark, all of it: Dial's load generator (max rate,
# paced, trivial ask/tell trials, a big study) and the Optuna peer, with a
# summary of the Dial/Optuna ratios. Everything printed also goes to
# bench/scale/results/<date>.txt.
#
#   bench/scale/run.sh [BUILD_DIR]          # BUILD_DIR defaults to build
#
# Environment:
#   SCALE_QUICK=1        short runs to try it out: 5 s instead of 20 s, 2000
#                        ask/tell trials (Optuna 500), a big study of 5000
#                        trials instead of 100000
#   SCALE_LARGE_DB_DIR   directory for the big study's database; a scale.db
#                        already there is reused (not populated again) and
#                        kept. Default: a fresh one, removed after.
#   SCALE_PYTHON         Python with Optuna 3.1 (default /usr/bin/python3)
#   SCALE_BASELINE       another dial-scheduler binary (e.g. built from an
#                        older commit): the max-rate and paced runs are
#                        repeated against it, interleaved with this build's,
#                        and the summary gives this build's figures as a
#                        ratio of the baseline's
#   SCALE_SECURITY=1     only the cost of security: the max-rate load (and the
#                        paced one, and ask/tell) with security off and on
#                        (TLS, client certificates, bearer tokens, from
#                        deploy/dev-ca.sh), max-rate runs alternating
#                        (off, on, on, off); prints both rates and on/off
set -uo pipefail

cd "$(dirname "$0")/../.."
build=${1:-build}
bench="$build/bench/scale_bench"
python=${SCALE_PYTHON:-/usr/bin/python3}
if [[ ! -x "$bench" ]]; then
  echo "no $bench: build it first (cd $build && ninja scale_bench dial-scheduler)" >&2
  exit 2
fi

if [[ "${SCALE_QUICK:-0}" != 0 ]]; then
  seconds=5 dial_trials=2000 optuna_trials=500 large_trials=5000 tag=-quick
else
  seconds=20 dial_trials=10000 optuna_trials=1000 large_trials=100000 tag=
fi
security=0
if [[ "${SCALE_SECURITY:-0}" != 0 ]]; then
  security=1 tag="-security$tag"
fi
large_args=(--large_trials="$large_trials")
if [[ -n "${SCALE_LARGE_DB_DIR:-}" ]]; then
  mkdir -p "$SCALE_LARGE_DB_DIR"
  large_args+=(--db_dir="$SCALE_LARGE_DB_DIR")
fi

mkdir -p bench/scale/results
out="bench/scale/results/$(date +%Y-%m-%d-%H%M%S)$tag.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

log() { echo "$*" | tee -a "$out"; }

# run NAME CMD...: runs it, its output to the screen and the results file;
# its last JSON line lands in $tmp/NAME.json (empty if it failed).
failed=()
run() {
  local name=$1
  shift
  log ""
  log "=== $name: $*"
  "$@" 2>&1 | tee "$tmp/$name.txt" | tee -a "$out"
  local rc=${PIPESTATUS[0]}
  grep '^{' "$tmp/$name.txt" | tail -n 1 >"$tmp/$name.json"
  if [[ $rc != 0 ]]; then
    log "!!! $name failed (exit $rc)"
    failed+=("$name")
    : >"$tmp/$name.json"
  fi
}

# SCALE_SECURITY: the same load with security off and on, and the ratio.
security_runs() {
  log "security off vs on (TLS + client certificates + tokens)"
  if ! deploy/dev-ca.sh "$tmp/pki" >"$tmp/pki.txt" 2>&1; then
    tee -a "$out" <"$tmp/pki.txt"
    log "!!! deploy/dev-ca.sh failed"
    return 1
  fi
  local secure=(--tls_dir="$tmp/pki")
  run off_max "$bench" --mode=load "${load[@]}"
  run on_max "$bench" --mode=load "${load[@]}" "${secure[@]}"
  run on_max2 "$bench" --mode=load "${load[@]}" "${secure[@]}"
  run off_max2 "$bench" --mode=load "${load[@]}"
  run off_paced "$bench" --mode=load "${load[@]}" --rate=2000
  run on_paced "$bench" --mode=load "${load[@]}" --rate=2000 "${secure[@]}"
  run off_asktell "$bench" --mode=asktell --clients=32 \
    --trials="$dial_trials" --json
  run on_asktell "$bench" --mode=asktell --clients=32 \
    --trials="$dial_trials" --json "${secure[@]}"
  log ""
  log "=== summary"
  "$python" - "$tmp" <<'EOF' 2>&1 | tee -a "$out"
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

def mean(*xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None

def fmt(x, digits=0):
    return "n/a" if x is None else f"{x:,.{digits}f}"

def fmt_ratio(a, b):
    return "n/a" if a is None or not b else f"{a / b:.2f}"

r = {n: load(n) for n in ["off_max", "on_max", "on_max2", "off_max2",
                          "off_paced", "on_paced", "off_asktell",
                          "on_asktell"]}
rate = {n: get(r[n], "reports_per_s") for n in r}
off = mean(rate["off_max"], rate["off_max2"])
on = mean(rate["on_max"], rate["on_max2"])
print(f"durable reports/s at max rate (200 workers + 8 clients, ASHA, mean of 2):"
      f" security off {fmt(off)}, on {fmt(on)}, on/off {fmt_ratio(on, off)}"
      f"  [off {fmt(rate['off_max'])}, {fmt(rate['off_max2'])};"
      f" on {fmt(rate['on_max'])}, {fmt(rate['on_max2'])}]")
p99 = {n: get(r[n], "ReportProgress", "p99_ms") for n in r}
print(f"ReportProgress p99 at max rate: off"
      f" {fmt(mean(p99['off_max'], p99['off_max2']), 2)} ms,"
      f" on {fmt(mean(p99['on_max'], p99['on_max2']), 2)} ms")
print(f"ReportProgress p99 paced at 2000/s: off {fmt(p99['off_paced'], 2)} ms,"
      f" on {fmt(p99['on_paced'], 2)} ms")
t_off = get(r["off_asktell"], "trials_per_s")
t_on = get(r["on_asktell"], "trials_per_s")
print(f"ask/tell trials/s (32 clients): off {fmt(t_off)}, on {fmt(t_on)},"
      f" on/off {fmt_ratio(t_on, t_off)}")
cpu = {n: get(r[n], "scheduler_cpu_s") for n in r}
reports = {n: get(r[n], "reports") for n in r}

def per_report_ms(*names):
    c = [cpu[n] for n in names if cpu[n] is not None and reports[n]]
    k = [reports[n] for n in names if cpu[n] is not None and reports[n]]
    return 1000 * sum(c) / sum(k) if k else None

# The scheduler's CPU per report depends less on what else runs on the
# machine than the rate does (the load generator shares the cores).
c_off = per_report_ms("off_max", "off_max2")
c_on = per_report_ms("on_max", "on_max2")
print(f"scheduler CPU per report at max rate: off {fmt(c_off, 3)} ms,"
      f" on {fmt(c_on, 3)} ms, off/on {fmt_ratio(c_off, c_on)}")
ok_ratio = on is not None and off and on / off >= 0.70
ok_rate = on is not None and on >= 7000
print(f"issue 16 targets: on/off >= 0.70: {'yes' if ok_ratio else 'NO'};"
      f" on >= 7,000 reports/s: {'yes' if ok_rate else 'NO'}")
EOF
  if ((${#failed[@]})); then
    log "FAILED: ${failed[*]}"
  fi
  log "results: $out"
  ((${#failed[@]} == 0))
}

log "scale benchmark $(date -Iseconds) on $(hostname), $(nproc) CPUs"
log "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
log "build $build, quick=${SCALE_QUICK:-0}"

load=(--workers=200 --clients=8 --steps=81 --seconds="$seconds"
  --trial_scheduler=asha --json)
if ((security)); then
  security_runs
  exit
fi
run dial_max "$bench" --mode=load "${load[@]}"
if [[ -n "${SCALE_BASELINE:-}" ]]; then
  log "baseline scheduler: $SCALE_BASELINE"
  run base_max "$bench" --mode=load "${load[@]}" \
    --scheduler_binary="$SCALE_BASELINE"
fi
run dial_paced "$bench" --mode=load "${load[@]}" --rate=2000
if [[ -n "${SCALE_BASELINE:-}" ]]; then
  run base_paced "$bench" --mode=load "${load[@]}" --rate=2000 \
    --scheduler_binary="$SCALE_BASELINE"
  # A second round in the other order, so neither binary always runs
  # first on a warm or cold machine.
  run base_max2 "$bench" --mode=load "${load[@]}" \
    --scheduler_binary="$SCALE_BASELINE"
  run dial_max2 "$bench" --mode=load "${load[@]}"
fi
run dial_asktell "$bench" --mode=asktell --clients=32 --trials="$dial_trials" --json
run optuna_reports "$python" bench/scale/optuna_scale.py --mode reports \
  --workers 4 --seconds "$seconds" --json
run optuna_asktell "$python" bench/scale/optuna_scale.py --mode asktell \
  --workers 4 --trials "$optuna_trials" --json
run dial_large "$bench" --mode=large "${large_args[@]}" --clients=8 --json

log ""
log "=== summary"
"$python" - "$tmp" <<'EOF' 2>&1 | tee -a "$out"
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

def ratio(a, b):
    return "n/a" if a is None or not b else f"{a / b:.1f}x"

dmax, dpaced, dask = load("dial_max"), load("dial_paced"), load("dial_asktell")
orep, oask, large = load("optuna_reports"), load("optuna_asktell"), load("dial_large")

d_rps, o_rps = get(dmax, "reports_per_s"), get(orep, "reports_per_s")
d_tps, o_tps = get(dask, "trials_per_s"), get(oask, "trials_per_s")
print(f"reports/s   Dial {fmt(d_rps)} (max rate, 200 workers + 8 clients)"
      f"  Optuna {fmt(o_rps)} (4 processes)  Dial/Optuna {ratio(d_rps, o_rps)}")
print(f"trials/s    Dial {fmt(d_tps)} (ask/tell, 32 clients)"
      f"  Optuna {fmt(o_tps)} (4 processes)  Dial/Optuna {ratio(d_tps, o_tps)}")
print(f"report p99  Dial max rate {fmt(get(dmax, 'ReportProgress', 'p99_ms'), 2)} ms,"
      f" paced at 2000/s {fmt(get(dpaced, 'ReportProgress', 'p99_ms'), 2)} ms"
      f" ({fmt(get(dpaced, 'reports_per_s'))}/s);"
      f" Optuna {fmt(get(orep, 'p99_ms'), 2)} ms")
print(f"scheduler   max rate: {fmt(get(dmax, 'scheduler_cpu_s'), 1)} CPU s,"
      f" peak RSS {fmt(get(dmax, 'scheduler_peak_mb'))} MB")
base, base2, dmax2 = load("base_max"), load("base_max2"), load("dial_max2")
bpaced = load("base_paced")
if base:
    def mean(*xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None
    a_rps = mean(d_rps, get(dmax2, "reports_per_s"))
    b_rps = mean(get(base, "reports_per_s"), get(base2, "reports_per_s"))
    a_p99 = mean(get(dmax, "ReportProgress", "p99_ms"),
                 get(dmax2, "ReportProgress", "p99_ms"))
    b_p99 = mean(get(base, "ReportProgress", "p99_ms"),
                 get(base2, "ReportProgress", "p99_ms"))
    ap = get(dpaced, "ReportProgress", "p99_ms")
    bp = get(bpaced, "ReportProgress", "p99_ms")
    print(f"vs baseline max rate: reports/s {fmt(a_rps)} vs {fmt(b_rps)}"
          f" ({'n/a' if not a_rps or not b_rps else f'{a_rps / b_rps:.2f}'}x),"
          f" p99 {fmt(a_p99, 2)} vs {fmt(b_p99, 2)} ms"
          f" ({'n/a' if not a_p99 or not b_p99 else f'{a_p99 / b_p99:.2f}'}x)"
          f"  [runs: {fmt(d_rps)}, {fmt(get(dmax2, 'reports_per_s'))} vs"
          f" {fmt(get(base, 'reports_per_s'))}, {fmt(get(base2, 'reports_per_s'))}]")
    print(f"vs baseline paced 2000/s: p99 {fmt(ap, 2)} vs {fmt(bp, 2)} ms"
          f" ({'n/a' if not ap or not bp else f'{ap / bp:.2f}'}x)")
if large:
    if large.get("populated"):
        print(f"large       populated {large['trials']:,} trials x {large['rows']}"
              f" rows in {fmt(large['populate_s'], 1)} s"
              f" ({fmt(large['populate_rows_per_s'])} rows/s,"
              f" {fmt(large['db_mb'])} MB)")
    print(f"large       start-up {fmt(get(large, 'startup_s'), 2)} s,"
          f" RSS {fmt(get(large, 'startup_rss_mb'))} MB after it,"
          f" peak {fmt(get(large, 'peak_mb'))} MB"
          f" ({fmt(get(large, 'study_trials'))} trials)")
    reads = ["ListTrials_start", "ListTrials_middle", "ListTrials_end",
             "GetBestTrials_10", "GetTrial_random", "WatchStudy_first"]
    print("large       p50/max ms: " + ", ".join(
        f"{r} {fmt(get(large, r, 'p50_ms'), 2)}/{fmt(get(large, r, 'max_ms'), 2)}"
        for r in reads))
    print(f"large       report load: {fmt(get(large, 'load', 'reports_per_s'))}"
          f" reports/s, p99 {fmt(get(large, 'load', 'ReportIntermediate', 'p99_ms'), 2)} ms")
else:
    print("large       n/a")
EOF

if ((${#failed[@]})); then
  log "FAILED: ${failed[*]}"
fi
log "results: $out"
((${#failed[@]} == 0))
