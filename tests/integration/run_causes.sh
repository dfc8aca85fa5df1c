#!/usr/bin/env bash
# ctest: run-serial
# Every stall gets its cause (issue 11, "Attribution"), on a live run against the embedded
# emulated H100 with one long prompt and two pauses made on purpose:
#   t ~ 1 s   the 8,000-token injection: prefill, its culprit that injection;
#   t ~ 2.5 s the client (`stallscope run`) stopped for 300 ms (SIGSTOP/SIGCONT): the server
#             kept stepping, the client read late: client;
#   t ~ 4 s   the server stopped for 300 ms: one step lasted 300 ms where its model said
#             ~5 ms: server.
# stalls.csv holds each stall with its cause; summary.json the totals.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

# curl's stamps are taken when the loop reads: a stopped client reads late (the raw
# transport's kernel stamps would see through most of such a pause).
transport=()
grep -q -- "--transport" <<<"$("$bin" run --help)" && transport=(--transport curl)
( exec "$bin" run --engine emulate "${transport[@]}" --no-baseline --users 4 --duration 6s \
    --inject-at 1s --inject-every 10s --warmup 0 --out "$dir/out" >"$dir/run.out" 2>"$dir/run.err" ) &
run_pid=$!
server=
for _ in $(seq 200); do
  server=$(pgrep -P "$run_pid" || true)
  [ -n "$server" ] && grep -q "listening on" "$dir/out/interference/server.log" 2>/dev/null && break
  sleep 0.05
done
[ -n "$server" ] || fail "no embedded server"
# The run's t = 0 follows the server's readiness and a probe by a fraction of a second.
sleep 2.5
kill -STOP "$run_pid"; sleep 0.3; kill -CONT "$run_pid"
sleep 1.5
kill -STOP "$server"; sleep 0.3; kill -CONT "$server"
wait "$run_pid" || { tail -20 "$dir/run.err"; fail "run exited $?"; }

python3 - "$dir/out/interference" <<'PY' || fail "causes"
import collections, csv, json, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/stalls.csv")))
s = json.load(open(f"{d}/summary.json"))
reqs = {r["request"]: r for r in csv.DictReader(open(f"{d}/requests.csv"))}
inject = [k for k, r in reqs.items() if r["kind"] == "inject"]
by = collections.defaultdict(list)
for r in rows:
    by[r["cause"]].append(r)
for cause in ("prefill", "client", "server", "unexplained"):
    ts = sorted(float(r["t_ns"]) / 1e9 for r in by[cause])
    print(f"{cause}: {len(by[cause])} stalls at {', '.join(f'{t:.2f}' for t in ts)} s")
problems = []
users = s["users"]
# each cause: every user stalled once (a user between two answers may miss one)
for cause in ("prefill", "client", "server"):
    if not users - 1 <= len({r["user"] for r in by[cause]}) <= users:
        problems.append(f"{cause}: {len(by[cause])} stalls, want one per user")
if any(r["culprits"].split(":")[0] != inject[0] for r in by["prefill"]):
    problems.append(f"prefill culprits {[r['culprits'] for r in by['prefill']]}, want {inject[0]}")
if by["unexplained"]:
    problems.append(f"{len(by['unexplained'])} unexplained stalls")
# the pauses in time order: prefill (~1 s), then the client's, then the server's. A machine
# pause elsewhere in the run adds stalls of its own cause (a client read late at 0.19 s was
# seen under load): the rule is that some prefill, client and server stall come in that order.
t = {c: sorted(int(r["t_ns"]) for r in by[c]) for c in ("prefill", "client", "server")}
after_prefill = [x for x in t["client"] if t["prefill"] and x > t["prefill"][0]]
if not (after_prefill and any(x > after_prefill[0] for x in t["server"])):
    problems.append(f"no prefill, client, server stalls in that order: {t}")
tot = s["attribution"]["by_cause"]
if any(tot[c]["stalls"] != len(by[c]) for c in tot):
    problems.append(f"summary {({c: tot[c]['stalls'] for c in tot})} != stalls.csv")
for p in problems:
    print("FAIL", p)
sys.exit(1 if problems else 0)
PY
# the verdict lists the causes by count: a machine pause that adds client stalls puts them first
grep -qE "; caused by ([a-z_ ]+ [0-9]+, )*prefill 4 \(1 request, longest prompt 8000 tokens\)" "$dir/run.out" ||
  fail "the verdict does not say what caused the stalls"
pass "prefill, client and server stalls told apart: $(grep -o '; caused by[^.]*' "$dir/run.out")"
