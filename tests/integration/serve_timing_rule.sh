#!/usr/bin/env bash
# The step-timing rule of serve_interference.sh and serve_chunked.sh
# (serve_client.check_step_timing), fed step logs made here, no server: a step may overrun
# its modeled time by 0.5 ms; a larger overrun is excused only by the engine's own record
# of that step's late wake-up (late_ns; the overrun minus it within 0.5 ms), only up to
# 10 ms, and on at most 5 % of steps (rounded down).
#  - four 130 ms stalls in 600 steps that no late_ns explains: refused (the rule before
#    issue 15, "99 % of steps within 0.5 ms", let them through: checked below too);
#  - the same stalls recorded by the engine (late_ns 130 ms): refused, over the 10 ms cap;
#  - 30 steps 1 ms late with their late_ns in 600: accepted; 31: refused (over 5 %);
#  - 4.9 ms late with its record: accepted; 5.1 ms: refused;
#  - a 1 ms overrun in a log without the late_ns column: refused;
#  - a refusal made only of recorded lateness (over the cap, or over 5 %) is the machine's:
#    RecordedLateOnly, and the test that measured measures once more (serve_lib.bash's
#    run_measured); one with any unexplained overrun is a plain failure;
#  - a cut or non-numeric row in a step log: an error, not a row skipped.
set -euo pipefail
DIR=$2
mkdir -p "$DIR"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"

DIR=$DIR PYTHONPATH=$PY_DIR timeout 60 python3 - <<'PY'
import os
from serve_client import RecordedLateOnly, check_step_timing, read_steps
d = os.environ["DIR"]
MODELED = 5_520_000  # a 32-stream decode step on the emulated H100

def log(name, overruns, late=None, columns=True):
    """600 decode steps on schedule but for `overruns` {step: ns over}; late_ns as recorded
    for them ({step: ns}, default: nothing recorded). Written as a step log and read back."""
    late = late or {}
    path = f"{d}/{name}.csv"
    with open(path, "w") as f:
        head = "step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,modeled_ns"
        f.write(head + (",late_ns\n" if columns else "\n"))
        t = 1_000_000_000
        for k in range(600):
            end = t + MODELED + 40_000 + overruns.get(k, 0)
            row = f"{k},{t},{end},32,0,32,{MODELED}"
            f.write(row + (f",{late.get(k, 40_000)}\n" if columns else "\n"))
            t = max(t + MODELED, end) if overruns.get(k, 0) > 2_000_000 else t + MODELED
    return read_steps(path)

def verdict(steps):
    try:
        excused, _ = check_step_timing(steps, lambda s: s["modeled_ns"], "decode steps")
        return f"accepted ({excused} excused)"
    except RecordedLateOnly as exc:
        return f"retry: {exc}"
    except AssertionError as exc:
        return f"refused: {exc}"

def rule_before_issue_15(steps):
    errs = [(s["t_end_ns"] - s["t_start_ns"] - s["modeled_ns"]) / 1e6 for s in steps]
    return sum(abs(e) <= 0.5 for e in errs) / len(errs) >= 0.99

stalls = {100: 130_000_000, 250: 130_000_000, 400: 130_000_000, 550: 130_000_000}
both = {**stalls, 5: 1_000_000}
cases = [
    ("clean", log("clean", {}), "accepted"),
    ("four 130 ms stalls, no record", log("stalls", stalls), "refused"),
    ("four 130 ms stalls, recorded", log("stalls_recorded", stalls, stalls), "retry"),
    ("the same, and one 1 ms overrun unrecorded", log("mixed", both, stalls), "refused"),
    ("30 x 1 ms late, recorded", log("thirty", {k: 1_000_000 for k in range(30)},
                                     {k: 990_000 for k in range(30)}), "accepted"),
    ("31 x 1 ms late, recorded", log("thirty-one", {k: 1_000_000 for k in range(31)},
                                     {k: 990_000 for k in range(31)}), "retry"),
    ("1 ms late, recorded only 0.3 ms", log("partial", {5: 1_000_000}, {5: 300_000}), "refused"),
    ("9.9 ms late, recorded", log("cap_in", {5: 9_860_000}, {5: 9_860_000}), "accepted"),
    ("10.1 ms late, recorded", log("cap_out", {5: 10_060_000}, {5: 10_060_000}), "retry"),
    ("1 ms late, old log without late_ns", log("old", {5: 1_000_000}, columns=False), "refused"),
]
bad = []
for name, steps, want in cases:
    v = verdict(steps)
    ok = v.startswith(want)
    print(f"{'ok' if ok else 'WRONG'}: {name}: {v[:150]}")
    if not ok:
        bad.append(name)
assert not bad, f"the rule decided wrongly: {bad}"
assert rule_before_issue_15(log("stalls", stalls)), "expected the old rule to pass the stalls"
print("ok: the rule before issue 15 (99 % within 0.5 ms) accepted the four 130 ms stalls")

# A step log with a cut or garbled row is an error (the server flushes whole rows at exit).
for name, tail in [("cut", "7,100,200,1\n"), ("garbled", "7,100,2x0,1,0,1,9,0\n")]:
    path = f"{d}/{name}.csv"
    with open(path, "w") as f:
        f.write("step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,modeled_ns,"
                "late_ns\n6,0,100,1,0,1,90,10\n" + tail)
    try:
        read_steps(path)
    except AssertionError as exc:
        print(f"ok: a {name} row is an error: {exc}")
    else:
        raise AssertionError(f"a {name} row was skipped silently")
PY
pass "step-timing rule"
