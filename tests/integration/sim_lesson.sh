#!/usr/bin/env bash
# The lesson in virtual time (issue 2's acceptance): alignment, flat median, exploding tail,
# p99 moving only when spikes exceed 1 % of gaps, and chunked prefill as the fix.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

# 1. The lesson preset: every injection aligned, max gap = the prefill step, flat p50/p99.
"$bin" sim --preset lesson --out "$dir/lesson" >"$dir/lesson.txt"
cat "$dir/lesson.txt"
"$bin" model --gpu h100-sxm --model llama-3.1-8b --prompt-tokens 8000 --json >"$dir/model.json"
for f in tokens.csv requests.csv steps.csv summary.json config.json; do
  for label in baseline interference; do
    [ -s "$dir/lesson/$label/$f" ] || fail "missing $label/$f"
  done
done
[ -s "$dir/lesson/comparison.json" ] || fail "missing comparison.json"
C=$dir/lesson/comparison.json; M=$dir/model.json
check "4 injections, all aligned" \
  "len(a['interference']['injections']) == 4 and a['interference']['stalls']['aligned_fraction'] == 1.0 and all(i['users_stalled'] == 32 for i in a['interference']['injections'])" "$C"
check "max gap within 5 % of the model's 8k prefill step" \
  "abs(a['interference']['itl_ms']['max'] / b['prompts'][0]['total_ms'] - 1) < 0.05" "$C" "$M"
check "interference p50 within 5 % of baseline" \
  "abs(a['interference']['itl_ms']['p50'] / a['baseline']['itl_ms']['p50'] - 1) < 0.05" "$C"
check "interference p99 within 2 % of baseline" \
  "abs(a['interference']['itl_ms']['p99'] / a['baseline']['itl_ms']['p99'] - 1) < 0.02" "$C"
check "baseline has no stalls" "a['baseline']['stalls']['count'] == 0" "$C"
grep -q "injections" "$dir/lesson.txt" || fail "table lacks the injections row"

# 2. The lesson's own simulation: ~10 ms decode steps. p99 stays, max and p99.9 rise.
"$bin" sim --preset lesson --step-overhead 5ms --out "$dir/ten" --json >"$dir/ten.json"
check "decode steps average about 10 ms (p50 gap 9.5..10.5 ms)" \
  "9.5 <= a['baseline']['itl_ms']['p50'] <= 10.5" "$dir/ten.json"
check "each user sees about 3,900 gaps (+-5 %)" \
  "abs(a['interference']['itl_ms']['count'] / 32 / 3900 - 1) < 0.05" "$dir/ten.json"
check "p99 unchanged (within 2 %)" \
  "abs(a['interference']['itl_ms']['p99'] / a['baseline']['itl_ms']['p99'] - 1) < 0.02" "$dir/ten.json"
check "max rises at least 10x, p99.9 rises" \
  "a['interference']['itl_ms']['max'] >= 10 * a['baseline']['itl_ms']['max'] and a['interference']['itl_ms']['p999'] > a['baseline']['itl_ms']['p999']" "$dir/ten.json"
"$bin" sim --preset lesson --step-overhead 5ms --inject-every 1s --inject-at 0.5s \
  --out "$dir/every1s" --json >"$dir/every1s.json"
check "injecting every 1 s: p99 >= 5x baseline p99" \
  "a['interference']['itl_ms']['p99'] >= 5 * a['baseline']['itl_ms']['p99']" "$dir/every1s.json"

# 3. The fix: chunked prefill, 512-token budget. Tail flat, injections' TTFT up.
"$bin" sim --preset lesson --out "$dir/mixed" --json >"$dir/mixed.json"
"$bin" sim --preset lesson --policy chunked --max-num-batched-tokens 512 --out "$dir/chunked" \
  --json >"$dir/chunked.json"
check "chunked: max gap <= 3x p50" \
  "a['interference']['itl_ms']['max'] <= 3 * a['interference']['itl_ms']['p50']" "$dir/chunked.json"
check "chunked: every injection's TTFT above mixed's" \
  "all(x['ttft_ms'] > y['ttft_ms'] for x, y in zip(a['interference']['injections'], b['interference']['injections']))" \
  "$dir/chunked.json" "$dir/mixed.json"
"$bin" sim --preset lesson --policy chunked --max-num-batched-tokens 512 --out "$dir/chunked" --force \
  | grep -i "ttft" >/dev/null || fail "chunked table lacks TTFT"

# The simulator warms up as run does (issue 28, point 12): by default the 32 users are mid-answer
# at t = 0, carried over (t_send -1), and the cold start's prefill of all 32 first prompts is
# not in the background TTFT; --warmup 0 starts cold, every user's first request sent at 0.
carried() { python3 -c 'import csv,sys; print(sum(r["t_send_ns"] == sys.argv[2] for r in csv.DictReader(open(sys.argv[1]))))' "$1" "$2"; }
[ "$(carried "$dir/lesson/baseline/requests.csv" -1)" = 32 ] &&
  [ "$(carried "$dir/lesson/baseline/requests.csv" 0)" = 0 ] || fail "sim did not warm up: $(head -3 "$dir/lesson/baseline/requests.csv")"
"$bin" sim --preset lesson --warmup 0 --no-report --out "$dir/cold" >/dev/null
[ "$(carried "$dir/cold/baseline/requests.csv" 0)" = 32 ] &&
  [ "$(carried "$dir/cold/baseline/requests.csv" -1)" = 0 ] || fail "--warmup 0 did not start cold"
# A background TTFT is the step under way when the request lands (the client's turnaround:
# sim.h) and its own prefill's step, about two decode steps; the cold start's first prompts
# wait for one step holding all 32 prefills, several times that.
check "warm: background TTFT p99 about p50 (< 2 x p50); cold: the first prompts' prefill (> 3 x p50)" \
  'a["ttft_ms"]["p99"] < 2 * a["ttft_ms"]["p50"] and b["ttft_ms"]["p99"] > 3 * b["ttft_ms"]["p50"]' \
  "$dir/lesson/baseline/summary.json" "$dir/cold/baseline/summary.json"
steps0=$(python3 -c 'import csv,sys; print(min(int(r["t_start_ns"]) for r in csv.DictReader(open(sys.argv[1]))))' "$dir/lesson/baseline/steps.csv")
[ "$steps0" -ge 0 ] || fail "a step before t = 0 in steps.csv: $steps0"
pass "sim warms up as run does; --warmup 0 starts cold"

# A run too short for its first injection (at 5 s) says so (issue 28, point 11); one that
# holds it, or has no injector, says nothing.
"$bin" sim --duration 4s --users 4 --out "$dir/short" >/dev/null 2>"$dir/short.err"
grep -q "warning: no injection falls inside the run: the first is planned at 5.00 s and the run lasts 4.00 s" \
  "$dir/short.err" || fail "4 s run: no warning: $(cat "$dir/short.err")"
check "4 s run: indeed no injection" 'a["interference"]["injections"] == []' "$dir/short/comparison.json"
"$bin" sim --duration 6s --users 4 --out "$dir/six" >/dev/null 2>"$dir/six.err"
"$bin" sim --duration 4s --users 4 --no-inject --out "$dir/none" >/dev/null 2>"$dir/none.err"
! grep -q "no injection" "$dir/six.err" "$dir/none.err" || fail "a warning where an injection falls inside, or none is asked for"
pass "a run with no injection inside warns, naming both times"
echo "sim_lesson: all checks passed"
