#!/usr/bin/env bash
# The cost of the gRPC port's bounds (scheduler/grpc_limits.h: memory
# quota, streams per connection, idle and age closes): the max-rate load of
# bench/scale (200 workers + 8 clients, ASHA) against the same
# dial-scheduler with its default bounds and with them lifted, runs
# alternating (default, lifted, lifted, default, ...), and the ratio.
#
#   bench/scale/grpc_limits_ab.sh [BUILD_DIR] [PAIRS]   # defaults: build 2
#
# Environment: AB_SECONDS (default 20), the measured time of each run.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
pairs=${2:-2}
seconds=${AB_SECONDS:-20}
bench="$build/bench/scale_bench"
if [[ ! -x "$bench" ]]; then
  echo "no $bench: build it first (cmake --build $build --target scale_bench dial-scheduler)" >&2
  exit 2
fi
lifted="--grpc-memory-mb=1048576 --grpc-max-streams-per-connection=1000000"
lifted+=" --grpc-max-connection-idle-s=100000000"
lifted+=" --grpc-max-connection-age-s=100000000"
mkdir -p bench/scale/results
out="bench/scale/results/$(date +%Y-%m-%d-%H%M%S)-grpc-limits.txt"
run() {  # run NAME [scheduler args]: one JSON line into $out, tagged
  local name=$1
  shift
  local line
  line=$("$bench" --mode=load --workers=200 --clients=8 --steps=81 \
    --seconds="$seconds" --trial_scheduler=asha --json "$@" 2>/dev/null |
    grep '^{' | tail -n 1)
  echo "$name $line" | tee -a "$out"
}
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then
    run default
    run lifted --scheduler_args="$lifted"
  else
    run lifted --scheduler_args="$lifted"
    run default
  fi
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rates = {"default": [], "lifted": []}
p99 = {"default": [], "lifted": []}
for line in open(sys.argv[1]):
    name, _, text = line.partition(" ")
    if not text.strip():
        print(f"{name}: run failed")
        continue
    d = json.loads(text)
    rates[name].append(d["reports_per_s"])
    p99[name].append(d["ReportProgress"]["p99_ms"])
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
for name in rates:
    print(f"{name}: durable reports/s {mean(rates[name]):,.0f} "
          f"({', '.join(f'{r:,.0f}' for r in rates[name])}); "
          f"ReportProgress p99 {mean(p99[name]):.1f} ms")
print(f"default/lifted: {mean(rates['default']) / mean(rates['lifted']):.2f}")
PY
echo "results: $out"
