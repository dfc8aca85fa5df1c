#!/usr/bin/env bash
# stallscope serve against hostile clients (tests/integration/hostile.py), while six
# well-behaved users stream without pause: slowloris on headers and on a body (a byte a
# second), oversized headers, URIs and bodies, 2,000 connections opened and dropped (some
# mid-request, some with a reset), 40 streams leaving at random points (half with a reset),
# pipelined garbage, request smuggling (conflicting lengths, +N, HTTP/1.2, hidden
# requests...), invalid UTF-8, deep nesting, numbers out of range.
#
# Passes when: every attack got its refusal (an OpenAI-style JSON error, the status the
# attack calls for) or a close (never a 5xx, never a 200 for a slowloris), the server stayed
# up, every legitimate stream completed (usage == tokens streamed == max_tokens, [DONE]),
# and the server came back to its baseline after each of HOSTILE_ROUNDS identical rounds
# (default 3): no request open, KV usage 0, no connection left but ours, and the heap in use
# (stallscope_heap_bytes, the allocator's own count) at most 256 KiB above its level after
# round 1 (the first round warms caches and tables up). Measured growth after round 1, five
# more rounds: ASan build +3.9 and +13.3 KiB (two runs), Release +119 KiB (+86 KiB by
# round 3: glibc counts its per-thread caches as held); the bound is 3 x the Release
# figure the default run can see, and a leak of 64 bytes per connection (~2,250 a round)
# crosses it within the two rounds after the first. RSS is printed, not bounded: under
# ASan it moves by up to 5 MiB between rounds without any leak
# (docs/results/serve-hostile-memory.md).
# ASan's quarantine is off for the server so freed memory is reused, and LeakSanitizer
# checks the exit.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

READ_TIMEOUT_S=2
start_server hostile --request-read-timeout ${READ_TIMEOUT_S}s --max-body-size 65536 \
  --max-model-len 8192
py "$(cat <<PY
import os, threading, time
import hostile as H
from serve_client import request
port = int(os.environ["PORT"])
pid = int(os.environ["SERVER_PID"])
READ_TIMEOUT_S = $READ_TIMEOUT_S
ROUNDS = int(os.environ.get("HOSTILE_ROUNDS", "3"))
HEAP_BOUND = 256 * 1024

def quiet(timeout=10):
    """Wait for the server to settle: nothing open, KV empty, only our metrics connection."""
    deadline = time.monotonic() + timeout
    while True:
        m = H.metrics(port)
        state = (m["stallscope_requests_open"], m["vllm:kv_cache_usage_perc"],
                 m["vllm:num_requests_running"], m["vllm:num_requests_waiting"])
        if state == (0, 0, 0, 0) and m["stallscope_http_connections"] <= 1:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"server did not settle: {state}, "
                                 f"{m['stallscope_http_connections']} connections")
        time.sleep(0.1)

def attack_round(label):
    users = H.LegitUsers(port, users=6, seed=hash(label) & 0xffff)
    users.start()
    time.sleep(0.5)
    results = {}
    attacks = {
        "slowloris headers": lambda: H.slowloris(port, READ_TIMEOUT_S, conns=20),
        "slowloris body": lambda: H.slowloris(port, READ_TIMEOUT_S, conns=5, body=True),
        "oversized": lambda: H.oversized(port),
        "churn 2000": lambda: H.churn(port, total=2000),
        "disconnects": lambda: H.disconnects(port, n=40),
        "pipelined garbage": lambda: H.pipelined(port),
        "smuggling": lambda: H.smuggling(port),
        "bad bodies": lambda: H.bad_bodies(port),
    }
    def run(name, fn):
        t0 = time.monotonic()
        try:
            results[name] = (fn(), time.monotonic() - t0)
        except Exception as exc:  # a crash of the attack itself is a failure too
            results[name] = ([f"raised {exc!r}"], time.monotonic() - t0)
    threads = [threading.Thread(target=run, args=(n, f), daemon=True) for n, f in attacks.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(not t.is_alive() for t in threads), "an attack did not finish in 120 s"
    st, _, _ = request(port, "/health", method="GET", timeout=10)
    assert st == 200, f"/health {st} after the attacks"
    problems = list(users.stop())
    legit_failed = len(problems)
    for name, (p, secs) in results.items():
        print(f"     [{label}] {name}: {'ok' if not p else 'FAILED'} ({secs:.1f} s)")
        problems += [f"{name}: {x}" for x in p]
    print(f"     [{label}] legitimate users: {users.done} streams, {users.tokens} tokens, "
          f"{legit_failed} failed")
    if users.done < 12:
        problems.append(f"only {users.done} legitimate streams completed")
    for p in problems[:30]:
        print("FAIL", label, p)
    assert not problems, f"{len(problems)} problems in round {label}"
    return quiet()

m = quiet()
rss, heap = [H.rss_kb(pid)], [m["stallscope_heap_bytes"]]
for r in range(1, ROUNDS + 1):
    m = attack_round(f"round {r}")
    rss.append(H.rss_kb(pid))
    heap.append(m["stallscope_heap_bytes"])
timeouts = m["stallscope_http_request_timeouts_total"]
print("ok: heap in use " + ", ".join(f"{b / 1024:.0f}" for b in heap) + " KiB; RSS "
      + ", ".join(f"{kb / 1024:.1f}" for kb in rss) + " MiB (at start, after each round); "
      f"{timeouts:.0f} connections timed out; KV 0, nothing open")
assert timeouts >= 25 * ROUNDS, f"only {timeouts} read timeouts counted for {25 * ROUNDS} slowloris connections"
growth = max(heap[2:]) - heap[1]
print(f"heap growth after round 1: {growth / 1024:+.1f} KiB (bound {HEAP_BOUND / 1024:.0f} KiB); "
      f"RSS {(max(rss[2:]) - rss[1]) / 1024:+.2f} MiB")
assert growth <= HEAP_BOUND, f"the heap grew {growth / 1024:.0f} KiB after round 1: a leak?"
PY
)"
stop_server TERM
pass "serve hostile"
