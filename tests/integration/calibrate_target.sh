#!/usr/bin/env bash
# ctest: run-serial
# calibrate_target — `stallscope calibrate --target URL` against `stallscope serve --engine
# emulate` (an A100 running Qwen2.5-7B, treated as a black box), on a reduced probe range:
# the profile is written (version 2, source "target", the served model's step model, one-step
# prefill inferred), `sim --hardware` takes it without --model, and its p50 and injection stall
# land within 10 % of the emulate server's own run (`run --target`, the same workload) and within
# 5 % / 10 % of the roofline that server runs (`sim --gpu a100-80g`). Then the bad input: an
# unreachable target (exit 2, nothing written), a target that refuses long prompts (the range
# shrinks and says so) with a fit refused by --max-rms (exit 1, nothing written, the probe
# named), a target that wants a key (none: exit 2; OPENAI_API_KEY works; no secret in a
# profile), a chunked target (the budget inferred), and a proxy that doubles usage (refused
# unless --count-tokens says which count to trust). About 40 s on the 2-core VM.
# usage: calibrate_target.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail

bin=$1
scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
# Timing is what this test measures: no ASan quarantine pauses (as run_emulate.sh).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

server_pid=
proxy_pid=
cleanup() {
  for p in $server_pid $proxy_pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# start_server LOG ARGS...: serve on a free port; its URL in $url ("" if it did not start).
start_server() {
  start_serve "$bin" "$1" --engine emulate --gpu a100-80g --model qwen2.5-7b "${@:2}"
  server_pid=$serve_pid
}
stop_server() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=; }

# ---- calibrate a black box: reduced range (16 streams, prompts 1k..8k, 8 interference streams)
start_server "$scratch/serve.log"
[ -n "$url" ] || { cat "$scratch/serve.log"; fail "serve did not start"; }
profile=$scratch/fitted.json
timeout 120 "$bin" calibrate --target "$url" --out "$profile" --max-streams 16 --long-context 512 \
    --seconds 300ms --min-prompt-tokens 1024 --max-prompt-tokens 8192 --repeats 1 \
    --interference-streams 8 >"$scratch/calibrate.out" 2>"$scratch/calibrate.err" ||
  { cat "$scratch/calibrate.out" "$scratch/calibrate.err"; fail "calibrate --target exited $?"; }
grep -q "wrote $profile" "$scratch/calibrate.out" || fail "calibrate did not say where it wrote"
grep -qE "decode 16 x ctx [0-9]+ +[0-9.]+ +[0-9.]+ +[-+][0-9.]+ %" "$scratch/calibrate.out" ||
  fail "calibrate did not print each probe with its fitted time and residual"
grep -q "residuals (relative): decode rms" "$scratch/calibrate.out" || fail "no residuals printed"
grep -q "prefill:  8192-token prompt alone" "$scratch/calibrate.err" || fail "no progress on stderr"
check "profile: version 2, source target, the served model's step model, every probe's residual" \
  '(a["version"] == 2 and a["source"] == "target" and a["kind"] == "server" and
    a["target"].startswith("http://127.0.0.1:") and a["step_model"]["model"] == "qwen2.5-7b" and
    a["measured"]["served_model"] == "qwen2.5-7b" and a["measured"]["accepted"] is True and
    len(a["probes"]) == 10 + 4 and all("residual" in p for p in a["probes"]) and
    a["step_model"]["decode_rms"] < 0.15 and a["step_model"]["prefill_rms"] < 0.15 and
    "peak_flops" not in a)' "$profile"
check "interference: 4 prompts into 8 streams, one-step prefill inferred (budget >= 8192)" \
  '(len(a["measured"]["interference"]) == 4 and a["measured"]["policy_inferred"] == "mixed" and
    a["measured"]["budget_inferred"] == 8192 and a["measured"]["budget_is_lower_bound"] is True and
    a["measured"]["predicts_probes"] is True)' "$profile"
check "the emulate server offers vLLM's reset, used between probes; no prefix caching detected, a paged KV layout" \
  '(a["measured"]["state"]["reset"] == "/reset_prefix_cache" and a["measured"]["state"]["reset_server"] == "vLLM" and
    a["measured"]["state"]["resets"] > 4 and a["prefix_caching"] is False and a["kv_layout"] == "paged")' "$profile"

# ---- a proxy that doubles usage.completion_tokens (the stream untouched), issue 22 defect 1:
# refused by default (exit 1, nothing written, both counts said; the sentinel's answers, run
# to max_tokens, add the counts past it as protocol violations); --count-tokens stream fits
# the server's own step (within 10 % of the direct probe above), not half of it
proxy_port=$(free_port)
timeout 120 python3 "$PY_DIR/usage_proxy.py" "$proxy_port" "$url" >"$scratch/proxy.out" 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do grep -qs ready "$scratch/proxy.out" && break; sleep 0.1; done
small=(--max-streams 2 --long-context 512 --seconds 300ms --min-prompt-tokens 1024
       --max-prompt-tokens 2048 --repeats 1 --no-interference)
set +e
timeout 60 "$bin" calibrate --target "http://127.0.0.1:$proxy_port" --out "$scratch/doubled.json" \
    "${small[@]}" >"$scratch/doubled.out" 2>"$scratch/doubled.err"
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$scratch/doubled.out" "$scratch/doubled.err"; fail "doubled usage: exit $rc, not 1"; }
grep -qE "usage and the stream disagree \(usage counted [0-9]+ tokens where [0-9]+ streamed, (1\.9[5-9]|2\.0[0-5]) per event[^)]*\): the fit is refused; --count-tokens stream or usage says which to trust; nothing written" \
  "$scratch/doubled.err" || { cat "$scratch/doubled.err"; fail "doubled usage: the disagreement is not said"; }
[ ! -e "$scratch/doubled.json" ] || fail "doubled usage: a profile was written"
timeout 60 "$bin" calibrate --target "http://127.0.0.1:$proxy_port" --out "$scratch/doubled.json" \
    "${small[@]}" --count-tokens stream >"$scratch/stream.out" 2>"$scratch/stream.err" ||
  { cat "$scratch/stream.out" "$scratch/stream.err"; fail "--count-tokens stream exited $?"; }
kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=
grep -qE "note: usage and the stream disagree \(usage counted .* (1\.9[5-9]|2\.0[0-5]) per event" "$scratch/stream.out" ||
  { cat "$scratch/stream.out"; fail "--count-tokens stream: the disagreement is not noted"; }
check "--count-tokens stream: the one-stream step within 10 % of the direct probe's, counted from the stream" \
  '(abs([d["gap_ms"] for d in a["measured"]["decode"] if d["streams"] == 1 and d["prompt_tokens"] == 64][0] /
        [d["gap_ms"] for d in b["measured"]["decode"] if d["streams"] == 1 and d["prompt_tokens"] == 64][0] - 1) <= 0.10 and
    a["measured"]["tokens"]["counted_from"] == "stream" and
    a["measured"]["tokens"]["usage"] > 1.9 * a["measured"]["tokens"]["streamed"] and
    b["measured"]["tokens"]["usage"] == b["measured"]["tokens"]["streamed"])' "$scratch/doubled.json" "$profile"

# ---- the emulate server's own run, then sim on the fitted profile and on the true roofline
workload=(--users 8 --duration 6s --inject-at 2s --inject-every 3s --prompt-tokens 4000 --no-baseline)
timeout 60 "$bin" run --target "$url" "${workload[@]}" --out "$scratch/run" >"$scratch/run.out" 2>&1 ||
  { cat "$scratch/run.out"; fail "run --target exited $?"; }
stop_server
"$bin" sim --hardware "$profile" "${workload[@]}" --out "$scratch/sim" >"$scratch/sim.out" 2>&1 ||
  { cat "$scratch/sim.out"; fail "sim --hardware (no --model) exited $?"; }
"$bin" sim --gpu a100-80g --model qwen2.5-7b "${workload[@]}" --out "$scratch/roof" >"$scratch/roof.out" 2>&1 ||
  { cat "$scratch/roof.out"; fail "sim --gpu a100-80g exited $?"; }
grep -q "qwen2.5-7b" "$scratch/sim/interference/config.json" || fail "sim did not run the fitted model"
s=$scratch/sim/interference/summary.json
# The live stall: the smaller of the two injections' spikes (a pause of this shared VM during
# one of them is the machine, not the model; the two spikes are the same step).
check "sim on the fitted profile: p50 and the injection stall within 10 % of the live run" \
  '(abs(a["itl_ms"]["p50"] / b["itl_ms"]["p50"] - 1) <= 0.10 and
    abs(min(i["max_gap_ms"] for i in a["injections"]) / min(i["max_gap_ms"] for i in b["injections"]) - 1) <= 0.10)' \
  "$s" "$scratch/run/interference/summary.json"
check "sim on the fitted profile: p50 within 5 %, max gap within 10 % of the roofline the server runs" \
  'abs(a["itl_ms"]["p50"] / b["itl_ms"]["p50"] - 1) <= 0.05 and abs(a["itl_ms"]["max"] / b["itl_ms"]["max"] - 1) <= 0.10' \
  "$s" "$scratch/roof/interference/summary.json"
python3 - "$s" "$scratch/run/interference/summary.json" "$scratch/roof/interference/summary.json" <<'PY'
import json, sys
f, r, g = (json.load(open(p)) for p in sys.argv[1:])
print("   p50 ms: fitted %.3f  live %.3f  roofline %.3f;  max ms: fitted %.1f  live %.1f  roofline %.1f;"
      " injection spikes ms: fitted %s  live %s"
      % (f["itl_ms"]["p50"], r["itl_ms"]["p50"], g["itl_ms"]["p50"], f["itl_ms"]["max"],
         r["itl_ms"]["max"], g["itl_ms"]["max"], [round(i["max_gap_ms"], 1) for i in f["injections"]],
         [round(i["max_gap_ms"], 1) for i in r["injections"]]))
PY

# ---- another model than the fitted one: refused with the model to use ------------------------
if "$bin" sim --hardware "$profile" --model llama-3.1-8b --duration 2s --no-baseline \
    --out "$scratch/other" >"$scratch/other.out" 2>&1; then fail "sim ran another model on a target profile"; fi
grep -q "use --model qwen2.5-7b" "$scratch/other.out" || { cat "$scratch/other.out"; fail "no hint of the fitted model"; }
pass "a target profile runs its own model only, and says which"

# ---- an unreachable target: exit 2, one line, nothing written ----------------------------------
port=$(free_port)
set +e
"$bin" calibrate --target "http://127.0.0.1:$port" --out "$scratch/none.json" >"$scratch/none.out" 2>"$scratch/none.err"
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$scratch/none.err"; fail "unreachable target: exit $rc, not 2"; }
[ "$(wc -l <"$scratch/none.err")" = 1 ] || { cat "$scratch/none.err"; fail "unreachable target: not one line"; }
grep -q "not reachable" "$scratch/none.err" || fail "unreachable target: no reason"
[ ! -e "$scratch/none.json" ] || fail "unreachable target: a profile was written"
pass "unreachable target: exit 2, one line, nothing written"

# bad flags: exit 2
set +e
"$bin" calibrate --target "$url" --max-rms nope >/dev/null 2>"$scratch/flag.err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q -- "--max-rms" "$scratch/flag.err" || fail "a bad --max-rms: exit $rc"
pass "a bad flag: exit 2"

# the connection's flags are run's (one table), each listed once
"$bin" calibrate --target "$url" --help >"$scratch/help.out"
conn='^  --(target|model-name|insecure|transport) '
[ "$(grep -cE -- "$conn" "$scratch/help.out")" = 4 ] || { cat "$scratch/help.out"; fail "calibrate --target --help: the connection's flags not listed once each"; }
"$bin" run --help | grep -E -- "$conn" | diff - <(grep -E -- "$conn" "$scratch/help.out") >/dev/null ||
  fail "calibrate --target's connection flags differ from run's"
pass "calibrate --target --help lists run's --target --model-name --insecure --transport once"

# ---- a target that refuses long prompts (budget 2048, one-step), and a fit held to 1e-9 ------
# (it wants a key: refused without one, exit 2; OPENAI_API_KEY then gets the probes through)
start_server "$scratch/serve2.log" --max-num-batched-tokens 2048 --api-key s3cret-2048
[ -n "$url" ] || { cat "$scratch/serve2.log"; fail "serve (budget 2048) did not start"; }
set +e
env -u OPENAI_API_KEY "$bin" calibrate --target "$url" --out "$scratch/nokey.json" >/dev/null 2>"$scratch/nokey.err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "refused our credentials" "$scratch/nokey.err" && [ ! -e "$scratch/nokey.json" ] ||
  { cat "$scratch/nokey.err"; fail "a target that wants a key: exit $rc"; }
pass "a target that wants a key, none given: exit 2, said, nothing written"
set +e
OPENAI_API_KEY=s3cret-2048 timeout 60 "$bin" calibrate --target "$url" --out "$scratch/refused.json" --max-streams 8 \
    --long-context 0 --seconds 200ms --min-prompt-tokens 1024 --max-prompt-tokens 4096 --repeats 1 \
    --no-interference --max-rms 1e-9 >"$scratch/refused.out" 2>"$scratch/refused.err"
rc=$?
set -e
stop_server
[ "$rc" = 1 ] || { cat "$scratch/refused.out" "$scratch/refused.err"; fail "refused fit: exit $rc, not 1"; }
grep -q "the target refused a 4096-token prompt" "$scratch/refused.err" ||
  { cat "$scratch/refused.err"; fail "the shrinking range was not said"; }
grep -q "note: the prefill range shrank: .*stop at 2048 tokens" "$scratch/refused.out" ||
  { cat "$scratch/refused.out"; fail "the summary does not say where the range stopped"; }
grep -qE "the fit is refused: .*the probe that disagreed most: (decode|prefill) .*nothing written" \
  "$scratch/refused.err" || { cat "$scratch/refused.err"; fail "the refusal does not name the probe"; }
[ ! -e "$scratch/refused.json" ] || fail "a refused fit was written"
pass "long prompts refused: the range shrank and said so; a refused fit: exit 1, the probe named, nothing written"

# ---- a chunked target (budget 2048): the stalls stop growing past the budget, which comes back
start_server "$scratch/serve3.log" --policy chunked --max-num-batched-tokens 2048 --api-key k3y-chunked
[ -n "$url" ] || { cat "$scratch/serve3.log"; fail "serve (chunked 2048) did not start"; }
# the URL with a user:password (curl's to send) the profile must not keep
timeout 60 "$bin" calibrate --api-key k3y-chunked --transport curl --target "${url/http:\/\//http://someone:hunter2@}" --out "$scratch/chunked.json" \
    --max-streams 4 --long-context 512 --seconds 200ms --min-prompt-tokens 1024 --max-prompt-tokens 8192 \
    --repeats 1 --interference-streams 8 >"$scratch/chunked.out" 2>"$scratch/chunked.err" ||
  { cat "$scratch/chunked.out" "$scratch/chunked.err"; fail "calibrate a chunked target exited $?"; }
stop_server
check "chunked target: policy chunked, budget within 10 % of 2048" \
  '(a["measured"]["policy_inferred"] == "chunked" and abs(a["measured"]["budget_inferred"] / 2048 - 1) <= 0.10 and
    a["measured"]["budget_is_lower_bound"] is False and a["measured"]["predicts_probes"] is True)' "$scratch/chunked.json"
grep -q "simulate it with --policy chunked --max-num-batched-tokens" "$scratch/chunked.out" || fail "no sim flags for a chunked target"
! grep -q -e hunter2 -e k3y-chunked "$scratch/chunked.json" || fail "a secret reached the profile"
check "the profile records the URL with its user:password masked" 'a["target"].startswith("http://***@127.0.0.1:")' "$scratch/chunked.json"

# ---- a small chunked budget (512): the fitted step alone read it as ~250 (issue 24: the fit
# over-predicts small chunks); the steps each prefill took (8192 tokens in 17 chunks of 504
# beside 8 streams ...) hold it within 5 %. That over-prediction puts the profile's own
# interference probes off by up to about 30 % (each printed beside its prediction; the step
# model overlapped, 30-50 % added):
# --force-profile keeps it, whether refused or not
start_server "$scratch/serve4.log" --policy chunked --max-num-batched-tokens 512
[ -n "$url" ] || { cat "$scratch/serve4.log"; fail "serve (chunked 512) did not start"; }
timeout 60 "$bin" calibrate --target "$url" --out "$scratch/chunked512.json" --force-profile \
    --max-streams 4 --long-context 512 --seconds 200ms --min-prompt-tokens 1024 --max-prompt-tokens 8192 \
    --repeats 1 --interference-streams 8 >"$scratch/chunked512.out" 2>"$scratch/chunked512.err" ||
  { cat "$scratch/chunked512.out" "$scratch/chunked512.err"; fail "calibrate a chunked/512 target exited $?"; }
stop_server
check "chunked target (512): budget within 5 %, bounded by the steps counted" \
  '(a["measured"]["policy_inferred"] == "chunked" and abs(a["measured"]["budget_inferred"] / 512 - 1) <= 0.05 and
    a["measured"]["budget_counted"] is True and
    [p["steps"] for p in a["measured"]["interference"]][-1] == 17)' "$scratch/chunked512.json"
