#!/usr/bin/env bash
# run --target against a llama.cpp-shaped server (tests/integration/llamacpp_server.py: one
# chunk per token, usage only in the last chunk, "timings", [DONE]) with --save-result: the
# run completes and every vLLM key the result holds agrees with requests.csv and tokens.csv
# (check_result.py: the values worked out again with vLLM's meanings). Issue 12.
# usage: run_llamacpp.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || skip_or_fail "python3 is missing"
rm -rf "$dir"; mkdir -p "$dir"
port=$(free_port)
python3 "$PY_DIR/llamacpp_server.py" "$port" 20 >"$dir/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
wait_http "http://127.0.0.1:$port/health" || fail "the llama.cpp-shaped server did not come up"
timeout 120 "$bin" run --target "127.0.0.1:$port" --users 4 --duration 4s --inject-at 1s \
  --prompt-tokens 2000 --inject-max-tokens 8 --bg-answer-tokens 20..40 --warmup 0 --no-baseline \
  --no-report --out "$dir/run" --save-result "$dir/result.json" >"$dir/run.out" 2>&1 ||
  { tail -20 "$dir/run.out"; fail "the run against the llama.cpp-shaped server"; }
check "the result names the server's model and holds completed requests" \
  'a["completed"] >= 4 and a["failed"] == 0 and a["stallscope"]["complete"]' "$dir/result.json"
python3 "$PY_DIR/check_result.py" "$dir/run" "$dir/result.json" ||
  fail "--save-result disagrees with the artifacts"
