#!/usr/bin/env bash
# ctest: run-serial
# cpu_calibrate — `stallscope calibrate` writes a hardware profile that `model` and `sim`
# accept with --hardware, and bad profiles or options are refused with a reason.
# usage: cpu_calibrate.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail

bin=$1
scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"

# ---- calibrate: short probes, the tiny model, a small prefill check ------------------
profile=$scratch/hw.json
"$bin" calibrate --threads 1 --seconds 0 --model tiny --prompt-tokens 256 --out "$profile" \
    >"$scratch/calibrate.out" 2>&1 || { cat "$scratch/calibrate.out"; fail "calibrate exited $?"; }
grep -q "wrote $profile" "$scratch/calibrate.out" || fail "calibrate did not say where it wrote"
check "profile has positive rates, F32 weights, an F16 KV cache, 1 thread" \
  '(a["peak_flops"] > 0 and a["attention_flops"] > 0 and a["mem_bandwidth"] > 0 and a["mem_bytes"] > 0 and
    a["bytes_per_param"] == 4 and a["kv_bytes_per_elem"] == 2 and a["threads"] == 1 and
    a["step_overhead_ns"] >= 0 and a["name"] == "cpu-1t" and
    a["measured"]["fit_model"] == "tiny" and a["measured"]["decode_ns"] > 0)' "$profile"
check "profile version 2: the step model fitted on tiny, every probe with its residual" \
  '(a["version"] == 2 and a["source"] == "cpu-engine" and a["step_model"]["model"] == "tiny" and
    min(a["step_model"]["step_ns"], a["step_model"]["seq_ns"], a["step_model"]["ctx_ns"],
        a["step_model"]["token_ns"], a["step_model"]["pair_ns"]) >= 0 and
    a["step_model"]["step_ns"] + a["step_model"]["seq_ns"] > 0 and len(a["probes"]) == 20 and
    [1 for p in a["probes"] if "residual" in p and p["ns"] > 0] == [1] * 20)' "$profile"
grep -q "residuals (relative): decode rms" "$scratch/calibrate.out" || fail "calibrate did not print the residuals"
grep -qE "decode 32 x ctx 512 +[0-9.]+ +[0-9.]+ +[-+][0-9.]+ %" "$scratch/calibrate.out" ||
  fail "calibrate did not print each probe with its fitted time and residual"
pass "calibrate printed every probe, its fit and the residuals"

# ---- sim without --model: the profile's fitted model, priced by its step model -----------
"$bin" model --hardware "$profile" --decode-batch 32 --decode-context 512 --json >"$scratch/model_fit.json"
check "model --hardware picks the fitted model and prices decode by the step model" \
  '(a["model"] == "tiny" and abs(a["decode_ms"] * 1e6 - (b["step_model"]["step_ns"] + 32 * b["step_model"]["seq_ns"] +
     32 * 512 * b["step_model"]["ctx_ns"])) < 0.01 * a["decode_ms"] * 1e6 + 1)' "$scratch/model_fit.json" "$profile"

# ---- model: the profile replaces --gpu -------------------------------------------------
"$bin" model --hardware "$profile" --model ref-256 --prompt-tokens 8000 --json >"$scratch/model.json"
check "model --hardware uses the profile" \
  '(a["gpu"] == "cpu-1t" and abs(a["peak_flops"] - b["peak_flops"]) < 1e-6 * b["peak_flops"] and a["prompts"][0]["total_ms"] > 0 and
    abs(a["step_overhead_ms"] * 1e6 - b["step_overhead_ns"]) < 1)' "$scratch/model.json" "$profile"

# --step-overhead still overrides the profile's
"$bin" model --hardware "$profile" --model ref-256 --step-overhead 7ms --json >"$scratch/model7.json"
check "--step-overhead overrides the profile" 'a["step_overhead_ms"] == 7.0' "$scratch/model7.json"

# ---- sim: a short lesson-shaped run on the profile --------------------------------------
# (--step-overhead: a Debug build's fitted overhead is the unoptimised code's, not the CPU's)
# The lesson's 8,000-token prompt (virtual time: it costs the test nothing): the profile's
# prefill, fitted up to 256 tokens, must stand 10x above its decode step whatever the
# instruction set. In the sanitizer build with AVX-512 the decode step is the slow one
# (8 sequences ~19 ms) and a 2,000-token prompt was priced at only ~4.5x it.
"$bin" sim --hardware "$profile" --step-overhead 1ms --model tiny --users 8 --duration 8s --inject-at 2s \
    --inject-every 4s --prompt-tokens 8000 --out "$scratch/sim" >"$scratch/sim.out" 2>&1 ||
    { cat "$scratch/sim.out"; fail "sim --hardware exited $?"; }
check "sim on the profile: injections stall and align" \
  '(a["stalls"]["count"] > 0 and a["stalls"]["aligned_fraction"] == 1.0 and
    a["spike_ratio"] > 10)' "$scratch/sim/interference/summary.json"

# ---- refusals ---------------------------------------------------------------------------
echo '{"name": "broken", "peak_flops": 1e11}' >"$scratch/broken.json"
python3 - "$profile" "$scratch/bad_term.json" "$scratch/future.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["step_model"]["seq_ns"] = "fast"
json.dump(p, open(sys.argv[2], "w"))
p["step_model"]["seq_ns"] = 1.0
p["version"] = 3
json.dump(p, open(sys.argv[3], "w"))
PY
set +e
"$bin" model --hardware "$scratch/broken.json" --model tiny >/dev/null 2>"$scratch/broken.err"
rc=$?
"$bin" model --hardware "$scratch/nope.json" --model tiny >/dev/null 2>"$scratch/nope.err"
rc_missing=$?
"$bin" calibrate --threads 0 >/dev/null 2>"$scratch/threads.err"
rc_threads=$?
"$bin" calibrate --model gpt-5 >/dev/null 2>"$scratch/model.err"
rc_model=$?
"$bin" sim --hardware "$scratch/bad_term.json" >/dev/null 2>"$scratch/bad_term.err"
rc_term=$?
"$bin" sim --hardware "$scratch/future.json" >/dev/null 2>"$scratch/future.err"
rc_future=$?
set -e
[ "$rc_term" -eq 2 ] && grep -q "step_model.seq_ns" "$scratch/bad_term.err" &&
  pass "a profile whose step model has a non-numeric term is refused, the term named" ||
  fail "bad step term: exit $rc_term, $(cat "$scratch/bad_term.err")"
[ "$rc_future" -eq 2 ] && grep -q "newer" "$scratch/future.err" &&
  pass "a profile of a newer version is refused" ||
  fail "version 3: exit $rc_future, $(cat "$scratch/future.err")"
[ "$rc" -eq 2 ] && grep -q "mem_bandwidth" "$scratch/broken.err" && pass "a profile without mem_bandwidth is refused" \
    || fail "broken profile: exit $rc, $(cat "$scratch/broken.err")"
[ "$rc_missing" -eq 2 ] && grep -q "nope.json" "$scratch/nope.err" && pass "a missing profile is refused" \
    || fail "missing profile: exit $rc_missing"
[ "$rc_threads" -eq 2 ] && pass "calibrate --threads 0 is refused" || fail "--threads 0: exit $rc_threads"
[ "$rc_model" -eq 2 ] && grep -q "tiny" "$scratch/model.err" && pass "calibrate --model gpt-5 lists the models" \
    || fail "--model gpt-5: exit $rc_model"
grep -q -- "--hardware" <<<"$("$bin" calibrate --help)" && pass "calibrate --help" || fail "calibrate --help"
echo "cpu_calibrate: all passed"
