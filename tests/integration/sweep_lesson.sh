#!/usr/bin/env bash
# stallscope sweep in the simulator, on the emulated H100 (issue 6's acceptance):
# 4k/8k/16k spikes step x2.12 and x2.23 (the lesson's arithmetic, --lesson-flops) and match
# the cost model; 10 s vs 1 s injections (10 ms decode steps): p99 flat vs p99 up; mixed vs
# chunked: the tail flattened and the TTFT raised; the token-budget trade-off plot.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

# result SWEEP POINT EXPR: a python expression over that point's results, bound to r.
result() {
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); r=[p for p in j['results'] if p['label']==sys.argv[2]][0]; print($3)" \
    "$1/sweep.json" "$2"
}
plots_ok() { for p in "$@"; do [ -s "$dir/$p" ] || fail "missing $p"; done; }

# 1. Spike vs prompt length: the lesson's FLOP count (--lesson-flops: 16 GFLOP per token),
#    so the steps are the lesson's 2.12 and 2.23; and the cost model's own prediction.
"$bin" sweep --prompt-tokens 4k,8k,16k --lesson-flops --out "$dir/prompt" >"$dir/prompt.txt"
cat "$dir/prompt.txt"
"$bin" model --lesson-flops --prompt-tokens 4k,8k,16k --json >"$dir/model.json"
S=$dir/prompt/sweep.json; M=$dir/model.json
check "three points ran" "[p['status'] for p in a['results']] == ['ok', 'ok', 'ok']" "$S"
check "spike 4k -> 8k: x2.12 (+-0.02)" "abs(a['results'][1]['spike_step'] - 2.12) <= 0.02" "$S"
check "spike 8k -> 16k: x2.23 (+-0.02)" "abs(a['results'][2]['spike_step'] - 2.23) <= 0.02" "$S"
check "steps match 'stallscope model' (prefill alone, +-0.02)" \
  "all(abs(x['spike_step'] - y['scaling_vs_previous']) <= 0.02 for x, y in list(zip(a['results'], b['prompts']))[1:])" "$S" "$M"
check "steps match the model's step with the decodes beside it (+-0.5 %)" \
  "all(abs(x['spike_step'] / x['model_step'] - 1) < 0.005 for x in a['results'][1:])" "$S"
check "the spike is the model's prefill step (+-2 %)" \
  "all(abs(x['spike_ms'] / y['total_ms'] - 1) < 0.02 for x, y in zip(a['results'], b['prompts']))" "$S" "$M"
grep -q "×2.23" "$dir/prompt.txt" || fail "the table lacks the step column"
plots_ok prompt/report.html prompt/sweep.csv prompt/plots/spike_vs_prompt.png \
  prompt/plots/spike_vs_prompt.svg prompt/plots/percentiles.png
[ "$(wc -l <"$dir/prompt/sweep.csv")" = 4 ] || fail "sweep.csv: header + 3 rows"
pass "spike vs prompt plot, sweep.csv"

# 2. Every 10 s vs every 1 s with ~10 ms decode steps: p99 moves only at 1 s.
"$bin" sweep --inject-every 10s,1s --inject-at 0.5s --step-overhead 5ms --out "$dir/period" \
  --json >"$dir/period.json"
S=$dir/period/sweep.json
check "decode steps about 10 ms (p50 9.5..10.5)" \
  "all(9.5 <= p['itl_ms']['p50'] <= 10.5 for p in a['results'])" "$S"
check "every 10 s: p99 within 2 % of the baseline's" \
  "abs(a['results'][0]['itl_ms']['p99'] / a['results'][0]['baseline_itl_ms']['p99'] - 1) < 0.02" "$S"
check "every 1 s: p99 at least 5x the baseline's" \
  "a['results'][1]['itl_ms']['p99'] >= 5 * a['results'][1]['baseline_itl_ms']['p99']" "$S"
check "max up 10x in both" \
  "all(p['itl_ms']['max'] >= 10 * p['baseline_itl_ms']['max'] for p in a['results'])" "$S"
check "--json printed sweep.json" "a == b" "$dir/period.json" "$S"

# 3. mixed vs chunked (512-token chunks), pairwise: the tail flattened, the TTFT raised.
"$bin" sweep --policy mixed,chunked --max-num-batched-tokens 16384,512 --zip \
  --out "$dir/fix" >/dev/null
S=$dir/fix/sweep.json
check "mixed: max gap >= 10x p50" \
  "a['results'][0]['itl_ms']['max'] >= 10 * a['results'][0]['itl_ms']['p50']" "$S"
check "chunked: max gap <= 3x p50 (tail flattened)" \
  "a['results'][1]['itl_ms']['max'] <= 3 * a['results'][1]['itl_ms']['p50']" "$S"
check "chunked: the long prompt's TTFT above mixed's" \
  "a['results'][1]['injection_ttft_p50_ms'] > a['results'][0]['injection_ttft_p50_ms']" "$S"

# 4. The trade-off: chunked over token budgets; every combination with mixed, whose small
#    budgets are refused (a point that cannot run, not a failure).
"$bin" sweep --max-num-batched-tokens 512,2048,16384 --policy chunked,mixed \
  --out "$dir/budget" >"$dir/budget.txt"
S=$dir/budget/sweep.json
check "mixed below the prompt: refused, with the scheduler's reason" \
  "[p['status'] for p in a['results']] == ['ok', 'ok', 'ok', 'refused', 'refused', 'ok'] and 'budget' in a['results'][3]['reason']" "$S"
check "chunked: max gap grows with the budget" \
  "a['results'][0]['itl_ms']['max'] < a['results'][1]['itl_ms']['max'] < a['results'][2]['itl_ms']['max']" "$S"
check "chunked: TTFT shrinks with the budget (2k and 16k within 1 %: both near one step)" \
  "a['results'][0]['injection_ttft_p50_ms'] > a['results'][1]['injection_ttft_p50_ms'] and abs(a['results'][1]['injection_ttft_p50_ms'] / a['results'][2]['injection_ttft_p50_ms'] - 1) < 0.01" "$S"
grep -q "refused" "$dir/budget.txt" || fail "the table hides the refused points"
plots_ok budget/plots/tradeoff.png budget/plots/tradeoff.svg budget/report.html
grep -q '<figure id="fig-tradeoff">' "$dir/budget/report.html" || fail "report lacks the trade-off"
pass "trade-off plot"

# 5. report DIR rebuilds a sweep.
rm "$dir/prompt/report.html"
"$bin" report "$dir/prompt" >"$dir/rebuild.txt"
[ -s "$dir/prompt/report.html" ] && grep -q "point-3" "$dir/rebuild.txt" || fail "report on a sweep"
pass "report DIR on a sweep"

# 6. Bad input: exit 2, one line, nothing run.
expect_usage() {
  local what=$1; shift
  set +e; "$bin" sweep "$@" --out "$dir/bad" >/dev/null 2>"$dir/bad.err"; local rc=$?; set -e
  [ $rc = 2 ] || fail "$what: exit $rc, expected 2"
  # at most: a point's header and one line per server (vLLM, SGLang, llama.cpp, TGI, ours)
  # for two points, after the reason
  [ "$(wc -l <"$dir/bad.err")" -le 13 ] || fail "$what: too much on stderr"
  [ ! -e "$dir/bad/sweep.json" ] || fail "$what: wrote a sweep"
  pass "$what: exit 2 ($(head -1 "$dir/bad.err"))"
}
expect_usage "nothing varies" --prompt-tokens 8k
expect_usage "three parameters" --prompt-tokens 4k,8k --users 4,8 --inject-every 10s,1s
expect_usage "a bad value" --prompt-tokens 4k,8q
expect_usage "--zip with unequal lists" --policy mixed,chunked --max-num-batched-tokens 1,2,3 --zip
expect_usage "an unknown option" --prompt-tokens 4k,8k --frobnicate
expect_usage "server-side parameters on a target without --server-cmd" \
  --target http://127.0.0.1:9 --policy mixed,chunked
"$bin" sweep --target http://127.0.0.1:9 --policy mixed,chunked --max-num-batched-tokens 16384,512 \
  --zip --print-server-flags >"$dir/flags.txt"
grep -q -- "--max-num-batched-tokens 512 --enable-chunked-prefill" "$dir/flags.txt" ||
  fail "--print-server-flags"
pass "--print-server-flags"
echo "sweep_lesson: all checks passed"
