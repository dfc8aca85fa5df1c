#!/usr/bin/env bash
# ctest: run-serial
# Real traffic (issue 11, "Workloads"): the same hand-made trace in each format (Azure CSV,
# BurstGPT CSV, Mooncake JSONL, plain JSONL), replayed by `sim --trace` and by `run --trace`
# against the embedded emulated H100; a stall during the trace's one long prefill is
# attributed to that request; bad rows are errors with FILE:LINE or, with --skip-bad-rows,
# skipped and counted; the chat preset and an open-loop rate with --max-concurrency run.
#
# The trace: three streams that start early with long answers (600 tokens, ~3 s of 5 ms
# decode steps), one 12,000-token prompt at 1.5 s (a ~200 ms one-step prefill on the modeled
# H100: every stream mid-answer waits through it), and a short request at 2 s.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || skip_or_fail "python3 is missing"
rm -rf "$dir"; mkdir -p "$dir"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

# t (s), prompt tokens, answer tokens
rows="0.1 100 600
0.2 120 600
0.3 90 600
1.5 12000 8
2.0 80 50"
{
  echo "TIMESTAMP,ContextTokens,GeneratedTokens"
  while read -r t p a; do
    python3 -c "import sys; t=float(sys.argv[1]); print(f'2024-05-10 00:00:{t:09.6f}0,{sys.argv[2]},{sys.argv[3]}')" "$t" "$p" "$a"
  done <<<"$rows"
} >"$dir/azure.csv"
{
  echo "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
  while read -r t p a; do echo "$t,ChatGPT,$p,$a,$((p + a)),Conversation log"; done <<<"$rows"
  echo "2.5,GPT-4,500,0,500,Conversation log"   # a failed request: skipped and counted
} >"$dir/burstgpt.csv"
while read -r t p a; do
  ms=$(python3 -c "print(round(float('$t') * 1000))")
  echo "{\"timestamp\": $ms, \"input_length\": $p, \"output_length\": $a, \"hash_ids\": [1, 2]}"
done <<<"$rows" >"$dir/mooncake.jsonl"
while read -r t p a; do
  echo "{\"t\": $t, \"prompt_tokens\": $p, \"max_tokens\": $a}"
done <<<"$rows" >"$dir/plain.jsonl"

# Every planned request was sent, each a stream of its own; the long prompt's stalls are
# prefill stalls with it as the culprit.
check_run() { # DIR WANT_LONG_CULPRIT(0|1)
  python3 - "$1" "$2" <<'PY'
import csv, sys
d, want_culprit = sys.argv[1], sys.argv[2] == "1"
reqs = list(csv.DictReader(open(f"{d}/requests.csv")))
bg = [r for r in reqs if r["kind"] == "bg"]
problems = []
if len(bg) != 5:
    problems.append(f"{len(bg)} trace requests, want 5")
if len({r["user"] for r in bg}) != len(bg):
    problems.append("trace requests share a stream")
if any(r["error"] for r in bg):
    problems.append(f"errors: {[r['error'] for r in bg if r['error']]}")
# Azure's datetimes count from its first row (0.1 s in the others' terms)
plans = sorted(int(r["t_plan_ns"]) for r in bg)
rel = [round((t - plans[0]) / 1e9, 3) for t in plans]
if rel != [0.0, 0.1, 0.2, 1.4, 1.9] or plans[0] not in (0, 100_000_000):
    problems.append(f"planned at {plans}")
long = [r for r in bg if r["prompt_tokens_requested"] == "12000"]
if len(long) != 1:
    problems.append("no 12,000-token request")
if want_culprit and long:
    stalls = list(csv.DictReader(open(f"{d}/stalls.csv")))
    prefill = [s for s in stalls if s["cause"] == "prefill"]
    culprits = {s["culprits"].split(";")[0].split(":")[0] for s in prefill}
    print(f"{d}: {len(stalls)} stalls, {len(prefill)} prefill, culprits {sorted(culprits)}, "
          f"long request {long[0]['request']}")
    if len(prefill) < 2:
        problems.append(f"{len(prefill)} prefill stalls, want the streams running at 1.5 s")
    if culprits != {long[0]["request"]}:
        problems.append(f"culprits {culprits}, want {long[0]['request']}")
    if any(s["user"] == long[0]["user"] for s in prefill):
        problems.append("the long request stalled itself")
for p in problems:
    print("FAIL", d, p)
sys.exit(1 if problems else 0)
PY
}

for f in azure burstgpt mooncake plain; do
  file=$dir/$f.csv; [ -f "$file" ] || file=$dir/$f.jsonl
  "$bin" sim --trace "$file" --no-inject --duration 4s --out "$dir/sim-$f" >"$dir/sim-$f.out" 2>&1 ||
    { cat "$dir/sim-$f.out"; fail "sim --trace $f"; }
  grep -q "5 requests planned" "$dir/sim-$f.out" || { cat "$dir/sim-$f.out"; fail "sim $f: plan line"; }
  check_run "$dir/sim-$f/traffic" 1 || fail "sim --trace $f"
done
grep -q "1 failed requests" "$dir/sim-burstgpt.out" || fail "BurstGPT's failed row not counted"
pass "sim --trace in each format: 5 requests, own streams, the long prefill is the culprit"

for f in azure burstgpt mooncake plain; do
  file=$dir/$f.csv; [ -f "$file" ] || file=$dir/$f.jsonl
  "$bin" run --engine emulate --trace "$file" --no-inject --duration 3s --warmup 0 \
      --out "$dir/run-$f" >"$dir/run-$f.out" 2>&1 || { tail -20 "$dir/run-$f.out"; fail "run --trace $f"; }
  # the stall check on one format (a live run on 2 shared cores); the rest: every request sent
  want=0; [ "$f" = plain ] && want=1
  check_run "$dir/run-$f/traffic" "$want" || fail "run --trace $f"
done
pass "run --trace (embedded emulate) in each format; the long prompt's stalls name it"

# Without --duration the whole trace is replayed (issue 22, defect 10: it stopped at 40 s
# and skipped the rest "at or after --duration"): in sim, 13 rows over 60 s of virtual time,
# the run ending when the last request has finished; in a live run, the 2 s trace ends the
# run about then, not after 40 s.
for i in $(seq 0 12); do echo "{\"t\": $((i * 5)), \"prompt_tokens\": 200, \"max_tokens\": 50}"; done >"$dir/long.jsonl"
"$bin" sim --trace "$dir/long.jsonl" --no-inject --out "$dir/sim-long" >"$dir/sim-long.out" 2>&1 ||
  { cat "$dir/sim-long.out"; fail "sim --trace without --duration"; }
grep -q "0 at or after --duration, 0 over --max-requests; 13 requests planned" "$dir/sim-long.out" ||
  { cat "$dir/sim-long.out"; fail "sim: the whole trace is not planned"; }
python3 - "$dir/sim-long/traffic" <<'PY' || fail "sim: the run does not end with the trace's last request"
import csv, json, sys
d = sys.argv[1]
reqs = [r for r in csv.DictReader(open(f"{d}/requests.csv")) if r["kind"] == "bg"]
last = max(int(r["t_end_ns"]) for r in reqs)
dur = json.load(open(f"{d}/config.json"))["workload"]["duration_ns"]
ok = len(reqs) == 13 and all(int(r["t_end_ns"]) > 0 for r in reqs) and dur == last
print(f"{len(reqs)} requests, the last ended at {last / 1e9:.3f} s, duration {dur / 1e9:.3f} s")
sys.exit(0 if ok else 1)
PY
pass "sim --trace without --duration: $(grep -o "the trace's last request finished at [0-9.]* s" "$dir/sim-long.out")"
start=$(date +%s)
"$bin" run --engine emulate --trace "$dir/plain.jsonl" --no-inject --warmup 0 --out "$dir/run-whole" \
    >"$dir/run-whole.out" 2>&1 || { tail -20 "$dir/run-whole.out"; fail "run --trace without --duration"; }
took=$(($(date +%s) - start))
check_run "$dir/run-whole/traffic" 0 || fail "run --trace without --duration"
python3 - "$dir/run-whole/traffic" <<'PY' || fail "run: a trace request was cut"
import csv, sys
reqs = [r for r in csv.DictReader(open(f"{sys.argv[1]}/requests.csv")) if r["kind"] == "bg"]
sys.exit(0 if all(r["finish_reason"] == "length" for r in reqs) else 1)
PY
[ "$took" -lt 20 ] || fail "run --trace without --duration took $took s (the trace lasts 2 s)"
pass "run --trace without --duration: every request whole, $took s in all; $(grep -o "the trace's last request finished at [0-9.]* s" "$dir/run-whole.out")"

# Bad rows: FILE:LINE, exit 2; skipped and counted with --skip-bad-rows.
{ head -3 "$dir/plain.jsonl"; echo '{"t": 1.0, "prompt_tokens": -4, "max_tokens": 5}'; tail -2 "$dir/plain.jsonl"; } >"$dir/bad.jsonl"
set +e
"$bin" sim --trace "$dir/bad.jsonl" --no-inject --duration 4s --out "$dir/sim-bad" >"$dir/bad.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$dir/bad.out"; fail "a bad row: exit $rc, want 2"; }
grep -q "bad.jsonl:4: \"prompt_tokens\"" "$dir/bad.out" || { cat "$dir/bad.out"; fail "no FILE:LINE for the bad row"; }
"$bin" sim --trace "$dir/bad.jsonl" --skip-bad-rows --no-inject --duration 4s --out "$dir/sim-skip" >"$dir/skip.out" 2>&1 ||
  { cat "$dir/skip.out"; fail "--skip-bad-rows"; }
grep -q "skipped: 1 bad" "$dir/skip.out" && grep -q "first bad row skipped: .*bad.jsonl:4:" "$dir/skip.out" ||
  { cat "$dir/skip.out"; fail "skipped rows not counted"; }
pass "bad rows: $(grep -o 'bad.jsonl:4: [^(]*' "$dir/bad.out" | head -1); counted with --skip-bad-rows"

# A prompt the engine refuses (over the token budget, one-step prefill): FILE:LINE too.
echo '{"t": 0.5, "prompt_tokens": 20000, "max_tokens": 5}' >"$dir/huge.jsonl"
set +e
"$bin" sim --trace "$dir/huge.jsonl" --no-inject --duration 4s --out "$dir/sim-huge" >"$dir/huge.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "huge.jsonl:1: a request of 20000 prompt" "$dir/huge.out" ||
  { cat "$dir/huge.out"; fail "an unservable row: exit $rc"; }
pass "an unservable trace row is refused before the run, with its line"

# The chat preset at a rate; an open-loop rate with a concurrency limit in a live run.
"$bin" sim --preset chat --request-rate 4 --duration 20s --out "$dir/chat" >"$dir/chat.out" 2>&1 ||
  { cat "$dir/chat.out"; fail "sim --preset chat"; }
grep -q "open loop: [0-9]* requests at 4 req/s (Poisson), prompt lognormal:1730,5696" "$dir/chat.out" ||
  { cat "$dir/chat.out"; fail "chat preset's plan line"; }
"$bin" run --engine emulate --request-rate 20 --max-concurrency 2 --answer-len fixed:200 \
    --no-inject --duration 3s --warmup 0 --out "$dir/conc" >"$dir/conc.out" 2>&1 ||
  { tail -20 "$dir/conc.out"; fail "run --request-rate --max-concurrency"; }
grep -q "max concurrency 2: [1-9][0-9]* of [0-9]* open-loop requests waited for a slot" "$dir/conc.out" ||
  { cat "$dir/conc.out"; fail "the waits are not reported"; }
python3 - "$dir/conc/traffic/requests.csv" <<'PY' || fail "max concurrency not honoured"
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "bg"]
ends = [(int(r["t_send_ns"]), int(r["t_end_ns"]) if int(r["t_end_ns"]) >= 0 else 1 << 62) for r in rows]
worst = max(sum(1 for s, e in ends if s <= t < e) for t, _ in ends)
waited = sum(1 for r in rows if int(r["t_send_ns"]) - int(r["t_plan_ns"]) > 50_000_000)
print(f"{len(rows)} requests, at most {worst} in flight, {waited} sent > 50 ms late")
sys.exit(0 if worst <= 2 and waited > 0 else 1)
PY
pass "$(grep -o 'max concurrency 2: [^;]*' "$dir/conc.out" | head -1)"

# The same against a --target (a `stallscope serve` of its own): the client's side alone.
BIN=$bin DIR=$dir
. "$(dirname "$0")/serve_lib.bash"
start_server target
"$bin" run --target "http://127.0.0.1:$PORT" --trace "$dir/mooncake.jsonl" --no-inject \
    --duration 3s --warmup 0 --out "$dir/remote" >"$dir/remote.out" 2>&1 ||
  { tail -20 "$dir/remote.out"; fail "run --target --trace"; }
check_run "$dir/remote/traffic" 0 || fail "run --target --trace"
pass "run --target --trace: every trace request sent, each a stream of its own"

# A JSONL row's "prompt" text is what is sent: 40 one-letter words (80 bytes: 20 tokens by
# the 4-byte estimate) are 40 tokens to the server's tokenizer, and usage says so; with
# --synthetic-prompts a made-up prompt of the 20 counted tokens goes instead.
words=$(python3 -c 'print(" ".join(["a"] * 40))')
for t in 0.2 0.6 1.0; do
  printf '{"t": %s, "prompt": "%s", "max_tokens": 8}\n' "$t" "$words"
done >"$dir/text.jsonl"
for mode in text synthetic; do
  extra=()
  [ "$mode" = synthetic ] && extra=(--synthetic-prompts)
  "$bin" run --target "http://127.0.0.1:$PORT" --trace "$dir/text.jsonl" --no-inject \
      --warmup 0 "${extra[@]}" --out "$dir/text-$mode" >"$dir/text-$mode.out" 2>&1 ||
    { tail -20 "$dir/text-$mode.out"; fail "run --trace with prompt texts ($mode)"; }
  want=40
  [ "$mode" = synthetic ] && want=20
  python3 - "$dir/text-$mode/traffic/requests.csv" "$want" <<'PY' || fail "the prompt sent ($mode)"
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "bg"]
got = sorted({(r["prompt_tokens_requested"], r["prompt_tokens"]) for r in rows})
print(f"{len(rows)} requests: (planned, the server's count) {got}")
sys.exit(0 if len(rows) == 3 and got == [("20", sys.argv[2])] else 1)
PY
done
stop_server
pass "a JSONL prompt text is sent as it is (the server counts 40 tokens, 20 planned); --synthetic-prompts sends 20 made-up ones"
