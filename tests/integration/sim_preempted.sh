#!/usr/bin/env bash
# Causes that state produces (issue 24, point 4), in the simulator, where there is no client:
# a KV pool too small for 32 chats (--kv-blocks 600) preempts, and every stall spent preempted
# says so ("preempted", was "client"); a decode instance with 8 seats leaves prefilled requests
# waiting ("not_scheduled", was "client"). No stall is the client's. sched_events.csv holds
# what the steps did to the requests' places, and `report` reads it back to the same causes.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

short=(--duration 20s --no-report)
"$bin" sim "${short[@]}" --kv-blocks 600 --policy chunked --max-num-batched-tokens 2048 \
  --out "$dir/kv" >"$dir/kv.txt"
"$bin" sim "${short[@]}" --disaggregate 1:2 --max-num-seqs 8 --kv-blocks 700 \
  --out "$dir/seats" >"$dir/seats.txt"
cat "$dir/kv.txt"

python3 - "$dir" <<'PY' || fail "causes"
import collections, csv, json, sys
d = sys.argv[1]
problems = []
for run, want in (("kv", "preempted"), ("seats", "not_scheduled")):
    for phase in ("baseline", "interference"):
        p = f"{d}/{run}/{phase}"
        stalls = list(csv.DictReader(open(f"{p}/stalls.csv")))
        causes = collections.Counter(r["cause"] for r in stalls)
        print(f"{run}/{phase}: {dict(causes)}")
        events = list(csv.DictReader(open(f"{p}/sched_events.csv")))
        kinds = collections.Counter(e["event"] for e in events)
        print(f"  sched_events.csv: {dict(kinds)}")
        if causes[want] == 0:
            problems.append(f"{run}/{phase}: no {want} stall")
        if causes["client"]:
            problems.append(f"{run}/{phase}: {causes['client']} client stalls in the simulator")
        # a stall says preempted / not_scheduled only for a request the log has out then
        out = {"preempted": "preempted", "not_scheduled": "left_out"}
        for cause, event in out.items():
            named = {r["request"] for r in stalls if r["cause"] == cause}
            logged = {e["request"] for e in events if e["event"] == event}
            if not named <= logged:
                problems.append(f"{run}/{phase}: {cause} stalls of requests never {event}")
        s = json.load(open(f"{p}/summary.json"))
        tot = {c: v["stalls"] for c, v in s["attribution"]["by_cause"].items()}
        if any(tot[c] != causes.get(c, 0) for c in tot):
            problems.append(f"{run}/{phase}: summary {tot} != stalls.csv {dict(causes)}")
for p in problems:
    print("FAIL", p)
sys.exit(1 if problems else 0)
PY
grep -Eq "^  caused by preemption +[1-9][0-9]* +[0-9]+" "$dir/kv.txt" ||
  fail "the table has no 'caused by preemption' row"
grep -q "caused by not scheduled" "$dir/kv.txt" && fail "a cause without stalls has a row"
grep -Eq "^  caused by not scheduled +[1-9]" "$dir/seats.txt" ||
  fail "the table has no 'caused by not scheduled' row"
# From the files alone: the same causes.
"$bin" report "$dir/kv" >"$dir/report.txt" 2>&1 || { cat "$dir/report.txt"; fail "report"; }
diff <(grep "caused by" "$dir/kv.txt") <(grep "caused by" "$dir/report.txt") ||
  fail "report read the causes back differently"
grep -q "<b>preempted</b>" "$dir/kv/report.html" || fail "report.html has no preempted row"
grep -q "<b>not_scheduled</b>" "$dir/kv/report.html" && fail "report.html lists a cause without stalls"
pass "preempted and not_scheduled stalls, none the client's:" \
  "$(grep -o 'caused by [^.]*' "$dir/kv.txt" | head -1)"
