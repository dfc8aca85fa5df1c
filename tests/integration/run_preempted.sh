#!/usr/bin/env bash
# Causes that state produces (issue 24, point 4), live: the embedded server (emulated H100)
# with a KV pool too small for 16 chats (--kv-blocks 300) preempts; it logs what each step did
# to the requests' places (serve --sched-events), naming each request by the id the client
# put in its body, and the run keeps it as sched_events.csv, named as its files name the
# requests — the merged log's rows, or, past --log-events-max, the ids the incremental files
# kept. A stall whose request was preempted when its gap began is "preempted" (it was
# "client": short steps ran all through the gap), in both.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

args=(--engine emulate --users 16 --kv-blocks 300 --policy chunked --max-num-batched-tokens 2048
      --prompt-tokens 1k --inject-at 1s --duration 4s --warmup 1s --no-baseline --no-report)
timeout 120 "$bin" run "${args[@]}" --out "$dir/held" >"$dir/held.txt" 2>&1 ||
  { cat "$dir/held.txt"; fail "run exited $?"; }
timeout 120 "$bin" run "${args[@]}" --log-events-max 500 --out "$dir/written" \
  >"$dir/written.txt" 2>&1 || { cat "$dir/written.txt"; fail "run --log-events-max exited $?"; }
grep -q "each held only until written" "$dir/written.txt" || fail "--log-events-max 500 held every event"

python3 - "$dir" <<'PY' || fail "causes"
import collections, csv, sys
d = sys.argv[1]
problems = []
for run in ("held", "written"):
    p = f"{d}/{run}/interference"
    stalls = list(csv.DictReader(open(f"{p}/stalls.csv")))
    events = list(csv.DictReader(open(f"{p}/sched_events.csv")))
    requests = {r["request"] for r in csv.DictReader(open(f"{p}/requests.csv"))}
    tokens = collections.defaultdict(list)
    for r in csv.DictReader(open(f"{p}/tokens.csv")):
        tokens[r["request"]].append(int(r["t_ns"]))
    causes = collections.Counter(r["cause"] for r in stalls)
    kinds = collections.Counter(e["event"] for e in events)
    print(f"{run}: stalls {dict(causes)}; sched_events.csv {dict(kinds)}")
    if kinds["preempted"] == 0:
        problems.append(f"{run}: the server logged no preemption")
    if {e["request"] for e in events} - requests:
        problems.append(f"{run}: sched_events.csv names requests requests.csv does not have")
    # The names are the right requests: a preempted request gets no token while it is out
    # (but for tokens sent before and read a little late, under load).
    by = collections.defaultdict(list)
    for e in events:
        by[e["request"]].append((int(e["t_ns"]), e["event"]))
    out = quiet = 0
    for req, evs in by.items():
        for (t, e), nxt in zip(evs, evs[1:] + [(None, None)]):
            if e != "preempted" or nxt[1] != "resumed" or nxt[0] - t < 50_000_000:
                continue
            out += 1
            quiet += not any(t + 20_000_000 < x < nxt[0] for x in tokens[req])
    print(f"  {quiet} of {out} absences of 50 ms or more without a token of their request")
    if out == 0 or quiet < 0.8 * out:
        problems.append(f"{run}: the logged absences do not match the requests' tokens")
    # Each stall whose request was out by a preemption when its gap began says so.
    for s in stalls:
        a = int(s["t_ns"])
        last = [e for t, e in by.get(s["request"], []) if t <= a][-1:]
        if last == ["preempted"] and s["cause"] != "preempted":
            problems.append(f"{run}: stall at {a} of request {s['request']} is {s['cause']}")
    if causes["preempted"] == 0:
        problems.append(f"{run}: no preempted stall")
for p in problems:
    print("FAIL", p)
sys.exit(1 if problems else 0)
PY
grep -Eq "^  caused by preemption +[1-9]" "$dir/held.txt" || fail "no 'caused by preemption' row"
pass "live preemptions logged and named; their stalls are 'preempted':" \
  "$(grep -o '; caused by[^.]*' "$dir/held.txt" | tail -1)"
