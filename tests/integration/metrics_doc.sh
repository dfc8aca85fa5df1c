#!/usr/bin/env bash
# docs/reference/metrics.md is the metric table's own reference (analysis/metric.h): the file
# must be exactly what `stallscope metrics --markdown` prints, so a row added, renamed or
# re-labelled in src/analysis/metric.c fails here until the doc is regenerated:
#   build/stallscope metrics --markdown > docs/reference/metrics.md
# `stallscope metrics` lists the same ids, and a rule on a family's percentile works.
# usage: metrics_doc.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
doc=$src/docs/reference/metrics.md
[ -f "$doc" ] || fail "no $doc"

"$bin" metrics --markdown >"$dir/metrics.md"
diff -u "$doc" "$dir/metrics.md" >"$dir/diff" ||
  { head -40 "$dir/diff"; fail "docs/reference/metrics.md differs from 'stallscope metrics --markdown': regenerate it"; }
pass "docs/reference/metrics.md is the table's ($(grep -c '^| `' "$doc") rows)"

"$bin" metrics >"$dir/list.txt"
ids=$(grep -o '^| `[^`]*`' "$doc" | cut -c4- | tr -d '`')
for id in $ids; do
  grep -q "^  $id " "$dir/list.txt" || fail "'stallscope metrics' does not list $id"
done
rc=0; "$bin" metrics --nope >/dev/null 2>"$dir/bad.err" || rc=$?
[ "$rc" = 2 ] || fail "metrics --nope: exit $rc, want 2"
pass "'stallscope metrics' lists every id; a bad option exits 2"
