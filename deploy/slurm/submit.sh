#!/bin/bash
# Queue a sharded stallscope run on Slurm (docs/guide/shards.md): one job array of SHARDS
# tasks (shards.sbatch), all given one start time this script computes, and the merge
# (merge.sbatch) after the array with --dependency=afterany.
#
#   deploy/slurm/submit.sh TARGET SHARDS RESULTS [run options...]
#   deploy/slurm/submit.sh http://router:8000 4 /shared/stallscope/run-1 --users 256 --duration 10m
#
# Environment: LEAD (seconds from now to t = 0, default 120: every task must have started,
# probed the server and warmed up by then), STALLSCOPE (the binary the tasks run, default
# `stallscope` on the nodes' PATH), API_KEY_FILE (a file holding the server's bearer token,
# read by each task: the token itself never enters Slurm), and sbatch's own SBATCH_PARTITION,
# SBATCH_RESERVATION, SBATCH_ACCOUNT ... (a reservation starts the tasks together on a busy
# cluster). Only these variables are handed to the jobs, not your whole environment.
# Prints the two job ids and the start time.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
TARGET=$1 SHARDS=$2 RESULTS=$3
shift 3
case $SHARDS in '' | *[!0-9]* | 0) echo "submit.sh: SHARDS must be a whole number >= 1, not '$SHARDS'" >&2; exit 2 ;; esac
LEAD=${LEAD:-120}
case $LEAD in '' | *[!0-9]*) echo "submit.sh: LEAD must be whole seconds, not '$LEAD'" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
# t = 0 on a whole second at least LEAD s from now
START_AT=$(date -u -d "@$(($(date +%s) + LEAD + 1))" +%Y-%m-%dT%H:%M:%SZ)
export START_AT TARGET RESULTS SHARDS STALLSCOPE=${STALLSCOPE:-stallscope} API_KEY_FILE=${API_KEY_FILE:-}
pass=START_AT,TARGET,RESULTS,SHARDS,STALLSCOPE,API_KEY_FILE,PATH,HOME,LANG
array=$(sbatch --parsable --array="0-$((SHARDS - 1))" --export="$pass" \
  --output="$RESULTS/shard-%a.log" "$here/shards.sbatch" "$@")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterany:$array" --kill-on-invalid-dep=no \
  --export="$pass" --output="$RESULTS/merge.log" "$here/merge.sbatch")
merge=${merge%%;*}
echo "shards: job $array ($SHARDS tasks), t = 0 at $START_AT; merge: job $merge; results in $RESULTS"
