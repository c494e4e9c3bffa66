#!/usr/bin/env bash
# ctest scale_bench_smoke_secure: a short load against a dial-scheduler
# serving TLS with client certificates and tokens from deploy/dev-ca.sh.
#   bench/scale/secure_smoke.sh SCALE_BENCH_BINARY
set -euo pipefail
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$(dirname "$0")/../../deploy/dev-ca.sh" "$dir/pki" >/dev/null
"$bench" --workers=8 --clients=2 --seconds=1 --warmup=0.5 \
  --tls_dir="$dir/pki"
