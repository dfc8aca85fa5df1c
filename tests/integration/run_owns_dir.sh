#!/usr/bin/env bash
# A run owns its directory, and what was received stays reportable (issue 15, items 1 and 2):
#  1. `run --out D` then `run --no-baseline` with other flags `--out D`: refused (exit 2,
#     nothing written); with --force the old baseline is gone and `report D` shows one run;
#  2. a directory holding files stallscope did not write is never cleared, even with --force;
#  3. `report` refuses a directory whose baseline and interference runs differ, naming the
#     field (exit 2);
#  4. a tokens.csv cut mid-row (a run killed while writing) is reported: the cut row dropped
#     with a warning, the run marked incomplete;
#  5. without --out a command's own directory holding an earlier run is kept: the new run goes
#     to the next free name beside it (out/sim-2), said in one line (issue 28, point 1); with
#     --force it replaces out/sim.
# usage: run_owns_dir.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
short=(--duration 2s --inject-at 500ms --inject-every 1s --warmup 0 --users 4)

# ---- 1. the issue's sequence, on the embedded emulated server --------------------------------
D=$dir/run
timeout 120 "$bin" run --engine emulate "${short[@]}" --out "$D" >"$dir/first.out" 2>&1 ||
  { tail -20 "$dir/first.out"; fail "first run"; }
[ -d "$D/baseline" ] || fail "first run wrote no baseline/"
before=$(cat "$D/interference/summary.json")
set +e
timeout 120 "$bin" run --engine emulate "${short[@]}" --users 2 --no-baseline --out "$D" \
  >"$dir/second.out" 2>"$dir/second.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "reused --out: exit $rc, want 2"
grep -q "already holds an earlier run" "$dir/second.err" || fail "reused --out: unclear: $(cat "$dir/second.err")"
grep -q -- "--force" "$dir/second.err" || fail "reused --out: the error does not name --force"
[ "$before" = "$(cat "$D/interference/summary.json")" ] || fail "a refused run changed the artifacts"
pass "a reused --out is refused, nothing touched: $(cat "$dir/second.err")"

timeout 120 "$bin" run --engine emulate "${short[@]}" --users 2 --no-baseline --force --out "$D" \
  >"$dir/forced.out" 2>&1 || { tail -20 "$dir/forced.out"; fail "--force run"; }
[ ! -e "$D/baseline" ] || fail "--force left the old baseline/"
check "--force: comparison.json has no baseline" 'a["baseline"] is None and a["interference"]["users"] == 2' \
  "$D/comparison.json"
"$bin" report "$D" --no-report >"$dir/report.out" 2>&1 || fail "report of the forced run"
grep -q "no baseline to compare" "$dir/report.out" || fail "report compares against a stale baseline"
pass "--force replaced the earlier run: one experiment in $D"

# ---- 2. never clear someone else's files ----------------------------------------------------
S=$dir/mine
mkdir -p "$S" && echo "my notes" >"$S/notes.txt"
set +e
"$bin" sim --users 4 --duration 2s --force --out "$S" >/dev/null 2>"$dir/mine.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "foreign directory: exit $rc, want 2"
grep -q "notes.txt" "$dir/mine.err" || fail "foreign directory: unclear: $(cat "$dir/mine.err")"
[ "$(cat "$S/notes.txt")" = "my notes" ] && [ "$(ls "$S")" = "notes.txt" ] || fail "foreign directory touched"
pass "a directory with other files is refused even with --force, nothing removed"

# ---- 3. report refuses two experiments in one directory --------------------------------------
"$bin" sim --users 4 --duration 2s --out "$dir/a" >/dev/null
"$bin" sim --users 2 --duration 2s --out "$dir/b" >/dev/null
rm -rf "$dir/a/interference" && cp -r "$dir/b/interference" "$dir/a/"
set +e
"$bin" report "$dir/a" >/dev/null 2>"$dir/mixed.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "mixed runs: report exit $rc, want 2"
grep -q "not one experiment.*workload.users (4 vs 2)" "$dir/mixed.err" ||
  fail "mixed runs: the field is not named: $(cat "$dir/mixed.err")"
pass "report refuses mixed runs: $(cat "$dir/mixed.err")"

# ---- 4. a row cut by a kill is dropped, the run reported incomplete ---------------------------
C=$dir/cut
"$bin" sim --users 4 --duration 2s --no-baseline --out "$C" >/dev/null
rows=$(($(wc -l <"$C/interference/tokens.csv") - 1))
# cut the file in the middle of its last row: no newline at the end
size=$(stat -c %s "$C/interference/tokens.csv")
truncate -s $((size - 4)) "$C/interference/tokens.csv"
"$bin" report "$C" --no-report --json >"$dir/cut.json" 2>"$dir/cut.err" ||
  fail "report refused a cut row: $(cat "$dir/cut.err")"
grep -q "dropped 1 row cut short" "$dir/cut.err" || fail "no warning for the cut row: $(cat "$dir/cut.err")"
check "cut row: incomplete, every whole row kept" \
  "a['complete'] is False and a['tokens_received'] >= $((rows - 1))" \
  "$dir/cut.json"
check "summary.json rewritten as incomplete" 'a["complete"] is False' "$C/interference/summary.json"
pass "a cut last row: dropped with a warning, the run reported incomplete"

# ---- 5. the default OUT moves on to the next free name --------------------------------------
W=$dir/cwd
mkdir -p "$W"
(cd "$W" && "$bin" sim --users 4 --duration 2s --no-baseline >/dev/null 2>"$dir/d1.err") ||
  fail "first sim without --out: $(cat "$dir/d1.err")"
(cd "$W" && "$bin" sim --users 2 --duration 2s --no-baseline >/dev/null 2>"$dir/d2.err") ||
  fail "second sim without --out: $(cat "$dir/d2.err")"
grep -q "out/sim holds an earlier run: this one goes to out/sim-2" "$dir/d2.err" ||
  fail "the second sim did not say where it went: $(cat "$dir/d2.err")"
check "the first run kept in out/sim, the second in out/sim-2" \
  'a["users"] == 4 and b["users"] == 2' "$W/out/sim/interference/summary.json" \
  "$W/out/sim-2/interference/summary.json"
(cd "$W" && "$bin" sim --users 3 --duration 2s --no-baseline --force >/dev/null 2>"$dir/d3.err") ||
  fail "--force without --out: $(cat "$dir/d3.err")"
check "--force without --out replaced out/sim" 'a["users"] == 3' "$W/out/sim/interference/summary.json"
[ ! -e "$W/out/sim-3" ] || fail "--force wrote out/sim-3"
pass "without --out: out/sim, then out/sim-2 (said on stderr), --force replaces out/sim"
echo "run_owns_dir: all checks passed"
