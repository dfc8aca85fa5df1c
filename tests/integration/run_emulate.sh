#!/usr/bin/env bash
# ctest: run-serial
# stallscope run against the emulated H100 / Llama 3.1 8B with one-step prefill, twice:
# the embedded default, then a separate `stallscope serve` through --target. Checks the
# acceptance of issue 4: aligned_fraction 1.0, spike within 5 % of the cost model's prefill
# step, interference p50 within 5 % of baseline, max >= 10 x p50, the client's gaps equal
# the server's steps within 1 ms at p99, and the two ways give the same result.
# The gaps against the steps: p99 of |client gap - the server's steps between the two
# tokens| <= GAP_BOUND_MS + the delivery slip the run itself recorded, its fidelity.json
# client timestamp error p99 (receive stamp - the server's emit time, per event), that
# excuse at most GAP_BOUND_MS again: 1 ms + at most 1 ms; 5 ms + at most 5 ms under the
# sanitizers (docs/reference/tests.md quotes the same).
# Scaled: 10 s runs with injections at 2, 5, 8 s (the lesson's 40 s changes none of this).
# Excused: a stall outside every injection's wait only when the step log pins it on the
# machine (a step measured > threshold with modeled work < threshold, or steps on time
# through the gap: the client read late), at most 3 pause events per run, each gap at most
# 1,000 ms (EXCUSED_EVENTS, EXCUSED_GAP_MS below; docs/reference/tests.md quotes the same).
# Measured once more, once, when only timing checks failed and the records pin it on the
# machine (no unaligned stall behind a long modeled step or none, every injection's prefill
# step within 2 % of its model in the step log); the second measurement must pass.
set -euo pipefail
BIN=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
# Under AddressSanitizer, recycling the quarantine of freed memory stops a process for
# 40-80 ms every second or so: that is exactly what this test measures (stalls, gaps), so
# the timing runs go without the quarantine (the unit tests keep it). On a sanitized build
# the gap-vs-step bound is relaxed (both processes run ~3x slower on 2 cores); the 1 ms
# figure is the acceptance for a normal build.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
GAP_BOUND_MS=1.0
if ldd "$BIN" 2>/dev/null | grep -q libasan; then GAP_BOUND_MS=5.0; fi
export GAP_BOUND_MS
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

ENGINE=(--engine emulate --gpu h100-sxm --model llama-3.1-8b --policy mixed --max-num-batched-tokens 16384)
WORKLOAD=(--users 32 --duration 10s --inject-at 2s --inject-every 3s --prompt-tokens 8000 --warmup 1s)

"$BIN" model --gpu h100-sxm --model llama-3.1-8b --prompt-tokens 8000 --json >"$WORK/model.json"

# One measurement (both ways) and its checks; measured once more when the checks failed only
# on timing the run's own records pin on the machine (RETRY_EXIT below).
measure() {
rm -rf "$WORK/embedded" "$WORK/target" "$WORK/classifier" "$WORK/serve_steps.csv"
# 1. The embedded default, with --json: stdout is comparison.json.
timeout 120 "$BIN" run "${ENGINE[@]}" "${WORKLOAD[@]}" --out "$WORK/embedded" --json \
  >"$WORK/embedded.stdout" 2>"$WORK/embedded.stderr" || {
  cat "$WORK/embedded.stderr"; fail "embedded run failed"; }

# 2. A separate server on its own port, through --target.
# nice -n -10: the same priority `run` gives itself and its embedded server.
timeout 60 nice -n -10 "$BIN" serve "${ENGINE[@]}" --port 0 --step-log "$WORK/serve_steps.csv" \
  >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -q 'listening on' "$WORK/serve.log" && break; sleep 0.1; done
URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/serve.log" | head -1)
[ -n "$URL" ] || { cat "$WORK/serve.log"; fail "serve did not start"; }
timeout 120 "$BIN" run --target "$URL" --fidelity "${WORKLOAD[@]}" --out "$WORK/target" \
  >"$WORK/target.stdout" 2>"$WORK/target.stderr" || {
  cat "$WORK/target.stderr"; fail "--target run failed"; }
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=

python3 - "$WORK" <<'EOF'
import bisect, csv, json, os, sys
work = sys.argv[1]
RETRY_EXIT = int(os.environ["RETRY_EXIT"])
failures, timing_failures = [], []
def check(ok, what, timing=False):
    """timing: a check the machine's scheduling can fail (a stall's length or place, a gap);
    the others (files, counts, transport) it cannot."""
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        (timing_failures if timing else failures).append(what)

prefill_ms = json.load(open(f"{work}/model.json"))["prompts"][0]["total_ms"]
stdout_cmp = json.load(open(f"{work}/embedded.stdout"))
check("baseline" in stdout_cmp and "interference" in stdout_cmp, "--json printed comparison.json")

def gap_vs_steps(d):
    """|client gap - sum of the server's steps between the two tokens|, ms."""
    steps = sorted(csv.DictReader(open(f"{d}/steps.csv")), key=lambda s: int(s["t_end_ns"]))
    ends = [int(s["t_end_ns"]) for s in steps]
    cum = [0]
    for s in steps:
        cum.append(cum[-1] + int(s["t_end_ns"]) - int(s["t_start_ns"]))
    last, diffs = {}, []
    for t in csv.DictReader(open(f"{d}/tokens.csv")):
        if t["kind"] != "bg":
            continue
        tt = int(t["t_ns"]); i = bisect.bisect_right(ends, tt) - 1
        if t["request"] in last and i >= 0:
            tp, ip = last[t["request"]]
            diffs.append(abs((tt - tp) - (cum[i + 1] - cum[ip + 1])) / 1e6)
        last[t["request"]] = (tt, i)
    diffs.sort()
    return diffs[int(0.99 * len(diffs))], len(diffs)

def steps_of(out, way):
    """The server's steps rebased to the interference run's t = 0:
    (start, end, modeled, prefill tokens)."""
    if way == "embedded":
        rows, t0 = csv.DictReader(open(f"{out}/interference/steps.csv")), 0
    else:
        t0 = json.load(open(f"{out}/interference/config.json"))["session"]["t0_monotonic_ns"]
        rows = csv.DictReader(open(f"{work}/serve_steps.csv"))
    return [(int(r["t_start_ns"]) - t0, int(r["t_end_ns"]) - t0, int(r["modeled_ns"]),
             int(r["prefill_tokens"])) for r in rows if int(r["t_start_ns"]) >= t0]

# Excused stalls (the rule this test enforces; docs/reference/tests.md quotes it): a stall that does
# not overlap an injection's wait is excused only when the server's own records name the
# machine as its cause, with the measured step durations:
#   server overran  a step overlapping the gap lasted longer than the threshold while its
#                   modeled work was shorter than the threshold (the engine thread was paused);
#   client late     no step overlapping the gap lasted longer than the threshold and the
#                   server kept stepping through it (it emitted on time, the client read late).
# A gap with a long modeled step behind it (prefill: the server's batching) or with no step
# at all (unexplained) is never excused. And the excuse is bounded: the excused stalls form
# at most EXCUSED_EVENTS pause events (stalls of several users that overlap in time are one
# event) per run, each excused gap at most EXCUSED_GAP_MS long.
EXCUSED_EVENTS, EXCUSED_GAP_MS = 3, 1000.0

def unaligned_stalls(out, way, threshold_ms):
    """Every stall outside the injections' waits, with its cause: prefill, server, client or
    unexplained."""
    steps = steps_of(out, way)
    reqs = list(csv.DictReader(open(f"{out}/interference/requests.csv")))
    wins = [(int(r["t_send_ns"]), int(r["t_first_ns"])) for r in reqs if r["kind"] == "inject"]
    thr = threshold_ms * 1e6
    last, found = {}, []
    for tk in csv.DictReader(open(f"{out}/interference/tokens.csv")):
        if tk["kind"] != "bg":
            continue
        t = int(tk["t_ns"]); prev = last.get(tk["request"]); last[tk["request"]] = t
        if prev is None or t - prev <= thr or any(prev < f and t > s0 for s0, f in wins):
            continue
        during = [st for st in steps if st[0] < t and st[1] > prev]
        if any(m > thr for _, _, m, _ in during):
            cause = "prefill"  # long modeled work: the server's batching, never excused
        elif any(e - s0 > thr for s0, e, _, _ in during):
            cause = "server"   # measured long, modeled short: the engine thread paused
        elif during:
            cause = "client"   # the server stepped on time through the gap
        else:
            cause = "unexplained"
        found.append((prev, t, cause))
    return found

def excused(stalls):
    """(excused stalls, pause events they form, all within the bounds)."""
    ok_causes = [(a, b) for a, b, c in stalls if c in ("server", "client")]
    events, end = 0, None
    for a, b in sorted(ok_causes):
        if end is None or a >= end:
            events += 1
        end = b if end is None else max(end, b)
    within = events <= EXCUSED_EVENTS and all((b - a) / 1e6 <= EXCUSED_GAP_MS for a, b in ok_causes)
    return len(ok_causes), events, within

# The classifier can fail: a hand-made run with one stall of each cause (threshold 50 ms).
def selfcheck():
    d = f"{work}/classifier/interference"
    os.makedirs(d, exist_ok=True)
    ms = 1_000_000
    with open(f"{d}/requests.csv", "w") as f:
        f.write("request,user,kind,t_plan_ns,t_send_ns,t_first_ns,t_end_ns,prompt_tokens_requested,"
                "prompt_tokens,completion_tokens,finish_reason,error\n")
        f.write(f"9,-1,inject,{1000*ms},{1000*ms},{1200*ms},{1210*ms},8000,8000,1,length,\n")
    steps = [(2000, 2200, 190), (3000, 3200, 5)] + [(4000 + 5 * k, 4005 + 5 * k, 5) for k in range(40)]
    with open(f"{d}/steps.csv", "w") as f:
        f.write("step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,modeled_ns\n")
        for i, (a, b, m) in enumerate(steps):
            f.write(f"{i},{a*ms},{b*ms},1,0,1,{m*ms}\n")
    with open(f"{d}/tokens.csv", "w") as f:
        f.write("t_ns,user,request,kind,n_tokens\n")
        # a token every 10 ms, but for five 200 ms gaps: one inside the injection's wait,
        # then one behind each cause
        gaps = (1000, 2000, 3000, 4000, 5000)
        for t in range(900, 5300, 10):
            if not any(g < t < g + 200 for g in gaps):
                f.write(f"{t*ms},0,1,bg,1\n")
    got = [c for _, _, c in unaligned_stalls(f"{work}/classifier", "embedded", 50.0)]
    check(got == ["prefill", "server", "client", "unexplained"],
          f"classifier: one stall of each cause found as {got}")
    n_ok, events, within = excused([s for s in unaligned_stalls(f"{work}/classifier", "embedded", 50.0)])
    check(n_ok == 2 and events == 2 and within, "classifier: only the machine's two are excused")

aligned_ok, machine_only = {}, {}
selfcheck()
results = {}
for way in ("embedded", "target"):
    out = f"{work}/{way}"
    for f in ("comparison.json", "baseline/summary.json", "baseline/config.json",
              "baseline/tokens.csv", "baseline/requests.csv", "interference/summary.json",
              "interference/tokens.csv", "interference/requests.csv", "interference/config.json",
              "interference/fidelity.json"):
        check(os.path.exists(f"{out}/{f}"), f"{way}: {f} exists")
    base = json.load(open(f"{out}/baseline/summary.json"))
    inter = json.load(open(f"{out}/interference/summary.json"))
    results[way] = inter
    st = inter["stalls"]
    check(base["complete"] and inter["complete"], f"{way}: complete")
    check(inter["errors"] == 0 and base["errors"] == 0, f"{way}: no errors")
    check(len(inter["injections"]) == 3, f"{way}: 3 injections")
    # aligned_fraction 1.0, but for stalls the server's records pin on the machine (the rule
    # above), bounded; everything else must line up with an injection.
    stalls = unaligned_stalls(out, way, st["threshold_ms"])
    n_ok, events, within = excused(stalls)
    causes = {c: sum(1 for _, _, x in stalls if x == c) for c in ("prefill", "server", "client", "unexplained")}
    aligned = round(st["aligned_fraction"] * st["count"])
    ok = st["count"] > 0 and within and n_ok == len(stalls) and st["count"] - n_ok == aligned
    check(ok, f"{way}: aligned_fraction {st['aligned_fraction']} == 1.0 ({st['count']} stalls"
              + (f"; unaligned by cause {causes}, {events} pause event(s) excused of at most "
                 f"{EXCUSED_EVENTS})" if stalls else ")"), timing=True)
    machine_only[way] = causes["prefill"] == 0 and causes["unexplained"] == 0
    aligned_ok[way] = ok
    # The spike of an injection: each user's longest gap across [send, first token], the
    # median over users (one token read late under a loaded machine moves one user's gap,
    # not the median).
    toks = list(csv.DictReader(open(f"{out}/interference/tokens.csv")))
    reqs = list(csv.DictReader(open(f"{out}/interference/requests.csv")))
    windows = [(int(r["t_send_ns"]), int(r["t_first_ns"])) for r in reqs if r["kind"] == "inject"]
    for w, inj in zip(windows, inter["injections"]):
        last, per_user = {}, {}
        for tk in toks:
            if tk["kind"] != "bg":
                continue
            t = int(tk["t_ns"]); prev = last.get(tk["request"])
            if prev is not None and prev < w[1] and t > w[0]:
                per_user[tk["user"]] = max(per_user.get(tk["user"], 0), (t - prev) / 1e6)
            last[tk["request"]] = t
        spikes = sorted(per_user.values())
        spike = spikes[len(spikes) // 2]
        check(abs(spike - prefill_ms) <= 0.05 * prefill_ms,
              f"{way}: spike {spike:.1f} ms (max {inj['max_gap_ms']:.1f}) within 5 % of the "
              f"model's prefill {prefill_ms:.1f} ms", timing=True)
        # A user between two answers at that moment is not mid-answer: it cannot stall.
        check(inj["users_stalled"] >= 30, f"{way}: injection stalled {inj['users_stalled']}/32 users")
        check(abs(inj["t_send_s"] - inj["t_plan_s"]) < 0.02,
              f"{way}: injection sent {1e3 * (inj['t_send_s'] - inj['t_plan_s']):.2f} ms after plan")
    p50b, p50i = base["itl_ms"]["p50"], inter["itl_ms"]["p50"]
    check(abs(p50i - p50b) <= 0.05 * p50b, f"{way}: p50 {p50i:.3f} within 5 % of baseline {p50b:.3f}",
          timing=True)
    check(inter["itl_ms"]["max"] >= 10 * p50i,
          f"{way}: max {inter['itl_ms']['max']:.1f} >= 10 x p50 {p50i:.2f}", timing=True)
    if way == "embedded":
        for label in ("baseline", "interference"):
            p99, n = gap_vs_steps(f"{out}/{label}")
            # The bound, and the slip the run itself recorded (the rule in the header): its
            # fidelity.json's client timestamp error p99, at most the bound again.
            base = float(os.environ["GAP_BOUND_MS"])
            slip = json.load(open(f"{out}/{label}/fidelity.json")).get("p99_us", 0.0) / 1000
            bound = base + min(slip, base)
            check(p99 <= bound, f"{way}/{label}: |gap - steps| p99 {p99:.3f} ms <= {bound:.3f} ms "
                  f"({base} + recorded timestamp error p99 {slip:.3f}, at most {base}) over {n} gaps",
                  timing=True)
    fid = json.load(open(f"{out}/interference/fidelity.json"))
    print(f"     {way}: client timestamp error p50 {fid['p50_us']:.0f} us p99 {fid['p99_us']:.0f} us "
          f"max {fid['max_us']:.0f} us")
    # Every token in the summary is a row of tokens.csv.
    rows = sum(int(r["n_tokens"]) for r in csv.DictReader(open(f"{out}/interference/tokens.csv")))
    check(rows == inter["tokens_received"], f"{way}: tokens.csv holds all {rows} tokens")
    # The default transport stamps with the kernel's receive time (loopback always has it).
    st = inter.get("stamps", {})
    events = sum(1 for _ in csv.DictReader(open(f"{out}/interference/tokens.csv")))
    check(st.get("transport") == "raw" and st.get("user") == 0 and
          st.get("kernel", 0) + st.get("kernel_coalesced", 0) == events,
          f"{way}: raw transport, every event kernel-stamped ({st})")

e, t = results["embedded"], results["target"]
# The same experiment, the same conclusions: the bulk, the spikes, their alignment.
a, b = e["itl_ms"]["p50"], t["itl_ms"]["p50"]
check(abs(a - b) <= 0.05 * a, f"same result: p50 {a:.3f} vs {b:.3f} ms", timing=True)
a = max(i["max_gap_ms"] for i in e["injections"]); b = max(i["max_gap_ms"] for i in t["injections"])
check(abs(a - b) <= 0.05 * a, f"same result: spike {a:.1f} vs {b:.1f} ms", timing=True)
check(aligned_ok.get("embedded") and aligned_ok.get("target"),
      "same result: every stall the server caused aligned with an injection", timing=True)
a, b = e["injections_with_stalls"], t["injections_with_stalls"]
check(a == b == 3, f"same result: injections with stalls {a} vs {b}")
# The server's own step log: each injection's prefill step within 2 % of its modeled time
# (the engine did its part; a stall measured otherwise was the delivery, on the machine).
def prefills_on_time(out, way):
    rows = [r for r in steps_of(out, way) if r[3] >= 1000]  # the injections' 8,000-token prefills
    return len(rows) >= 3 and all(abs((b - a) / m - 1) <= 0.02 for a, b, m, _ in rows)

print(f"{len(failures) + len(timing_failures)} failed")
if failures:
    sys.exit(1)
if timing_failures:
    # Only timing failed. Measured once more (once: RETRY_EXIT) only when the records pin it on
    # the machine: every unaligned stall the server paused or the client read late (none on a
    # long modeled step, none unexplained) and every prefill step on its model in the step log.
    machine = all(machine_only.get(w, False) for w in ("embedded", "target")) and \
        all(prefills_on_time(f"{work}/{w}", w) for w in ("embedded", "target"))
    print("the timing checks failed on what the records pin on the machine" if machine else
          "the timing checks failed and the records do not pin it on the machine")
    sys.exit(RETRY_EXIT if machine else 1)
sys.exit(0)
EOF
}

# RETRY_EXIT: the checks failed on timing alone, and the run's records (the unaligned stalls'
# causes, the step log's prefill steps) put it on the machine: measure once more, once; the
# second measurement must pass every check. Anything else fails at once.
RETRY_EXIT=3
export RETRY_EXIT
rc=0; measure || rc=$?
if [ "$rc" = "$RETRY_EXIT" ]; then
  echo "note: measuring once more (the first measurement failed on the machine's timing only)"
  rc=0; measure || rc=$?
fi
[ "$rc" = 0 ] || fail "run_emulate: the checks failed (exit $rc)"
