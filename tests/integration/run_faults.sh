#!/usr/bin/env bash
# stallscope run when things go wrong, and against a server that is not ours:
#  1. connection refused at start -> a clear error within 5 s, exit 1;
#  2. a (python, stdlib) vLLM-like server on the chat endpoint that refuses token-id
#     prompts (-> text calibrated against usage), sends k-token events, and sometimes stops
#     sending mid-answer -> per-request timeout counted as an error, the run goes on; the
#     text prompts' count checked against usage (within 5 %, said); the same server whose
#     tokenizer changes after the calibration -> said off, summary.json prompt_tokens shows it;
#  3. a separate `stallscope serve` killed mid-run -> clear error, exit 1, artifacts hold
#     every token received, summary "complete": false;
#  4. the embedded server killed mid-run -> the same;
#  5. --print-server-flags and bad options.
set -euo pipefail
BIN=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
PY=$(command -v python3)

# ---- 1. refused ---------------------------------------------------------------------------
PORT=$(free_port)
START=$(date +%s%N)
set +e
timeout 30 "$BIN" run --target "http://127.0.0.1:$PORT" --no-baseline --duration 2s \
  --out "$WORK/refused" >"$WORK/refused.out" 2>"$WORK/refused.err"
RC=$?
set -e
ELAPSED_MS=$(( ($(date +%s%N) - START) / 1000000 ))
[ "$RC" = 1 ] || fail "refused: exit $RC, want 1"
[ "$ELAPSED_MS" -lt 5000 ] || fail "refused: took $ELAPSED_MS ms"
grep -qi "not reachable" "$WORK/refused.err" || fail "refused: unclear error: $(cat "$WORK/refused.err")"
grep -qi "refused" "$WORK/refused.err" || fail "refused: no cause: $(cat "$WORK/refused.err")"
echo "ok   connection refused: exit 1 after $ELAPSED_MS ms: $(tail -1 "$WORK/refused.err")"

# ---- 2. a foreign server: text prompts, k-token events, stalled streams ----------------------
PORT=$(free_port)
"$PY" "$PY_DIR/text_prompt_server.py" "$PORT" >"$WORK/mock.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q ready "$WORK/mock.log" && break; sleep 0.1; done
timeout 60 "$BIN" run --target "http://127.0.0.1:$PORT/v1" --endpoint chat --api-key sk-mock \
  --header "X-Run: faults" --no-baseline --users 6 --duration 6s --inject-at 1s --inject-every 2s \
  --prompt-tokens 400 --bg-answer-tokens 30..60 --warmup 0 --request-timeout 1s \
  --out "$WORK/mock" >"$WORK/mock.out" 2>"$WORK/mock.err" || {
  cat "$WORK/mock.err"; fail "mock: run failed"; }
"$PY" - "$WORK/mock" "$WORK/mock.err" <<'EOF'
import csv, json, sys
out, err = sys.argv[1], open(sys.argv[2]).read()
s = json.load(open(f"{out}/interference/summary.json"))
c = json.load(open(f"{out}/interference/config.json"))
reqs = list(csv.DictReader(open(f"{out}/interference/requests.csv")))
toks = list(csv.DictReader(open(f"{out}/interference/tokens.csv")))
timeouts = [r for r in reqs if "timeout" in r["error"]]
problems = []
if not s["complete"]: problems.append("run not complete")
if not timeouts: problems.append("no request timed out")
if s["errors"] < len(timeouts): problems.append("timeouts not counted as errors")
first_timeout_end = min(int(r["t_end_ns"]) for r in timeouts) if timeouts else 0
if not any(int(t["t_ns"]) > first_timeout_end + 500_000_000 for t in toks):
    problems.append("no tokens after the first timeout: the run did not go on")
if not any(t["n_tokens"] == "2" for t in toks): problems.append("no 2-token event recorded")
if c["session"]["token_id_prompts"]: problems.append("token ids used although the server refused them")
if "calibrated" not in err: problems.append("no calibration note")
if c["session"]["model_name"] != "mock-model": problems.append("model name not from /v1/models")
inj = [r for r in reqs if r["kind"] == "inject"]
if len(inj) != 3: problems.append(f"{len(inj)} injections, want 3")
for r in inj:   # calibrated text: the server counted the length we asked for, within 2 %
    if abs(int(r["prompt_tokens"]) - 400) > 8: problems.append(f"injection counted {r['prompt_tokens']} tokens")
rows = sum(int(t["n_tokens"]) for t in toks)
if rows != s["tokens_received"]: problems.append("tokens.csv and summary disagree")
# the text checked against the server's counts: within the calibration, and said so
pt = s["prompt_tokens"]
if not (pt and pt["requests"] > 0 and abs(pt["ratio"] - 1) <= 0.05):
    problems.append(f"prompt_tokens not within 5 % of the plan: {pt}")
if "prompts sent as text: the server counted" not in err or "more than the text calibration" in err:
    problems.append("the text prompts' count not said, or said off")
print("     mock:", len(reqs), "requests,", len(timeouts), "timeouts,", rows, "tokens")
for p in problems: print("FAIL mock:", p)
sys.exit(1 if problems else 0)
EOF
echo "ok   foreign chat server: text calibrated, k-token events, timeouts counted, the run went on, the text's count checked"

# ---- 2b. the same server whose tokenizer changes after the calibration (three tokens a word
# from its 4th request): the prompts' count checked against usage says so
PORT=$(free_port)
"$PY" "$PY_DIR/text_prompt_server.py" "$PORT" --drift-after 3 >"$WORK/drift.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q ready "$WORK/drift.log" && break; sleep 0.1; done
timeout 60 "$BIN" run --target "http://127.0.0.1:$PORT/v1" --endpoint chat --api-key sk-mock \
  --no-baseline --users 4 --duration 3s --inject-at 1s --prompt-tokens 400 \
  --bg-answer-tokens 20..30 --warmup 0 --request-timeout 1s \
  --out "$WORK/drift" >"$WORK/drift.out" 2>"$WORK/drift.err" || {
  cat "$WORK/drift.err"; fail "drift: run failed"; }
grep -qE "prompts sent as text: the server counted [0-9]+ prompt tokens where [0-9]+ were planned \(\+[0-9.]+ %; the worst request [0-9.]+ % off\): more than the text calibration allows" \
  "$WORK/drift.err" || { cat "$WORK/drift.err"; fail "drift: the text's miscount not said"; }
"$PY" -c '
import json, sys
pt = json.load(open(sys.argv[1]))["prompt_tokens"]
sys.exit(0 if pt["ratio"] > 1.2 and pt["worst"] > 0.3 else 1)' "$WORK/drift/interference/summary.json" ||
  fail "drift: summary.json prompt_tokens does not show the miscount"
echo "ok   a tokenizer that changed after the calibration: the text prompts' count said off"

# ---- 3. a separate server killed mid-run ------------------------------------------------------
# exec: $! is the process itself (kill -9 must hit the server, not a wrapper); the trap and
# the run's own --duration bound the waits.
( exec "$BIN" serve --engine emulate --port 0 >"$WORK/serve.log" 2>&1 ) &
SERVE_PID=$!
PIDS+=($SERVE_PID)
for _ in $(seq 100); do grep -q 'listening on' "$WORK/serve.log" && break; sleep 0.1; done
URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/serve.log" | head -1)
[ -n "$URL" ] || fail "serve did not start: $(cat "$WORK/serve.log")"
( exec "$BIN" run --target "$URL" --no-baseline --users 8 --duration 20s --inject-at 1s \
  --inject-every 2s --warmup 0 --out "$WORK/killed" >"$WORK/killed.out" 2>"$WORK/killed.err" ) &
RUN_PID=$!
PIDS+=($RUN_PID)
sleep 3
kill -9 "$SERVE_PID"
set +e
wait "$RUN_PID"
RC=$?
set -e
[ "$RC" = 1 ] || fail "killed server: exit $RC, want 1: $(cat "$WORK/killed.err")"
grep -q "stopped early" "$WORK/killed.err" || fail "killed server: unclear error: $(cat "$WORK/killed.err")"
echo "ok   killed server: $(grep 'stopped early' "$WORK/killed.err")"

check_incomplete() {
  "$PY" - "$1" <<'EOF'
import csv, json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
c = json.load(open(f"{d}/config.json"))
rows = sum(int(t["n_tokens"]) for t in csv.DictReader(open(f"{d}/tokens.csv")))
assert s["complete"] is False, "summary says complete"
assert c["complete"] is False, "config says complete"
assert rows > 0 and rows == s["tokens_received"], f"tokens.csv {rows} vs summary {s['tokens_received']}"
assert s["duration_s"] > 0
print(f"     {d}: complete false, {rows} tokens kept")
EOF
}
check_incomplete "$WORK/killed/interference"

# ---- 4. the embedded server killed mid-run ----------------------------------------------------
( exec "$BIN" run --engine emulate --no-baseline --users 8 --duration 20s --inject-at 1s --inject-every 2s \
  --warmup 0 --out "$WORK/embedded_killed" >"$WORK/ek.out" 2>"$WORK/ek.err" ) &
RUN_PID=$!
PIDS+=($RUN_PID)
CHILD=
for _ in $(seq 100); do
  CHILD=$(pgrep -P "$RUN_PID" || true)
  [ -n "$CHILD" ] && grep -q 'listening on' "$WORK/embedded_killed/interference/server.log" 2>/dev/null && break
  sleep 0.1
done
[ -n "$CHILD" ] || fail "no embedded server child"
sleep 3
kill -9 "$CHILD"
set +e
wait "$RUN_PID"
RC=$?
set -e
[ "$RC" = 1 ] || fail "embedded killed: exit $RC, want 1: $(cat "$WORK/ek.err")"
grep -q "stopped early" "$WORK/ek.err" || fail "embedded killed: unclear error: $(cat "$WORK/ek.err")"
echo "ok   embedded server killed: $(grep 'stopped early' "$WORK/ek.err")"
check_incomplete "$WORK/embedded_killed/interference"

# ---- 5. the small things ----------------------------------------------------------------------
"$BIN" run --print-server-flags >"$WORK/flags.out"
for word in vllm sglang llama-server max-num-batched-tokens chunked-prefill-size batch-size; do
  grep -q -- "$word" "$WORK/flags.out" || fail "--print-server-flags lacks $word"
done
set +e
"$BIN" run --users zero >/dev/null 2>"$WORK/bad.err"; RC=$?
set -e
[ "$RC" = 2 ] || fail "bad option: exit $RC, want 2"
"$BIN" run --help >"$WORK/help.out"
grep -q -- "--target" "$WORK/help.out" || fail "--help lacks --target"
echo "ok   --print-server-flags, --help, bad options"
echo "0 failed"
