#!/usr/bin/env bash
# The systemd units of deploy/systemd, as `cmake --install` lays them out:
# systemd-analyze accepts them without a warning, their sandboxes stay
# tight, the example flag files hold only flags the binaries know, and the
# sysusers entry creates the dial user.
#
#   tests/deploy/systemd_test.sh BUILD_DIR
#
# Exits 77 (skipped) without systemd-analyze.
set -euo pipefail

build=$(realpath "$1")
command -v systemd-analyze >/dev/null || { echo "no systemd-analyze"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

prefix=$tmp/usr/local
cmake --install "$build" --prefix "$prefix" >/dev/null
for bin in dial-scheduler dial-worker dialctl; do
  [ -x "$prefix/bin/$bin" ] || fail "cmake --install did not install $bin"
done
units=$prefix/lib/systemd/system

# systemd-analyze checks that ExecStart names an executable: point the
# units at the installed tree (everything else as shipped).
mkdir "$tmp/units"
for unit in dial-scheduler.service dial-worker.service; do
  [ -f "$units/$unit" ] || fail "cmake --install did not install $unit"
  sed "s#/usr/local/bin/#$prefix/bin/#g" "$units/$unit" >"$tmp/units/$unit"
  grep -q "^ExecStart=$prefix/bin/" "$tmp/units/$unit" ||
    fail "$unit: ExecStart is not /usr/local/bin/..."
  # Warnings (an unknown key, a bad value) leave the exit status 0:
  # any output about the file fails the test.
  out=$(systemd-analyze verify "$tmp/units/$unit" 2>&1) ||
    fail "$unit: systemd-analyze verify: $out"
  if grep -F "$unit" <<<"$out"; then fail "$unit: systemd-analyze warned"; fi
done

# The verification itself catches a misspelt key.
sed 's/^Delegate=/Delegat=/' "$tmp/units/dial-worker.service" \
  >"$tmp/units/typo.service"
systemd-analyze verify "$tmp/units/typo.service" 2>&1 |
  grep -q "Unknown key" || fail "systemd-analyze verify missed a typo"

# Exposure levels (0 = fully sandboxed, 10 = none). The scheduler needs
# only its state directory and its port; the worker runs arbitrary trial
# commands that may use GPUs and JIT compilers, so it gets less.
systemd-analyze security --offline=yes --threshold=20 \
  "$tmp/units/dial-scheduler.service" >/dev/null ||
  fail "dial-scheduler.service exposure above 2.0"
systemd-analyze security --offline=yes --threshold=40 \
  "$tmp/units/dial-worker.service" >/dev/null ||
  fail "dial-worker.service exposure above 4.0"

# The worker's stop timeout covers a drain: the long poll (5 s), the
# trials' --grace-s, then their uploads (at most --grace-s again).
grace=$(sed -n 's/^--grace-s=//p' \
  "$prefix/share/dial/examples/worker.flags")
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' "$units/dial-worker.service")
[ -n "$grace" ] && [ -n "$stop" ] && [ "$stop" -gt $((2 * grace + 5)) ] ||
  fail "dial-worker.service: TimeoutStopSec=${stop}s does not cover a" \
    "drain with --grace-s=$grace"

# Example configuration: every line is a flag the binary accepts
# (Abseil rejects unknown flags), through the same --flagfile as the units.
examples=$prefix/share/dial/examples
for flags in scheduler.flags scheduler-ha.flags; do
  "$prefix/bin/dial-scheduler" --flagfile="$examples/$flags" \
    --version >/dev/null || fail "$flags has a flag dial-scheduler lacks"
done
# With a standby: a PostgreSQL URL without a password, which comes from a
# file; a lease; the checkpoints under the unit's writable state directory.
ha=$examples/scheduler-ha.flags
grep -q '^--db=postgresql://[^:@/]*@' "$ha" || fail "scheduler-ha.flags: --db"
grep -q '^--db-password-file=' "$ha" || fail "scheduler-ha.flags: no password file"
grep -q '^--leader-lease-ms=' "$ha" || fail "scheduler-ha.flags: no lease"
grep -q '^--checkpoint-root=/var/lib/dial/' "$ha" ||
  fail "scheduler-ha.flags: checkpoints outside ReadWritePaths"
"$prefix/bin/dial-worker" --flagfile="$examples/worker.flags" \
  --version >/dev/null || fail "worker.flags has a flag dial-worker lacks"
echo "--no-such-flag=1" >"$tmp/bad.flags"
if "$prefix/bin/dial-worker" --flagfile="$tmp/bad.flags" --version \
  >/dev/null 2>&1; then
  fail "an unknown flag in a flag file was accepted"
fi
# The env file sets exactly the variables the worker reads.
grep -q '^DIAL_SCHEDULER=' "$examples/worker.env" || fail "no DIAL_SCHEDULER"
# Security round two, H1: no token in any environment; the worker reads a
# file and runs trials as its own unprivileged user.
if grep -q '^DIAL_TOKEN=' "$examples/worker.env"; then
  fail "worker.env puts the token in the environment"
fi
grep -q '^--token-file=' "$examples/worker.flags" || fail "no --token-file"
grep -q '^--run-as=dial-trial$' "$examples/worker.flags" || fail "no --run-as"
# Finding 12: the worker and its trials are not the scheduler's user, and
# the worker filters system calls.
worker_unit=$units/dial-worker.service
if grep -q '^User=dial$' "$worker_unit"; then
  fail "dial-worker.service runs as the scheduler's user"
fi
grep -q '^SystemCallFilter=@system-service' "$worker_unit" ||
  fail "dial-worker.service has no SystemCallFilter"

# The sysusers entry creates a system user "dial" with no login shell.
mkdir -p "$tmp/root/etc"
systemd-sysusers --root="$tmp/root" "$prefix/lib/sysusers.d/dial.conf"
grep -q '^dial:x:[0-9]*:[0-9]*:.*:/var/lib/dial:/usr/sbin/nologin$' \
  "$tmp/root/etc/passwd" || fail "systemd-sysusers made no dial user"
grep -q '^dial-trial:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' \
  "$tmp/root/etc/passwd" || fail "systemd-sysusers made no dial-trial user"
echo "systemd units OK"
