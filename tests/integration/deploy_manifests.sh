#!/usr/bin/env bash
# The Kubernetes Jobs, the image and the Slurm scripts of deploy/, checked without a cluster
# (issue 27; tests/integration/py/check_deploy.py says each check):
#  1. deploy/k8s/*.yaml parse as YAML and hold what docs/guide/shards.md relies on:
#     completionMode Indexed, parallelism = completions = N, backoffLimit 0, restartPolicy
#     Never, JOB_COMPLETION_INDEX handed to --shard as INDEX/N, --start-at from the
#     START_AT_HERE placeholder, each shard's --out on the claim the merge Job mounts, the
#     merge Job's SHARDS = N; the Dockerfile builds on Debian 12 with scripts/deps.sh and
#     puts stallscope and stallscope-merge on PATH; the Slurm scripts' array and afterany;
#  2. one source: docs/guide/shards.md shows each of those files as it is;
#  3. each check can fail: in a copy, the files broken one way at a time, the checker must
#     fail and name the check that caught it.
# Without PyYAML: a FAILURE as root or with CI=true (`make test` installs python3-yaml:
# scripts/deps.sh test), skipped (exit 77) otherwise.
# usage: deploy_manifests.sh STALLSCOPE_BINARY SCRATCH_DIR   (the binary is not used)
set -euo pipefail
dir=$2
# shellcheck source=lib.bash
. "$(dirname "$0")/lib.bash"
rm -rf "$dir" && mkdir -p "$dir"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=python3
$PY -c 'import yaml' 2>/dev/null || PY=/usr/bin/python3
$PY -c 'import yaml' 2>/dev/null || skip_or_fail "no PyYAML (Debian: python3-yaml)"
checker=$PY_DIR/check_deploy.py

"$PY" "$checker" "$src" >"$dir/whole.out" 2>&1 || { cat "$dir/whole.out"; fail "the repository's deploy files"; }
sed 's/^/     /' "$dir/whole.out"
pass "deploy/: $(grep -c '^ok' "$dir/whole.out") checks hold"

# mutate NAME FILE FROM TO EXPECTED: a copy of deploy/ and docs/guide with FROM (exactly once
# in FILE) replaced by TO must fail the check whose line contains EXPECTED.
mutate() {
  local name=$1 file=$2 from=$3 to=$4 expected=$5 copy=$dir/$1
  mkdir -p "$copy/docs"
  cp -r "$src/deploy" "$copy/"
  cp -r "$src/docs/guide" "$copy/docs/"
  replace_once "$copy/$file" "$from" "$to" || fail "mutation $name: '$from' is not in $file exactly once"
  if "$PY" "$checker" "$copy" >"$copy.out" 2>&1; then
    cat "$copy.out"
    fail "mutation $name ($file: '$from' -> '$to') passed the checker"
  fi
  grep -q "^FAIL .*$expected" "$copy.out" || {
    cat "$copy.out"
    fail "mutation $name: no failed check names '$expected'"
  }
  echo "ok   caught: $name ($(grep -m1 '^FAIL' "$copy.out" | cut -c6-))"
}
mutate not-indexed deploy/k8s/shards.yaml 'completionMode: Indexed' 'completionMode: NonIndexed' 'completionMode Indexed'
mutate fewer-at-once deploy/k8s/shards.yaml 'parallelism: 4' 'parallelism: 2' 'parallelism'
mutate retried deploy/k8s/shards.yaml '  backoffLimit: 0' '  backoffLimit: 3' 'backoffLimit 0'
mutate wrong-count deploy/k8s/shards.yaml 'JOB_COMPLETION_INDEX/4' 'JOB_COMPLETION_INDEX/3' 'handed to --shard'
mutate no-index deploy/k8s/shards.yaml '--shard "$JOB_COMPLETION_INDEX/4"' '--shard "0/4"' 'handed to --shard'
mutate fixed-start deploy/k8s/shards.yaml 'value: "START_AT_HERE"' 'value: "2026-12-01T10:00:00Z"' 'START_AT_HERE'
mutate off-volume deploy/k8s/shards.yaml '--out "/results/shard-' '--out "/tmp/shard-' "each shard's --out"
mutate merge-count deploy/k8s/merge.yaml 'value: "4"' 'value: "3"' 'SHARDS'
mutate merge-elsewhere deploy/k8s/merge.yaml '{name: RESULTS, value: /results}' '{name: RESULTS, value: /data}' 'RESULTS'
mutate not-yaml deploy/k8s/merge.yaml $'\nspec:' $'\nspec: [' 'parses as YAML'
mutate other-base deploy/container/Dockerfile 'FROM debian:bookworm' 'FROM ubuntu:24.04' 'Debian 12'
mutate afterok deploy/slurm/submit.sh 'afterany:' 'afterok:' 'afterany'
mutate doc-drift docs/guide/shards.md '  completionMode: Indexed' '  completionMode:   Indexed' 'shows deploy/k8s/shards.yaml'
echo "deploy_manifests: all checks passed"
