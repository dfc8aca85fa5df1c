#!/usr/bin/env bash
# Long runs (docs/explanation/analysis.md, "Long runs"): a simulation past --tokens-csv-max keeps no
# tokens.csv, and its figures — computed by the streaming analysis as it ran — are those of the
# same simulation that kept it: the same summary.json (but the "tokens_csv" note), the same
# stalls.csv. Its report draws the per-gap charts from the digest; `report DIR` on it says why
# it cannot rebuild. The lesson's summary says its percentiles are exact.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

"$bin" sim --preset lesson --out "$dir/kept" >"$dir/kept.txt"
"$bin" sim --preset lesson --tokens-csv-max 1000 --out "$dir/dropped" >"$dir/dropped.txt"

for run in baseline interference; do
  [ -f "$dir/kept/$run/tokens.csv" ] || fail "$run: tokens.csv missing under the limit"
  [ ! -e "$dir/dropped/$run/tokens.csv" ] || fail "$run: tokens.csv kept past --tokens-csv-max"
  [ "$(json "$dir/dropped/$run/summary.json" "j['tokens_csv']['written']")" = False ] ||
    fail "$run: summary.json does not say tokens.csv was dropped"
  [ "$(json "$dir/kept/$run/summary.json" "j['itl_percentiles']['method']")" = exact ] ||
    fail "$run: the lesson's percentiles are not marked exact"
  python3 - "$dir/kept/$run/summary.json" "$dir/dropped/$run/summary.json" <<'PY' ||
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
b.pop("tokens_csv")
sys.exit(0 if a == b else 1)
PY
    fail "$run: the streamed summary differs from the kept run's"
  cmp -s "$dir/kept/$run/stalls.csv" "$dir/dropped/$run/stalls.csv" ||
    fail "$run: stalls.csv differs"
  cmp -s "$dir/kept/$run/requests.csv" "$dir/dropped/$run/requests.csv" ||
    fail "$run: requests.csv differs"
done
pass "past --tokens-csv-max: no tokens.csv, the same summaries and stalls"
grep -q "tokens.csv not kept" "$dir/dropped.txt" || fail "the run does not say tokens.csv was not kept"
[ -s "$dir/dropped/plots/timeline.png" ] && [ -s "$dir/dropped/plots/ccdf.png" ] ||
  fail "no per-gap charts from the digest"
grep -q "no chart of every gap" "$dir/dropped/report.html" && fail "the digest was not drawn"
pass "the report draws the per-gap charts from the digest"

set +e
"$bin" report "$dir/dropped" --no-report >"$dir/report.out" 2>"$dir/report.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "report DIR rebuilt a run whose events are gone"
grep -q "tokens.csv was not kept" "$dir/report.err" || { cat "$dir/report.err"; fail "report DIR: no reason"; }
pass "report DIR says why it cannot rebuild: $(head -c 120 "$dir/report.err")"
echo "sim_long: all checks passed"
