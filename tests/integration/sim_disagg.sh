#!/usr/bin/env bash
# Disaggregated prefill in the simulator (--disaggregate P:D --kv-link L): the lesson's
# stall disappears with 1P:1D while one instance of the same run stalls every user; the
# injection's TTFT is its prefill plus the KV transfer (a slower link: a longer TTFT);
# summary.json counts the GPUs and the per-GPU figures; config.json keeps the setup so the
# report predicts the same; bad input is one line and exit status 2.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

# 20 s, injections at 5 and 15 s: the lesson's shape, in a few seconds even under ASan.
short=(--duration 20s --no-report)
"$bin" sim "${short[@]}" --out "$dir/one" >"$dir/one.txt"
"$bin" sim "${short[@]}" --disaggregate 1:1 --out "$dir/nv" >"$dir/nv.txt"
"$bin" sim "${short[@]}" --disaggregate 1:1 --kv-link rdma-100g --out "$dir/rdma" >"$dir/rdma.txt"
"$bin" model --gpu h100-sxm --model llama-3.1-8b --prompt-tokens 8000 --json >"$dir/model.json"
cat "$dir/nv.txt"
for f in tokens.csv requests.csv steps.csv summary.json config.json; do
  [ -s "$dir/nv/interference/$f" ] || fail "missing interference/$f"
done

O=$dir/one/interference/summary.json; N=$dir/nv/interference/summary.json
R=$dir/rdma/interference/summary.json; M=$dir/model.json
check "one instance: both injections stall all 32 users (the control)" \
  "a['stalls']['count'] >= 64 and all(i['users_stalled'] == 32 for i in a['injections'])" "$O"
check "1P:1D: no stall, no injection stalls anyone" \
  "a['stalls']['count'] == 0 and all(i['users_stalled'] == 0 for i in a['injections'])" "$N"
check "1P:1D: max gap under 3x the p50 gap (one instance: over 20x)" \
  "a['itl_ms']['max'] < 3 * a['itl_ms']['p50'] and b['itl_ms']['max'] > 20 * b['itl_ms']['p50']" "$N" "$O"
check "1P:1D: p50 gap within 2 % of one instance's" \
  "abs(a['itl_ms']['p50'] / b['itl_ms']['p50'] - 1) < 0.02" "$N" "$O"
check "injection TTFT >= the model's 8k prefill step, and within 5 % of it over NVLink" \
  "(lambda inj, p: all(p <= i['ttft_ms'] < 1.05 * p for i in inj))(a['injections'], b['prompts'][0]['total_ms'])" "$N" "$M"
check "a slower link (rdma-100g) gives a longer injection TTFT" \
  "all(r['ttft_ms'] > n['ttft_ms'] + 50 for r, n in zip(a['injections'], b['injections']))" "$R" "$N"
check "the setup is named: engine says disaggregated 1P:1D over nvlink" \
  "a['engine'].endswith('disaggregated 1P:1D over nvlink')" "$N"
check "GPUs: 2 disaggregated, 1 otherwise; per-GPU output throughput = throughput / GPUs" \
  "a['gpus'] == 2 and b['gpus'] == 1 and abs(a['per_gpu']['output_throughput'] * 2 - a['metrics']['all']['output_throughput']) < 1e-6 and b['per_gpu']['output_throughput'] == b['metrics']['all']['output_throughput'] and a['per_gpu']['request_goodput'] is None" "$N" "$O"
check "config.json records the setup" \
  "a['experiment']['disaggregate_prefill'] == 1 and a['experiment']['disaggregate_decode'] == 1 and a['experiment']['kv_link'] == 'nvlink' and a['experiment']['kv_link_bytes_per_s'] == 450e9" "$dir/nv/interference/config.json"
grep -q "disaggregated 1P:1D over nvlink" "$dir/nv.txt" || fail "the table does not name the setup"
pass "the table names the setup"

# steps.csv holds both instances' steps in start order: prefill-only and decode-only rows.
python3 - "$dir/nv/interference/steps.csv" <<'PY' || fail "steps.csv of 1P:1D"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
starts = [int(r["t_start_ns"]) for r in rows]
assert starts == sorted(starts), "not in start order"
assert all(int(r["decode_tokens"]) == 0 or int(r["prefill_tokens"]) == 0 for r in rows), "mixed step"
assert any(int(r["prefill_tokens"]) == 8000 for r in rows), "no 8k prefill step"
PY
pass "steps.csv: both instances, in start order, never a mixed step"

# --goodput: the per-GPU request goodput.
"$bin" sim --duration 10s --no-report --disaggregate 2:2 --goodput "ttft:2000 tpot:100" \
  --out "$dir/g" >/dev/null
check "2P:2D with --goodput: 4 GPUs, request goodput per GPU" \
  "a['gpus'] == 4 and abs(a['per_gpu']['request_goodput'] * 4 - a['metrics']['all']['request_goodput']) < 1e-9" \
  "$dir/g/interference/summary.json"

# The per-GPU figures are --fail-if metrics (exit 99 when a rule holds).
set +e
"$bin" sim --duration 10s --no-report --disaggregate 1:1 --fail-if 'throughput.output_per_gpu>4000' \
  --out "$dir/f1" >"$dir/f1.txt" 2>&1; rc1=$?
"$bin" sim --duration 10s --no-report --fail-if 'throughput.output_per_gpu>4000' \
  --out "$dir/f2" >"$dir/f2.txt" 2>&1; rc2=$?
set -e
[ $rc1 -eq 0 ] && [ $rc2 -eq 99 ] || fail "--fail-if throughput.output_per_gpu: exit $rc1 and $rc2, want 0 and 99"
pass "--fail-if throughput.output_per_gpu: 1P:1D passes (half per GPU), one instance fails"

# The report reads the run back and predicts it with the same setup.
"$bin" report "$dir/nv" >"$dir/report.txt" 2>&1 || { cat "$dir/report.txt"; fail "report"; }
grep -q "output tokens/s per GPU" "$dir/report.txt" || fail "the report's table lacks the per-GPU row"
check "summary.json rewritten by the report keeps the GPUs" \
  "a['gpus'] == 2 and 'per_gpu' in a" "$N"
pass "report reads a disaggregated run"

expect_usage_error() {
  local name=$1; shift
  local out=$dir/case
  rm -rf "$out"
  set +e
  "$bin" "$@" --out "$out" >"$dir/stdout" 2>"$dir/stderr"
  local rc=$?
  set -e
  [ $rc -eq 2 ] || fail "$name: exit status $rc, want 2"
  [ "$(wc -l <"$dir/stderr")" -eq 1 ] || { cat "$dir/stderr"; fail "$name: want one line on stderr"; }
  [ ! -e "$out" ] || fail "$name: $out written"
  pass "$name: $(cat "$dir/stderr")"
}
expect_usage_error "0 prefill instances" sim --disaggregate 0:1
expect_usage_error "0 decode instances" sim --disaggregate 1:0
expect_usage_error "not a number" sim --disaggregate x
expect_usage_error "no colon" sim --disaggregate 2
expect_usage_error "unknown link" sim --disaggregate 1:1 --kv-link carrier-pigeon
expect_usage_error "Gb/s is not GB/s" sim --disaggregate 1:1 --kv-link 25Gb/s
expect_usage_error "a link without --disaggregate" sim --kv-link nvlink
expect_usage_error "sweep on the embedded server" sweep --engine emulate --disaggregate 1:1 --prompt-tokens 4k,8k
grep -q "nvlink, pcie5, rdma-100g, rdma-400g" <("$bin" sim --disaggregate 1:1 --kv-link x --out "$dir/x" 2>&1 || true) ||
  fail "an unknown link does not list the known ones"
grep -q -- "--disaggregate P:D" <<<"$("$bin" sim --help)" || fail "sim --help lacks --disaggregate"
pass "sim --help documents --disaggregate and --kv-link"
echo "sim_disagg: all checks passed"
