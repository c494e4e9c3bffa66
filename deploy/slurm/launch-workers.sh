#!/usr/bin/env bash
# Submits N dial-worker jobs (one array, one worker per node) with
# dial-worker.sbatch beside this script.
#
#   DIAL_SCHEDULER=HOST:PORT deploy/slurm/launch-workers.sh N [SBATCH ARGS] \
#       [-- DIAL-WORKER FLAGS]
#
# e.g. launch-workers.sh 8 --partition=gpu --gres=gpu:4 --cpus-per-task=32 \
#        --time=24:00:00 -- --trials-per-gpu=2
# Prints the array's job id. Cancel them all with `scancel JOBID`; drain
# one worker with `scancel --signal=TERM --batch JOBID_TASK` (its worker id,
# in `dialctl trials list`, is NODE-jJOBID_TASK-...).
set -euo pipefail

if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N [sbatch args] [-- dial-worker flags]" >&2
  exit 2
fi
if [ -z "${DIAL_SCHEDULER:-}" ]; then
  echo "launch-workers: set DIAL_SCHEDULER to the scheduler's host:port" >&2
  exit 2
fi
n=$1
shift
sbatch_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  sbatch_args+=("$1")
  shift
done
[ $# -gt 0 ] && shift  # the "--"
here=$(dirname "$(realpath "$0")")
# Logs named as squeue names the jobs (ARRAYJOB_TASK); an --output in the
# arguments wins.
exec sbatch --parsable --array="1-$n" --output=dial-worker-%A_%a.out \
  "${sbatch_args[@]}" \
  "$here/dial-worker.sbatch" "$@"
