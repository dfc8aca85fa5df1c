#!/usr/bin/env bash
# Every file a run writes against its spec, docs/reference/artifacts.md (check_artifacts.py):
# each CSV's header row is the spec's columns in order, each JSON file's keys (top level and
# every nested object) are the spec's. The files come from short runs of each writer: a
# simulated pair (with SLOs, once more past --tokens-csv-max, and a preempting run for
# sched_events.csv), a sweep, a tune with a
# disaggregated split, calibrate on this CPU (--no-fit: its rates; a fit costs seconds
# under ASan, and calibrate --target gives the step model and probes); against one
# `stallscope serve --engine emulate`: a run with --scrape-metrics, --fidelity and
# --save-result, two shards merged by report --merge, calibrate --target; a stream through
# `stallscope proxy --out` and report's window of its files. First the checker
# is shown to fail on a gained key, a lost column and a lost key.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
spec=$src/docs/reference/artifacts.md
check=$PY_DIR/check_artifacts.py
rm -rf "$dir"; mkdir -p "$dir"
cd "$dir"
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null || true' EXIT

# ---- the simulator's writers ------------------------------------------------------------
"$bin" sim --preset lesson --users 8 --duration 10s --goodput 'ttft:2000 tpot:100' --no-report \
  --out sim >sim.out 2>&1 || { cat sim.out; fail "sim exited $?"; }
"$bin" sim --users 4 --duration 3s --no-baseline --tokens-csv-max 10 --no-report --out drop \
  >drop.out 2>&1 || { cat drop.out; fail "sim --tokens-csv-max exited $?"; }
[ ! -e drop/interference/tokens.csv ] || fail "sim --tokens-csv-max 10 kept tokens.csv"
# A KV pool too small for 8 users preempts: sched_events.csv.
"$bin" sim --users 8 --duration 4s --prompt-tokens 1k --inject-at 1s --kv-blocks 200 \
  --policy chunked --no-baseline --no-report --out preempt >preempt.out 2>&1 ||
  { cat preempt.out; fail "sim --kv-blocks 200 exited $?"; }
[ -s preempt/interference/sched_events.csv ] || fail "a preempting sim wrote no sched_events.csv"
"$bin" sweep --prompt-tokens 4k,8k --users 4 --duration 6s --no-report --out sweep \
  >sweep.out 2>&1 || { cat sweep.out; fail "sweep exited $?"; }
"$bin" tune --users 4 --duration 6s --policies mixed,chunked --budgets 2048,16384 \
  --max-num-seqs 64 --disaggregate 1:1 --no-report --out tune >tune.out 2>&1 ||
  { cat tune.out; fail "tune exited $?"; }
"$bin" calibrate --threads 1 --seconds 0 --no-fit --out cpu.json \
  >cpu.out 2>&1 || { cat cpu.out; fail "calibrate exited $?"; }
pass "sim, sweep, tune and calibrate wrote their files"

# ---- a live server's -------------------------------------------------------------------
port=$(free_port)
"$bin" serve --engine emulate --host 127.0.0.1 --port "$port" >serve.log 2>&1 &
server_pid=$!
url=http://127.0.0.1:$port
wait_http "$url/health" || { cat serve.log; fail "serve did not answer"; }
# Two shards of one experiment, started together; the single run and calibrate --target
# run while the shards wait for their start (their figures are not what is checked).
start=$(date -u -d '+4 sec' +%Y-%m-%dT%H:%M:%SZ)
small=(--users 4 --duration 2s --inject-at 0.5s --prompt-tokens 2k --no-baseline)
for i in 0 1; do
  timeout 60 "$bin" run --target "$url" --shard "$i/2" --start-at "$start" --warmup 0.5s \
    "${small[@]}" --no-report --out "shard$i" >"shard$i.out" 2>&1 &
done
timeout 60 "$bin" run --target "$url" "${small[@]}" --warmup 0s --scrape-metrics on --fidelity \
  --save-result result.json --save-detailed --no-report --out run >run.out 2>&1 ||
  { cat run.out; fail "run exited $?"; }
# two decode contexts (64 and 512): with one, the context term moves with the batch and the
# fit cannot always tell them apart
timeout 60 "$bin" calibrate --target "$url" --out target.json --max-streams 4 --long-context 512 \
  --seconds 200ms --min-prompt-tokens 1024 --max-prompt-tokens 4096 --repeats 1 \
  --no-interference --force-profile >target.out 2>&1 || { cat target.out; fail "calibrate --target exited $?"; }
for job in $(jobs -p); do
  [ "$job" = "$server_pid" ] || wait "$job" || { cat shard0.out shard1.out; fail "a shard exited $?"; }
done
"$bin" report --merge shard0 shard1 --no-report --out merged >merge.out 2>&1 ||
  { cat merge.out; fail "report --merge exited $?"; }
# The proxy's files: one stream through `stallscope proxy --out`, then report's window.
timeout 60 "$bin" proxy --upstream "$url" --listen 127.0.0.1:0 --no-admin --ready-file proxy.ready \
  --out proxy --quiet >proxy.log 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do [ -s proxy.ready ] && break; sleep 0.1; done
read -r proxy_port _ <proxy.ready || { cat proxy.log; fail "the proxy did not start"; }
curl -fsS -N "http://127.0.0.1:$proxy_port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"a b c d","max_tokens":8,"stream":true}' >proxy.stream || fail "a stream through the proxy"
kill "$proxy_pid"; wait "$proxy_pid" || fail "the proxy did not stop cleanly"
"$bin" report proxy --no-report --out proxywin >proxywin.out 2>&1 ||
  { cat proxywin.out; fail "report of the proxy's files exited $?"; }
proxy_part=$(ls -d proxy/*/*/ | head -1)
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
pass "run, two shards merged and calibrate --target wrote their files"

# ---- the checker can fail ----------------------------------------------------------------
expect_refused() {
  local what=$1 says=$2; shift 2
  if python3 "$check" "$spec" "$@" >refused.out 2>&1; then
    cat refused.out; fail "the checker passed $what"
  fi
  grep -q "^FAIL: .*$says" refused.out || { cat refused.out; fail "the checker did not say: $says"; }
  pass "refused $what: $(grep -m1 "^FAIL: .*$says" refused.out | cut -c1-140)"
}
mkdir -p bad
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["stalls"]["gained"]=1; json.dump(j,open(sys.argv[2],"w"))' \
  sim/interference/summary.json bad/summary.json
sed '1s/,n_tokens$//' sim/interference/tokens.csv >bad/tokens.csv
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["session"]["t0_monotonic_ns"]; json.dump(j,open(sys.argv[2],"w"))' \
  run/interference/config.json bad/config.json
all_files=(
  tokens.csv=sim/interference/tokens.csv requests.csv=sim/interference/requests.csv
  steps.csv=sim/interference/steps.csv stalls.csv=sim/interference/stalls.csv
  sched_events.csv=preempt/interference/sched_events.csv
  stalls.csv=preempt/interference/stalls.csv summary.json=preempt/interference/summary.json
  server_metrics.csv=run/interference/server_metrics.csv sweep.csv=sweep/sweep.csv
  summary.json=sim/baseline/summary.json summary.json=sim/interference/summary.json
  summary.json=drop/interference/summary.json summary.json=run/interference/summary.json
  summary.json=merged/interference/summary.json
  comparison.json=sim/comparison.json comparison.json=run/comparison.json
  config.json=sim/interference/config.json config.json=run/interference/config.json
  config.json=shard0/interference/config.json config.json=merged/interference/config.json
  fidelity.json=run/interference/fidelity.json --save-result=result.json
  sweep.json=sweep/sweep.json merge.json=merged/merge.json tune.json=tune/tune.json
  "hardware profile=cpu.json" "hardware profile=target.json"
  proxy.json="$(ls proxy/*/proxy.json)" window.json=proxywin/window.json
  tokens.csv="${proxy_part}tokens.csv" requests.csv="${proxy_part}requests.csv"
  stalls.csv="${proxy_part}stalls.csv" requests.csv=proxywin/requests.csv
)
expect_refused "a gained key" "key 'gained' is not in the spec" --axes prompt-tokens "${all_files[@]}" summary.json=bad/summary.json
expect_refused "a lost column" "bad/tokens.csv: header" --axes prompt-tokens "${all_files[@]}" tokens.csv=bad/tokens.csv
expect_refused "a lost key" "key 't0_monotonic_ns' missing" --axes prompt-tokens "${all_files[@]}" config.json=bad/config.json

# ---- every file against the spec -----------------------------------------------------------
python3 "$check" "$spec" --axes prompt-tokens "${all_files[@]}" >check.out 2>&1 ||
  { cat check.out; fail "the artifacts differ from docs/reference/artifacts.md"; }
pass "every artifact matches docs/reference/artifacts.md: $(tail -1 check.out | cut -c1-160)"
