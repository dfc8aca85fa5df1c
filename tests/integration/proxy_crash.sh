#!/usr/bin/env bash
# A proxy killed (SIGKILL) in the middle of streams loses at most about a second of rows, and
# what it left is whole and reportable: `run --target` the proxy -> `serve --engine emulate`
# (8 users, streams of 400 tokens), the proxy's --out, the proxy killed -9 two seconds in.
# Checks: every file the proxy wrote ends with a newline (whole rows only); the last token row
# on disk is at most 1 s before the kill (rows are flushed every 250 ms: plog.h's
# PLOG_FLUSH_NS; the second covers a loaded machine); `stallscope report DIR` reads them, its
# window.json counting the streams cut by the kill as orphan tokens (their rows never
# written); and a second proxy started on the same --out starts a new session beside it.
set -euo pipefail
BIN=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
SERVE_PID= PROXY_PID= RUN_PID=
cleanup() {
  for pid in $RUN_PID $PROXY_PID $SERVE_PID; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

start_serve "$BIN" "$WORK/serve.log" --engine emulate --gpu h100-sxm --model llama-3.2-1b
SERVE_PID=$serve_pid
[ -n "$url" ] || { cat "$WORK/serve.log"; fail "serve did not start"; }

start_proxy() {
  rm -f "$WORK/ready"
  # no `timeout` wrapper: the kill below must reach the proxy itself (--duration bounds it)
  "$BIN" proxy --upstream "$url" --listen 127.0.0.1:0 --no-admin --duration 60s \
    --ready-file "$WORK/ready" --out "$WORK/pout" --quiet >>"$WORK/proxy.log" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 100); do [ -s "$WORK/ready" ] && break; sleep 0.1; done
  [ -s "$WORK/ready" ] || { cat "$WORK/proxy.log"; fail "the proxy did not start"; }
  read -r PORT _ <"$WORK/ready"
}
start_proxy

timeout 60 "$BIN" run --target "http://127.0.0.1:$PORT" --users 8 --duration 20s --no-inject \
  --answer-len fixed:400 --warmup 0s --no-report --out "$WORK/run" >"$WORK/run.out" 2>&1 &
RUN_PID=$!
sleep 2.5
t_kill=$(date +%s%N)
kill -9 "$PROXY_PID"
wait "$PROXY_PID" 2>/dev/null || true
PROXY_PID=
kill "$RUN_PID" 2>/dev/null || true
wait "$RUN_PID" 2>/dev/null || true
RUN_PID=

session=$(ls -d "$WORK"/pout/*/ | head -1)
n_files=0
for f in "$session"*/*.csv; do
  n_files=$((n_files + 1))
  [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" = '\n' ] || fail "$f does not end with a whole row"
done
[ "$n_files" = 3 ] || fail "expected tokens.csv, requests.csv and stalls.csv, found $n_files files"
pass "the proxy killed -9 left $n_files files, each ending with a whole row"

python3 - "$session" "$t_kill" <<'PY' || fail "rows lost past the bound"
import csv, glob, json, sys
session, t_kill = sys.argv[1], int(sys.argv[2])
meta = json.load(open(session + "proxy.json"))
last = max(int(r["t_ns"]) for p in glob.glob(session + "*/tokens.csv") for r in csv.DictReader(open(p)))
lost_ms = (t_kill - (meta["t0_unix_ns"] + last)) / 1e6
print(f"ok: the last token row on disk is {lost_ms:.0f} ms before the kill (bound 1000 ms)")
sys.exit(0 if 0 <= lost_ms <= 1000 else 1)
PY

"$BIN" report "$WORK/pout" --no-report --out "$WORK/window" >"$WORK/report.out" 2>&1 ||
  { cat "$WORK/report.out"; fail "report of a killed proxy's rows"; }
orphans=$(json "$WORK/window/window.json" 'j["orphan_events"]')
requests=$(json "$WORK/window/window.json" 'j["requests"]')
[ "$orphans" -gt 0 ] || fail "the streams cut by the kill should leave orphan token rows (got $orphans)"
pass "report read the rows: $requests requests, $orphans token events of streams cut by the kill left out"

sleep 1 # a new session is named by its start second
start_proxy
kill "$PROXY_PID"; wait "$PROXY_PID" || fail "the second proxy did not stop cleanly"
PROXY_PID=
n_sessions=$(find "$WORK/pout" -name proxy.json | wc -l)
[ "$n_sessions" = 2 ] || fail "a second proxy on the same --out: $n_sessions sessions, expected 2"
pass "a second proxy on the same --out started a session of its own"
echo "proxy_crash: all checks passed"
