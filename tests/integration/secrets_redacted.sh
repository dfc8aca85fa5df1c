#!/usr/bin/env bash
# No credential from a URL or a server command reaches a file or the terminal (issue 22,
# defect 2; common/redact.h is the one rule):
#  1. run --target http://user:PASS@127.0.0.1:PORT (curl) with --scrape-metrics URL?key=QKEY
#     against serve --engine emulate completes; every writer shows the URLs with ***
#     (config.json target, argv, metrics_url; summary.json, comparison.json, report.html, the
#     notes);
#  2. the target with ?key=QKEY too: the run completes on both transports (raw sends the
#     credentials as Basic auth, both keep the query on every request), and unreachable (the
#     error names the URL);
#  3. tune --verify --server-cmd '... --api-key K' --api-key K: the candidate runs, and
#     verify-1/config.json's argv, tune.json, tune.html and server.log hold no K;
# then every file of every output directory and every captured stdout/stderr is searched for
# PASS, QKEY and K.
# usage: secrets_redacted.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
PASS=pw-SECRET-7d1e
QKEY=qk-SECRET-51c3
KEY=ak-SECRET-90f2
port=$(free_port)
"$bin" serve --engine emulate --port "$port" >"$dir/serve.out" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
wait_http "http://127.0.0.1:$port/health" || fail "the server did not come up"
short=(--duration 2s --inject-at 500ms --users 3 --warmup 0 --no-baseline)

# ---- 1. a run that completes with user:password in its target ---------------------------------
timeout 60 "$bin" run --target "http://user:$PASS@127.0.0.1:$port" --transport curl \
  --scrape-metrics "http://user:$PASS@127.0.0.1:$port/metrics?key=$QKEY" "${short[@]}" \
  --out "$dir/ok" >"$dir/ok.out" 2>"$dir/ok.err" || { cat "$dir/ok.out" "$dir/ok.err"; fail "the run"; }
C=$dir/ok/interference/config.json
check "config.json: the target and the metrics URL with their secrets masked, argv too" \
  'a["client"]["target"] == "http://***@127.0.0.1:'"$port"'" and a["target"] == a["client"]["target"] and a["session"]["metrics_url"] == "http://***@127.0.0.1:'"$port"'/metrics?key=***" and "http://***@127.0.0.1:'"$port"'/metrics?key=***" in a["argv"]' "$C"
check "summary.json and comparison.json name the masked target" \
  'a["target"] == "http://***@127.0.0.1:'"$port"'" and b["interference"]["target"] == a["target"]' \
  "$dir/ok/interference/summary.json" "$dir/ok/comparison.json"
grep -q "http://\*\*\*@127.0.0.1:$port" "$dir/ok/report.html" || fail "report.html does not show the masked target"
grep -q "scrapes of http://\*\*\*@127.0.0.1:$port/metrics?key=\*\*\*" "$dir/ok.err" ||
  fail "the metrics note does not show the masked URL: $(cat "$dir/ok.err")"
pass "a run with user:password in its target: every writer shows ***"

# ---- 2. the query key in the target: a run on each transport, and unreachable ------------------
for t in raw curl; do
  [ "$t" = raw ] && o=$dir/raw || o=$dir/query
  rc=0
  timeout 60 "$bin" run --target "http://user:$PASS@127.0.0.1:$port/?key=$QKEY" --transport "$t" \
    "${short[@]}" --out "$o" >"$o.out" 2>"$o.err" || rc=$?
  [ "$rc" = 0 ] || { cat "$o.err"; fail "a target with user:password and a query on $t: exit $rc"; }
  check "$t: the run's config.json holds the masked target" \
    'a["client"]["target"] == "http://***@127.0.0.1:'"$port"'/?key=***" and a["client"]["transport"] == "'"$t"'"' \
    "$o/interference/config.json"
done
dead=$(free_port)
rc=0
timeout 60 "$bin" run --target "http://user:$PASS@127.0.0.1:$dead/?key=$QKEY" --transport curl \
  "${short[@]}" --out "$dir/dead" >"$dir/dead.out" 2>"$dir/dead.err" || rc=$?
[ "$rc" = 1 ] && grep -q "the server at http://\*\*\*@127.0.0.1:$dead/?key=\*\*\* is not reachable" "$dir/dead.err" ||
  { cat "$dir/dead.err"; fail "unreachable: exit $rc, the error does not name the masked URL"; }
pass "runs with credentials and a query on raw and curl, and an unreachable one: their files and errors show ***"

# ---- 3. tune --verify with the key in the server command -----------------------------------------
port2=$(free_port)
cmd="'$bin' serve --engine emulate --gpu a100-80g --model qwen2.5-7b --port {port} --policy {policy} --max-num-batched-tokens {budget} --api-key $KEY"
timeout 120 "$bin" tune --gpu a100-80g --model qwen2.5-7b --users 4 --duration 2s --inject-at 500ms \
  --policies chunked --budgets 512 --max-num-seqs 64 --slo 'itl.p99.9<5s' --verify --top 1 \
  --target "http://127.0.0.1:$port2" --api-key "$KEY" --server-cmd "$cmd" --server-timeout 60s \
  --out "$dir/tune" >"$dir/tune.out" 2>"$dir/tune.err" || { cat "$dir/tune.out" "$dir/tune.err"; fail "tune --verify"; }
check "tune: the candidate ran against the server that wants the key" 'a["verified"][0]["ran"]' "$dir/tune/tune.json"
check "verify-1/config.json: argv keeps the server command with its key masked" \
  'any(s.endswith("--max-num-batched-tokens {budget} --api-key ***") for s in a["argv"]) and a["argv"][a["argv"].index("--api-key") + 1] == "***"' \
  "$dir/tune/verify-1/interference/config.json"

# ---- every file, every output -------------------------------------------------------------------
n=$(find "$dir/ok" "$dir/raw" "$dir/query" "$dir/dead" "$dir/tune" -type f | wc -l)
[ "$n" -ge 20 ] || fail "only $n files to search"
if grep -r -a -l -e "$PASS" -e "$QKEY" -e "$KEY" "$dir"/ok "$dir"/raw "$dir"/query "$dir"/dead \
     "$dir"/tune "$dir"/*.out "$dir"/*.err; then
  grep -r -a -o -h -e ".\{0,60\}$PASS.\{0,20\}" -e ".\{0,60\}$QKEY.\{0,20\}" -e ".\{0,60\}$KEY.\{0,20\}" \
    "$dir"/ok "$dir"/raw "$dir"/query "$dir"/dead "$dir"/tune "$dir"/*.out "$dir"/*.err | head -20 >&2
  fail "a secret was written (files above)"
fi
pass "none of $n files nor any captured output holds the password, the query key or the API key"
