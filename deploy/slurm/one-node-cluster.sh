#!/usr/bin/env bash
# A throwaway one-node Slurm cluster on loopback, for trying the worker job
# script on one machine and for the Slurm test (tests/e2e/slurm_test.cc).
# Not for production: it runs munged, slurmctld and slurmd as root, CPU
# only, with every file (configuration, state, logs, the munge key) in DIR.
#
#   deploy/slurm/one-node-cluster.sh start DIR   # prints: export SLURM_CONF=...
#   deploy/slurm/one-node-cluster.sh stop DIR    # cancels jobs, stops daemons
#
# Needs root and Debian's slurm-wlm and munge (deploy/install-deps.sh).
# Ports 16817/16818 on 127.0.0.1 (override: DIAL_SLURM_PORT_BASE).
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$(realpath -m "$2")
base=${DIAL_SLURM_PORT_BASE:-16817}
export SLURM_CONF=$dir/slurm.conf

# Waits (at most $2 tenths of a second) until command $1 succeeds.
wait_for() {
  local i
  for ((i = 0; i < $2; i++)); do
    if eval "$1" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

# Stops the daemon whose pid file is $1 and waits (10 s) for it to exit.
stop_pid() {
  [ -s "$1" ] || return 0
  local pid
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || return 0
  wait_for "! kill -0 $pid" 100 || kill -KILL "$pid" 2>/dev/null || true
  wait_for "! kill -0 $pid" 50 || true
}

case $cmd in
start)
  if [ "$(id -u)" -ne 0 ]; then
    echo "one-node-cluster: needs root (slurmd runs jobs as their users)" >&2
    exit 3
  fi
  for tool in munged mungekey slurmctld slurmd sinfo; do
    if ! command -v "$tool" >/dev/null && [ ! -x "/usr/sbin/$tool" ]; then
      echo "one-node-cluster: $tool not found (install slurm-wlm and munge:" \
        "deploy/install-deps.sh)" >&2
      exit 3
    fi
  done
  export PATH=$PATH:/usr/sbin
  mkdir -p "$dir"/{munge,munge-run,state,spool,log}
  chmod 700 "$dir/munge" "$dir/munge-run"
  mungekey --create --keyfile="$dir/munge/munge.key" --force
  # The daemons' own stdout and stderr go to a log, never to the caller's
  # pipes (which would then never see end of file).
  exec 3>>"$dir/log/daemons.out"
  munged --force --socket="$dir/munge-run/munge.sock" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge-run/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" </dev/null >&3 2>&3
  # The node as slurmd sees it (a bare CPUs=N makes Slurm guess the
  # topology and give the node 1 MB of memory).
  node=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //')
  cat >"$SLURM_CONF" <<CONF
ClusterName=dial-test
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge-run/munge.sock
SlurmctldPort=$base
SlurmdPort=$((base + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=30
NodeName=localhost NodeAddr=127.0.0.1 $node State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  slurmctld -i </dev/null >&3 2>&3
  slurmd -N localhost </dev/null >&3 2>&3
  exec 3>&-
  if ! wait_for '[ "$(sinfo -h -o %t)" = idle ]' 300; then
    echo "one-node-cluster: the node did not become idle in 30 s:" \
      "$(sinfo -h -o '%t %E' 2>&1)" >&2
    tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    exit 1
  fi
  echo "export SLURM_CONF=$SLURM_CONF"
  ;;
stop)
  if [ -f "$SLURM_CONF" ]; then
    export PATH=$PATH:/usr/sbin
    scancel --full --signal=KILL --user=root 2>/dev/null || true
    wait_for '[ -z "$(squeue -h 2>/dev/null)" ]' 150 || true
  fi
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$dir/munge-run/munged.pid"
  ;;
*) usage ;;
esac
