#!/usr/bin/env bash
# Shared prefixes over HTTP (docs/guide/traces.md, "Shared prefixes"): `run --turns 4
# --system-prompt-tokens 512` against `serve --engine emulate --enable-prefix-caching` sends
# each turn as token ids holding the system prompt and the conversation so far, so the
# server's vllm:prefix_cache_hits_total matches what `sim` counts for the same workload
# (its summary.json prefix_cache.hits). Both start the 4 users at t = 0 (--warmup 0); the
# live server also counts the 8-token probe (a query, no hit), and the users' first requests
# arrive over HTTP one after another, so up to 3 of them find the 512-token system prompt
# the first computed (1,536 tokens) where the simulator admits all four in one step. The
# rule: |live hits - sim hits| <= 1,536 + 10 % of sim hits (requests completed in 3 s
# differ under load), and both hit rates above 0.5. Without the cache the server counts
# no queries.
set -euo pipefail
BIN=$1
WORK=$2
SRC=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=lib.bash
source "$SRC/tests/integration/lib.bash"
rm -rf "$WORK"
mkdir -p "$WORK"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
command -v python3 >/dev/null || skip_or_fail "python3 missing"
command -v curl >/dev/null || skip_or_fail "curl missing"
SERVE_PID=
cleanup() { [ -z "$SERVE_PID" ] || kill "$SERVE_PID" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

MODEL=(--gpu h100-sxm --model llama-3.1-8b)
WL=(--users 4 --turns 4 --system-prompt-tokens 512 --prompt-len fixed:100 --answer-len fixed:50
    --no-inject --duration 3s --warmup 0)

timeout 60 "$BIN" serve --engine emulate "${MODEL[@]}" --enable-prefix-caching --host 127.0.0.1 \
  --port 0 >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 100); do grep -q 'listening on' "$WORK/serve.log" && break; sleep 0.1; done
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.log" | head -1)
[ -n "$URL" ] || { cat "$WORK/serve.log"; fail "serve did not start"; }

timeout 60 "$BIN" run --target "$URL" "${MODEL[@]}" "${WL[@]}" --out "$WORK/live" \
  >"$WORK/live.stdout" 2>"$WORK/live.stderr" || { cat "$WORK/live.stderr"; fail "run failed"; }
curl -s --max-time 5 "$URL/metrics" >"$WORK/metrics.txt" || fail "no /metrics"
timeout 60 "$BIN" sim "${MODEL[@]}" --enable-prefix-caching "${WL[@]}" --out "$WORK/sim" \
  >/dev/null 2>"$WORK/sim.stderr" || { cat "$WORK/sim.stderr"; fail "sim failed"; }

python3 - "$WORK/metrics.txt" "$WORK/sim/traffic/summary.json" <<'PY' || fail "hits disagree"
import json, re, sys
text = open(sys.argv[1]).read()
def counter(name):
    m = re.search(r'^vllm:%s_total\{[^}]*\} ([0-9.e+]+)$' % name, text, re.M)
    return float(m.group(1)) if m else None
q, h = counter("prefix_cache_queries"), counter("prefix_cache_hits")
pc = json.load(open(sys.argv[2]))["prefix_cache"]
print(f"live: {h:.0f} hits of {q:.0f} queried tokens; sim: {pc['hits']} of {pc['queries']}")
ok = q and h / q > 0.5 and pc["hit_rate"] > 0.5 and abs(h - pc["hits"]) <= 1536 + 0.1 * pc["hits"]
sys.exit(0 if ok else 1)
PY
pass "run --turns 4 --system-prompt-tokens 512: the server's prefix-cache hits match the sim's"
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=

# Without prefix caching the same run leaves no prefix counters.
timeout 60 "$BIN" serve --engine emulate "${MODEL[@]}" --host 127.0.0.1 --port 0 \
  >"$WORK/serve2.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 100); do grep -q 'listening on' "$WORK/serve2.log" && break; sleep 0.1; done
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve2.log" | head -1)
[ -n "$URL" ] || fail "serve did not start"
timeout 60 "$BIN" run --target "$URL" "${MODEL[@]}" "${WL[@]}" --duration 1s --out "$WORK/off" \
  >/dev/null 2>"$WORK/off.stderr" || { cat "$WORK/off.stderr"; fail "run failed"; }
hits=$(curl -s --max-time 5 "$URL/metrics" | sed -n 's/^vllm:prefix_cache_hits_total{[^}]*} //p')
[ "${hits:-0}" = 0 ] || fail "hits without --enable-prefix-caching: $hits"
pass "without --enable-prefix-caching: no hits"
