#!/usr/bin/env bash
# --fail-if as a CI gate (issue 12): on the lesson's interference run (the emulated H100 in
# virtual time: max ~130 ms, stalls at every injection) `itl.max>200ms` passes (exit 0) and
# `stalls>0` fails (exit 99), every rule printed with its value; `report` applies the same
# rules to a run's artifacts; bad rules are bad input (exit 2) before anything runs; an HTTP
# run on the embedded emulated server gives 99 for `stalls>0` too.
# usage: gate_fail_if.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

# run_to OUT CMD...: CMD's stdout and stderr in OUT, its exit status in $rc.
run_to() { local out=$1; shift; set +e; "$@" >"$out" 2>&1; rc=$?; set -e; }

run_to "$dir/pass.out" "$bin" sim --preset lesson --no-report --out "$dir/pass" --fail-if 'itl.max>200ms'
[ "$rc" = 0 ] || { cat "$dir/pass.out"; fail "itl.max>200ms: exit $rc, want 0"; }
grep -Eq '^fail-if itl\.max > 200\.0 ms: 1[0-9]{2}\.[0-9] ms  PASS$' "$dir/pass.out" ||
  fail "the rule's line: $(grep fail-if "$dir/pass.out")"
pass "sim lesson: $(grep fail-if "$dir/pass.out")"

run_to "$dir/fail.out" "$bin" sim --preset lesson --no-report --out "$dir/fail" --fail-if 'itl.max>200ms,stalls>0'
[ "$rc" = 99 ] || { cat "$dir/fail.out"; fail "stalls>0: exit $rc, want 99"; }
grep -q '^fail-if itl.max > 200.0 ms: .*  PASS$' "$dir/fail.out" || fail "first rule not printed"
grep -Eq '^fail-if stalls > 0: [1-9][0-9]*  FAIL$' "$dir/fail.out" || fail "second rule: $(grep fail-if "$dir/fail.out")"
stalls=$(json "$dir/fail/interference/summary.json" 'j["stalls"]["count"]')
grep -q "^fail-if stalls > 0: $stalls  FAIL$" "$dir/fail.out" || fail "the printed count is not summary.json's ($stalls)"
pass "sim lesson: exit 99; $(grep 'stalls >' "$dir/fail.out")"

run_to "$dir/report.out" "$bin" report "$dir/fail" --no-report --fail-if 'stalls>0'
[ "$rc" = 99 ] || fail "report --fail-if stalls>0: exit $rc"
run_to "$dir/report2.out" "$bin" report "$dir/fail" --no-report --fail-if 'stalls>100000'
[ "$rc" = 0 ] || fail "report --fail-if stalls>100000: exit $rc"
pass "report applies the rules to the artifacts (99, then 0)"

for bad in 'itl.max>200' 'nope>1' 'stalls' 'stalls>1,,x'; do
  run_to "$dir/bad.out" "$bin" sim --out "$dir/bad" --fail-if "$bad"
  [ "$rc" = 2 ] || fail "--fail-if '$bad': exit $rc, want 2"
  [ ! -e "$dir/bad" ] || fail "--fail-if '$bad': wrote $dir/bad before refusing"
done
pass "bad rules: exit 2, nothing written"

run_to "$dir/run.out" timeout 120 "$bin" run --engine emulate --users 4 --duration 3s --inject-at 1s --warmup 0 \
  --no-baseline --no-report --out "$dir/run" --save-result "$dir/run.json" --fail-if 'stalls>0,itl.max>60s'
[ "$rc" = 99 ] || { tail "$dir/run.out"; fail "run --fail-if: exit $rc, want 99"; }
grep -q '^fail-if itl.max > 60000.0 ms: .*  PASS$' "$dir/run.out" || fail "run: the max rule"
pass "run (embedded emulate): exit 99; $(grep 'stalls >' "$dir/run.out")"

# --save-result: vLLM's keys, each value worked out again from requests.csv and tokens.csv.
python3 "$PY_DIR/check_result.py" "$dir/run" "$dir/run.json" ||
  fail "--save-result disagrees with the artifacts"
