#!/usr/bin/env bash
# stallscope tune in the simulator (issue 13): a small grid of the lesson's workload; the
# choice meets every SLO by tune.json's own figures and has the most output throughput of
# the feasible points up to the 1 % tie; the front is non-dominated and holds every point
# no other dominates; the server flags carry the choice; bad SLO text and bad lists exit 2
# and write nothing; an SLO no setting meets exits 1, names the closest setting and the SLO
# that binds, and still writes tune.json.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

grid=(--policies mixed,chunked --budgets 256,1024,4096,16384 --max-num-seqs 16,64)

# 1. A feasible search: exit 0, the choice meets the SLOs.
timeout 120 "$bin" tune --slo 'itl.p99.9<100ms,ttft.p99<2s,itl.max<50ms' "${grid[@]}" \
  --out "$dir/ok" >"$dir/ok.txt" 2>"$dir/ok.err" || { cat "$dir/ok.err"; fail "tune exited $?"; }
cat "$dir/ok.txt"
T=$dir/ok/tune.json
[ -s "$dir/ok/tune.html" ] || fail "no tune.html"
check "16 points, 6 of them cannot serve (mixed with a budget under the 8000-token prompt)" \
  "len(a['points']) == 16 and sum(not p['servable'] for p in a['points']) == 6" "$T"
check "the choice is feasible and meets every SLO by its own figures" \
  "a['choice']['feasible'] and all(s['met'] and (s['value'] < s['limit']) for s in a['points'][a['choice']['index']]['slo'])" "$T"
check "itl.max<50ms rules out one-step prefill of the 8k prompt (mixed/16384: ~130 ms)" \
  "all(not p['feasible'] for p in a['points'] if p['name'].startswith('mixed/'))" "$T"
check "the choice has the most output throughput of the feasible points (1 % tie)" \
  "max(p['predicted']['output_throughput'] for p in a['points'] if p['feasible']) * 0.99 <= a['choice']['predicted']['output_throughput']" "$T"
check "the front is non-dominated and complete" "$(cat <<'PY'
(lambda pts, front, dom: all((i in front) == (pts[i]['servable'] and not any(dom(q, pts[i]) for q in pts if q['servable'] and q is not pts[i])) for i in range(len(pts))))(
  a['points'], a['front'],
  lambda q, p: q['predicted']['output_throughput'] >= p['predicted']['output_throughput'] and q['predicted']['ttft_p99_ms'] <= p['predicted']['ttft_p99_ms'] and q['predicted']['itl_p999_ms'] <= p['predicted']['itl_p999_ms'] and (q['predicted']['output_throughput'] > p['predicted']['output_throughput'] or q['predicted']['ttft_p99_ms'] < p['predicted']['ttft_p99_ms'] or q['predicted']['itl_p999_ms'] < p['predicted']['itl_p999_ms']))
PY
)" "$T"
check "every infeasible servable point names the SLOs it fails" \
  "all(p['failing'] for p in a['points'] if p['servable'] and not p['feasible'])" "$T"
name=$(json "$T" "j['choice']['setting']['name']")
budget=$(json "$T" "j['choice']['setting']['max_num_batched_tokens']")
seqs=$(json "$T" "j['choice']['setting']['max_num_seqs']")
grep -q "^Chosen: $name" "$dir/ok.txt" || fail "the table does not name the choice $name"
grep -q "vllm serve MODEL --max-num-batched-tokens $budget --max-num-seqs $seqs" "$dir/ok.txt" ||
  fail "no vLLM flags for the choice"
grep -q "sglang.*--max-running-requests $seqs" "$dir/ok.txt" || fail "no SGLang flags"
grep -q "llama-server .*--parallel $seqs" "$dir/ok.txt" || fail "no llama.cpp flags"
grep -q "cannot serve the workload" "$dir/ok.txt" || fail "the cannot-serve points are not summed up"
grep -q "the chosen $name" "$dir/ok/tune.html" || fail "the page does not mark the choice"
pass "the choice is named, with its server flags, in the table and on the page"

# 2. --all lists every point.
timeout 120 "$bin" tune "${grid[@]}" --all --json --out "$dir/all" >"$dir/all.json" 2>/dev/null ||
  fail "tune --json exited $?"
check "--json prints tune.json's document" "len(a['points']) == 16" "$dir/all.json"
timeout 120 "$bin" tune "${grid[@]}" --all --out "$dir/all" --force >"$dir/all.txt" 2>/dev/null
[ "$(grep -cE '^  (mixed|chunked)/[0-9]+/[0-9]+ ' "$dir/all.txt")" -ge 16 ] ||
  fail "--all does not list the 16 points"
pass "--all lists every point; --force reuses OUT"

# 3. Bad input: one line, exit 2, nothing written.
for bad in "--slo itl.p99.9<<100ms" "--slo nosuch.metric<1" "--slo itl.max<100" \
           "--budgets 256,abc" "--policies mixed,fast" "--max-num-seqs 0" "--policy chunked"; do
  rc=0
  # shellcheck disable=SC2086
  timeout 60 "$bin" tune $bad --out "$dir/bad" >"$dir/bad.out" 2>"$dir/bad.err" || rc=$?
  [ "$rc" = 2 ] || fail "'$bad' exited $rc, not 2"
  [ "$(wc -l <"$dir/bad.err")" = 1 ] || { cat "$dir/bad.err"; fail "'$bad': not one line"; }
  [ ! -e "$dir/bad" ] || fail "'$bad' wrote $dir/bad"
done
pass "bad SLO text and bad lists: exit 2, one line, nothing written"

# 4. No feasible point: exit 1, the closest setting and the binding SLO.
rc=0
timeout 120 "$bin" tune --slo 'itl.p99.9<100ms,itl.max<1ms' "${grid[@]}" --out "$dir/none" \
  >"$dir/none.txt" 2>"$dir/none.err" || rc=$?
cat "$dir/none.txt" "$dir/none.err"
[ "$rc" = 1 ] || fail "an infeasible search exited $rc, not 1"
grep -q "itl.max<1ms binds" "$dir/none.err" || fail "stderr does not name the binding SLO"
grep -q "the closest is" "$dir/none.txt" || fail "no closest setting"
check "tune.json: no choice, the closest and itl.max<1ms binding" \
  "not a['choice']['feasible'] and a['choice']['binding_slo'] == 'itl.max<1ms' and a['choice']['closest']['name']" \
  "$dir/none/tune.json"
pass "infeasible: exit 1, the closest setting and the SLO that binds"

# 5. --disaggregate: one instance against 1P:1D, judged per GPU; --kv-link alone is refused.
timeout 120 "$bin" tune "${grid[@]}" --disaggregate 1:1 --kv-link pcie5 --out "$dir/disagg" \
  >"$dir/disagg.txt" 2>/dev/null || fail "tune --disaggregate exited $?"
cat "$dir/disagg.txt"
grep -q "One instance against disaggregated prefill" "$dir/disagg.txt" ||
  fail "no comparison of one instance against the split"
grep -qE '^  1P:1D pcie5 ' "$dir/disagg.txt" || fail "the comparison has no 1P:1D row"
grep -q "One instance against disaggregated prefill" "$dir/disagg/tune.html" ||
  fail "tune.html has no comparison of one instance against the split"
# The split's ring on the chart (html_tune.c's SPLIT_COLOUR as cairo writes it), and only there.
grep -q 'stroke:rgb(55%,34%,29%)' "$dir/disagg/tune.html" || fail "the chart does not mark the split"
! grep -q 'stroke:rgb(55%,34%,29%)' "$dir/ok/tune.html" || fail "a chart without splits marks one"
[ -s "$dir/disagg/plots/tune_front.png" ] && [ -s "$dir/disagg/plots/tune_front.svg" ] ||
  fail "no plots/tune_front.{png,svg}"
check "tune.json: per-GPU objective, the split's points on 2 GPUs, per GPU = half the output" \
  "a['search']['objective'] == 'output_throughput_per_gpu' and a['search']['disaggregate'] == ['1:1'] and len(a['points']) == 32 and all(p['gpus'] == 2 and p['kv_link'] == 'pcie5' and (not p['servable'] or abs(p['predicted']['output_throughput_per_gpu'] * 2 - p['predicted']['output_throughput']) < 1e-6) for p in a['points'] if p.get('disaggregate') == '1:1') and sum(1 for p in a['points'] if p.get('disaggregate') == '1:1') == 16" \
  "$dir/disagg/tune.json"
rc=0
timeout 60 "$bin" tune --kv-link pcie5 --out "$dir/badlink" >/dev/null 2>"$dir/badlink.err" || rc=$?
[ "$rc" = 2 ] && [ ! -e "$dir/badlink" ] || fail "--kv-link without --disaggregate exited $rc"
pass "--disaggregate: the split searched beside one instance, per GPU; --kv-link alone refused"
