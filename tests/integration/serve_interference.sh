#!/usr/bin/env bash
# ctest: run-serial
# stallscope serve, one-step prefill (--policy mixed --max-num-batched-tokens 16384) on an
# emulated H100 running Llama 3.1 8B: 32 streams, then one 8,000-token prompt.
#  - the step log shows the prefill step within 2 % of the cost model, and the decode steps
#    on the model: the median within 0.1 ms, every decode step within 0.5 ms of its modeled
#    duration except at most 5 % of them (rounded down), and each of those only if the
#    engine recorded the step that late itself (late_ns in the step log: the overrun minus
#    the recorded lateness within 0.5 ms) and the overrun is at most 10 ms
#    (serve_client.check_step_timing; docs/reference/tests.md quotes the same numbers). Four 130 ms
#    stalls fail it (serve_timing_rule.sh feeds it such logs);
#  - the prefill step's modeled time agrees with `stallscope model` (8,000-token prefill
#    alone, plus 32 decode rows: between 1x and 1.05x);
#  - every stream's token of the prefill step is written (emit_ns) and received (client
#    clock) after that step ended, and its previous token is the one of the step before.
# While it measures, one SCHED_IDLE busy loop per CPU keeps this VM's vCPUs from halting
# (a halted vCPU wakes the engine milliseconds late: serve_lib.bash, docs/results/timing-tests.md).
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

"$BIN" model --gpu h100-sxm --model llama-3.1-8b --prompt-tokens 8000 --json >"$DIR/model.json"
# One measurement (the server, the client, the step log), then its checks; run_measured
# (serve_lib.bash) measures once more when the timing rule failed only on lateness the
# engine recorded itself (serve_client.RecordedLateOnly).
measure() {
rm -f "$DIR/steps.csv" "$DIR/client.json"
keep_cpus_awake 120 # no halted vCPU while steps are timed (serve_lib.bash says why)
start_server mixed --engine emulate --gpu h100-sxm --model llama-3.1-8b --policy mixed \
  --max-num-batched-tokens 16384 --step-log "$DIR/steps.csv"
py "$(cat <<'PY'
import json, os, statistics
from serve_client import interference_run, read_steps, stamps
port, d = int(os.environ["PORT"]), os.environ["DIR"]
bg, inject, t_send = interference_run(port)
from serve_client import request
metrics = request(port, "/metrics", method="GET")[2].decode()
realtime = 'stallscope_engine_realtime{model_name="llama-3.1-8b"} 1' in metrics
json.dump({"t_send": t_send, "bg": [stamps(s) for s in bg], "inject": stamps(inject),
           "realtime": realtime}, open(f"{d}/client.json", "w"))
print("ok: 32 streams + one 8,000-token prompt finished")
PY
)"
stop_server TERM   # flushes the step log
release_cpus
}

check_measured() {
py "$(cat <<'PY'
import json, os, statistics
from serve_client import check_step_timing, read_steps
d = os.environ["DIR"]
steps = read_steps(f"{d}/steps.csv")
client = json.load(open(f"{d}/client.json"))
model_ms = json.load(open(f"{d}/model.json"))["prompts"][0]["total_ms"]

prefill = [s for s in steps if s["prefill_tokens"] >= 8000]
assert len(prefill) == 1, f"one step must carry the whole prompt: {prefill}"
p = prefill[0]
assert p["prefill_tokens"] == 8000 and p["decode_tokens"] == 32, p
actual = p["t_end_ns"] - p["t_start_ns"]
err = (actual - p["modeled_ns"]) / p["modeled_ns"]
print(f"prefill step {p['step']}: actual {actual/1e6:.3f} ms, modeled {p['modeled_ns']/1e6:.3f} ms "
      f"({100*err:+.3f} %); stallscope model: {model_ms:.3f} ms alone")
assert abs(err) <= 0.02, "prefill step not within 2 % of the cost model"
assert model_ms * 1e6 <= p["modeled_ns"] <= 1.05 * model_ms * 1e6, "modeled prefill disagrees with the model command"

decode = [s for s in steps if s["prefill_tokens"] == 0 and s["decode_tokens"] > 0]
errs = [(s["t_end_ns"] - s["t_start_ns"] - s["modeled_ns"]) / 1e6 for s in decode]
errs.sort()
print(f"decode steps: {len(errs)}, error (actual - modeled) ms: median {statistics.median(errs):.3f}, "
      f"p99 {errs[int(0.99 * (len(errs) - 1))]:.3f}, max {errs[-1]:.3f}, min {errs[0]:.3f}")
assert len(decode) > 100
assert abs(statistics.median(errs)) <= 0.1
assert errs[0] >= 0, "a decode step ended before its modeled time"
# Even under SCHED_FIFO a shared VM now and then wakes the engine thread late by a
# millisecond or two (the hypervisor, not the engine); such a step is excused only by the
# engine's own record of it (late_ns), up to 10 ms, and on at most 5 % of steps.
if not client["realtime"]:
    print("note: engine thread not SCHED_FIFO here")
excused, worst = check_step_timing(decode, lambda s: s["modeled_ns"], "decode steps")
print(f"decode steps over by > 0.5 ms, excused by the engine's late_ns: {excused} "
      f"(at most {len(decode) * 5 // 100}); worst overrun {worst / 1e6:.3f} ms")

# Every background stream's token from the prefill step comes after the step ended.
for i, st in enumerate(client["bg"]):
    at = [k for k, (t, emit, step) in enumerate(st) if step == p["step"]]
    assert len(at) == 1, f"stream {i} has no token from the prefill step"
    k = at[0]
    t_recv, emit, _ = st[k]
    assert emit >= p["t_end_ns"], f"stream {i}: written before the prefill step ended"
    assert t_recv >= p["t_end_ns"], f"stream {i}: received before the prefill step ended"
    # Its previous token came from the step before: nothing reached it during the prefill.
    assert st[k - 1][2] == p["step"] - 1, f"stream {i}: previous token from step {st[k-1][2]}"
    assert st[k - 1][1] <= p["t_start_ns"] + 50_000_000, f"stream {i}: previous token written late"
gaps = [st[k][0] - st[k - 1][0] for st in client["bg"]
        for k in range(1, len(st)) if st[k][2] == p["step"]]
print(f"client-side gap across the prefill step: min {min(gaps)/1e6:.1f} ms, "
      f"max {max(gaps)/1e6:.1f} ms")
first = client["inject"][0]
assert first[2] == p["step"], "the long prompt's first token comes from the prefill step"
print(f"ok: all 32 streams' next token arrived after the {actual/1e6:.1f} ms prefill step ended; "
      f"injection TTFT {(first[0] - client['t_send'])/1e6:.1f} ms")
PY
)"
}

run_measured
pass "serve interference (mixed, one-step prefill)"
