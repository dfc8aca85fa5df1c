#!/usr/bin/env bash
# ctest: run-serial
# stallscope sweep through `stallscope run` children (issue 6): on the embedded emulated
# engine (--engine emulate), and against a --target whose server the sweep starts and
# stops per point (--server-cmd, /health awaited). Short runs: 4 users, 3 s.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

short=(--duration 3s --users 4 --inject-at 1s --warmup 0.5s)

# 1. The embedded emulated H100: the spike grows with the prompt as the cost model says.
timeout 300 "$bin" sweep --engine emulate --prompt-tokens 2k,8k "${short[@]}" \
  --out "$dir/emulate" >"$dir/emulate.txt" 2>"$dir/emulate.err" || {
  cat "$dir/emulate.err"; fail "emulate sweep"; }
cat "$dir/emulate.txt"
S=$dir/emulate/sweep.json
check "both points ran" "[p['status'] for p in a['results']] == ['ok', 'ok']" "$S"
# Each point's spike, and the step from 2k to 8k, within 5 % of the cost model's. A spike is
# the injection's prefill step, and the engine records in steps.csv how late it woke past that
# step's deadline (late_ns): that recorded lateness is taken off the spike, and only when it is
# at most 10 ms (the step-timing rule's cap, docs/reference/tests.md). A slip the engine did
# not record is never excused; nor is one over 10 ms.
python3 - "$dir/emulate" <<'PY' || fail "spikes within 5 % of the cost model's"
import csv, json, sys
d = sys.argv[1]
res = json.load(open(f"{d}/sweep.json"))["results"]
LATE_CAP_MS = 10.0
spikes = []
for k, r in enumerate(res, 1):
    steps = list(csv.DictReader(open(f"{d}/point-{k}/interference/steps.csv")))
    pre = [s for s in steps if int(s["prefill_tokens"]) > 0]
    if not pre:
        sys.exit(f"point-{k}: no prefill step in its step log")
    late_ms = int(max(pre, key=lambda s: int(s["modeled_ns"]))["late_ns"]) / 1e6
    if late_ms > LATE_CAP_MS:
        sys.exit(f"point-{k}: its prefill step woke {late_ms:.2f} ms late, over the {LATE_CAP_MS} ms cap")
    spike = r["spike_ms"] - late_ms
    print(f"point-{k}: spike {r['spike_ms']:.2f} ms, engine late {late_ms:.2f} ms, "
          f"model {r['model_spike_ms']:.2f} ms")
    if abs(spike / r["model_spike_ms"] - 1) >= 0.05:
        sys.exit(f"point-{k}: spike {spike:.2f} ms (late taken off) not within 5 % of the model's")
    spikes.append(spike)
step = spikes[1] / spikes[0]
print(f"step x{step:.3f}, model x{res[1]['model_step']:.3f}")
if abs(step / res[1]["model_step"] - 1) >= 0.05:
    sys.exit("the step from 2k to 8k not within 5 % of the model's")
PY
pass "each spike and the step from 2k to 8k within 5 % of the cost model's"
for k in 1 2; do
  [ -s "$dir/emulate/point-$k/report.html" ] || fail "run wrote no report for point-$k"
  [ -s "$dir/emulate/point-$k/interference/steps.csv" ] || fail "point-$k lacks steps.csv"
done
grep -q 'href="point-1/report.html"' "$dir/emulate/report.html" || fail "sweep report links points"
grep -q "model, same profile (h100-sxm llama-3.1-8b mixed/16384)" "$dir/emulate/point-2/report.html" ||
  fail "an emulated run's report lacks the cost model's prediction"
pass "each point's own report (with the prediction), linked from the sweep's"

# 2. A target whose server is started per point: the fix measured beside the problem.
port=$(free_port)
timeout 300 "$bin" sweep --target "http://127.0.0.1:$port" \
  --server-cmd "'$bin' serve --engine emulate --port {port} --policy {policy} --max-num-batched-tokens {max_num_batched_tokens}" \
  --server-timeout 60s --policy mixed,chunked --max-num-batched-tokens 16384,512 --zip \
  "${short[@]}" --out "$dir/target" >"$dir/target.txt" 2>"$dir/target.err" || {
  cat "$dir/target.err"; fail "target sweep"; }
cat "$dir/target.txt"
S=$dir/target/sweep.json
check "both points ran" "[p['status'] for p in a['results']] == ['ok', 'ok']" "$S"
# The injections' spike (each one's longest gap, median over them), not the run's max: one
# pause of this shared machine (54 ms, seen once) is a max of its own, and no injection's.
check "chunked/512: spike under a fifth of mixed's" \
  "a['results'][1]['spike_ms'] * 5 < a['results'][0]['spike_ms']" "$S"
grep -q "policy mixed, max_num_batched_tokens 16384" "$dir/target/point-1/server.log" ||
  fail "point-1's server did not get its flags"
grep -q "policy chunked, max_num_batched_tokens 512" "$dir/target/point-2/server.log" ||
  fail "point-2's server did not get its flags"
python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', $port))" ||
  fail "the last server still holds port $port"
pass "servers started with each point's flags and stopped"
grep -q "a remote server: no model for it" "$dir/target/point-1/report.html" &&
  grep -q "no reference device is assumed" "$dir/target/point-1/report.html" &&
  ! grep -q "model, reference (h100-sxm" "$dir/target/point-1/report.html" ||
  fail "a target run's report: it must say there is no model, and show no H100 in its place"
pass "a target's report without --hardware: no model for that server, no H100 stand-in"

# 3. A server that never answers: the point fails, bounded, and says why.
set +e
timeout 120 "$bin" sweep --target "http://127.0.0.1:$port" --server-cmd "sleep 30" \
  --server-timeout 2s --prompt-tokens 2k,4k "${short[@]}" --out "$dir/dead" >/dev/null 2>"$dir/dead.err"
rc=$?
set -e
[ $rc = 1 ] || fail "dead server: exit $rc, expected 1"
grep -q "did not answer" "$dir/dead.err" || fail "dead server: no reason given"
check "dead server: both points failed" "[p['status'] for p in a['results']] == ['failed', 'failed']" \
  "$dir/dead/sweep.json"
echo "sweep_run: all checks passed"
