#!/usr/bin/env bash
# Failover time: the failover e2e scenario (a PostgreSQL server from Debian,
# two dial-schedulers on it, two dial-workers and an ask/tell client, all
# reporting) with the leader SIGKILLed 10 times and the default
# --leader-lease-ms (3000). Each time: seconds from the kill until a read
# through the client (which follows the dial-leader hint) is served by the
# standby; then the median and the max. The run also checks, as the test
# does, that every acknowledged report is stored exactly once. Printed and
# written to bench/ha/results/<date>-failover.txt.
#
#   bench/ha/failover.sh [BUILD_DIR]      # BUILD_DIR defaults to build
#
# Environment: FAILOVER_KILLS (default 10), FAILOVER_LEASE_MS (default 3000).
set -uo pipefail

cd "$(dirname "$0")/../.."
build=${1:-build}
test_bin="$build/tests/e2e_test"
if [[ ! -x "$test_bin" ]]; then
  echo "no $test_bin: build it first (cd $build && ninja e2e_test dial-scheduler dial-worker)" >&2
  exit 2
fi
mkdir -p bench/ha/results
out="bench/ha/results/$(date +%Y-%m-%d-%H%M%S)-failover.txt"
echo "failover benchmark $(date -Iseconds) on $(hostname), $(nproc) CPUs" | tee "$out"
DIAL_FAILOVER_KILLS=${FAILOVER_KILLS:-10} \
  DIAL_FAILOVER_LEASE_MS=${FAILOVER_LEASE_MS:-3000} \
  "$test_bin" --gtest_filter='FailoverE2eTest.*' </dev/null 2>&1 |
  grep -E "^kill |^failover over|OK \]|FAILED|Failure" | tee -a "$out"
rc=${PIPESTATUS[0]}
echo "results: $out"
exit "$rc"
