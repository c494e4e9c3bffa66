#!/usr/bin/env bash
# Checkpoint transfer speed between two network namespaces (a scheduler
# host and a worker host on a bridge of their own; no default route, so no
# packet leaves them), against a plain TCP copy of the same size between the
# same namespaces, measured in the same run:
#   - socat copy of a SIZE_MB file, worker -> scheduler ("upload") and
#     scheduler -> worker ("download"), each written with fsync at the end
#     (dd conv=fsync) as Dial's are;
#   - transfer_bench: a checkpoint of SIZE_MB uploaded through
#     CheckpointService (SHA-256 per 1 MiB chunk, fsync, rename), downloaded
#     back, and a second one with 10% of its chunks changed uploaded with
#     the first as its base.
# Needs root and `ip netns`. Prints a summary and writes it to
# bench/transfer/results/<date>.txt.
#
#   bench/transfer/run.sh [BUILD_DIR]       # SIZE_MB=1024 by default
set -euo pipefail

cd "$(dirname "$0")/../.."
build=${1:-build}
size_mb=${SIZE_MB:-1024}
for bin in "$build/bench/transfer_bench" "$build/scheduler/dial-scheduler"; do
  [[ -x "$bin" ]] || { echo "no $bin: build it first" >&2; exit 2; }
done
command -v socat >/dev/null || { echo "needs socat (deploy/install-deps.sh)" >&2; exit 2; }

tag="dtb$$"
work=$(mktemp -d /tmp/dial-transfer-bench.XXXXXX)
sch=$tag-sch wrk=$tag-wrk br=$tag-br
cleanup() {
  [[ -n "${sched_pid:-}" ]] && kill "$sched_pid" 2>/dev/null || true
  for ns in $sch $wrk $br; do ip netns delete "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

for ns in $br $sch $wrk; do ip netns add "$ns"; done
ip -n $br link add br0 type bridge
ip -n $br link set br0 up
i=1
for ns in $sch $wrk; do
  ip -n $br link add p$i type veth peer name eth0 netns "$ns"
  ip -n $br link set p$i master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add 10.77.0.$i/24 dev eth0
  ip -n "$ns" link set eth0 up
  i=$((i + 1))
done
# Traffic to the scheduler's address goes over the test bridge only.
ip netns exec $wrk ip route get 10.77.0.1 | grep -q "dev eth0" || {
  echo "10.77.0.1 is not routed over the bench's bridge" >&2; exit 1; }
in_sch() { ip netns exec $sch "$@"; }
in_wrk() { ip netns exec $wrk "$@"; }

# The plain TCP copy, both ways.
dd if=/dev/urandom of="$work/plain.bin" bs=1M count="$size_mb" status=none
copy() {  # copy FROM_NS TO_NS TO_ADDR [SINK] -> seconds
  local from=$1 to=$2 addr=$3 sink=${4:-file} port=$((9000 + RANDOM % 1000))
  rm -f "$work/received.bin"
  if [[ $sink == null ]]; then
    ip netns exec "$to" sh -c "socat -u TCP-LISTEN:$port,reuseaddr STDOUT >/dev/null" &
  else
    ip netns exec "$to" sh -c "socat -u TCP-LISTEN:$port,reuseaddr STDOUT | dd of=$work/received.bin bs=1M conv=fsync status=none" &
  fi
  local listener=$!
  for _ in $(seq 50); do
    ip netns exec "$to" ss -ltn | grep -q ":$port " && break
    sleep 0.1
  done
  local t0 t1
  t0=$(date +%s.%N)
  ip netns exec "$from" socat -u FILE:"$work/plain.bin" TCP:"$addr":$port
  wait $listener
  t1=$(date +%s.%N)
  if [[ $sink != null ]]; then
    cmp -s "$work/plain.bin" "$work/received.bin" || { echo "socat copy differs" >&2; exit 1; }
  fi
  /usr/bin/python3 -c "print($t1 - $t0)"
}
plain_up=$(copy $wrk $sch 10.77.0.1)
plain_down=$(copy $sch $wrk 10.77.0.2)
# The network alone (nothing written): the ceiling, for reference.
wire_up=$(copy $wrk $sch 10.77.0.1 null)
rm -f "$work/plain.bin" "$work/received.bin"

# A non-loopback address needs tokens: the bench acts as one admin (who
# may also act as a worker).
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "admin bench $(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens"
in_sch "$build/scheduler/dial-scheduler" --db="$work/dial.db" \
  --checkpoint-root="$work/scheduler-ckpt" --listen=10.77.0.1:7070 \
  --auth-tokens="$work/tokens" --insecure-allow-remote >"$work/scheduler.log" 2>&1 &
sched_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/scheduler.log" && break
  sleep 0.1
done
json=$(DIAL_TOKEN=$token in_wrk "$build/bench/transfer_bench" --target=10.77.0.1:7070 \
  --dir="$work/worker" --size_mb="$size_mb" --changed_percent=10)

mkdir -p bench/transfer/results
out=bench/transfer/results/$(date +%F).txt
/usr/bin/python3 - "$size_mb" "$plain_up" "$plain_down" "$json" "$wire_up" <<'EOF' | tee "$out"
import json, sys
size, up, down, j = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
wire = size / float(sys.argv[5])
pu, pd = size / up, size / down
print(f"checkpoint of {size:.0f} MiB between two network namespaces (veth + bridge)")
print(f"plain TCP copy (socat, fsync): upload {pu:.0f} MiB/s, download {pd:.0f} MiB/s")
print(f"plain TCP copy to /dev/null:   {wire:.0f} MiB/s (the network alone, nothing stored)")
print(f"Dial CheckpointService:        upload {j['upload_mb_s']:.0f} MiB/s, download {j['download_mb_s']:.0f} MiB/s")
print(f"ratio Dial/plain:              upload {j['upload_mb_s']/pu:.2f}, download {j['download_mb_s']/pd:.2f} (target >= 0.50)")
print(f"second checkpoint, {j['second_changed_chunks']} of {int(size)} chunks changed: "
      f"sent {j['second_sent_bytes']} bytes = {100*j['second_sent_fraction']:.1f}% (target <= 15%), "
      f"in {j['second_upload_s']:.2f} s")
EOF
