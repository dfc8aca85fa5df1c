#!/usr/bin/env bash
# stallscope serve: a client that disconnects mid-stream (or mid non-streaming request) is
# aborted and its KV blocks freed, visible in /metrics; SIGINT and SIGTERM end the streams
# in flight cleanly (finish_reason "abort", usage, [DONE], chunked terminator) and exit 0;
# ASan (the test build) reports no leak.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

start_server disconnect --step-log "$DIR/steps.csv"
py "$(cat <<'PY'
import json, os, socket, time
from serve_client import Stream, request, run_all
port = int(os.environ["PORT"])

def metrics():
    st, _, b = request(port, "/metrics", method="GET")
    vals = {}
    for l in b.decode().splitlines():
        if l and not l.startswith("#"):
            name, v = l.rsplit(" ", 1)
            vals[name.split("{")[0]] = float(v)
    return vals

def wait_for(cond, what, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = metrics()
        if cond(m):
            return m
        time.sleep(0.05)
    raise AssertionError(f"{what}: {metrics()}")

body = {"prompt": "go on", "max_tokens": 100000, "ignore_eos": True, "stream": True}
keep = Stream(port, "/v1/completions", dict(body, max_tokens=300))
leave = Stream(port, "/v1/completions", body, close_after=20)
keep.start(); leave.start()
leave.join(30)
assert not leave.is_alive() and leave.error is None and len(leave.events) == 20
# The leaver's request is aborted: one request left running, well before it would end.
m = wait_for(lambda m: m["vllm:num_requests_running"] == 1, "aborted stream still running")
assert 0 < m["vllm:kv_cache_usage_perc"] < 0.001
keep.join(60)
assert keep.done and keep.finish_reason() == "length" and len(keep.token_chunks()) == 300
m = wait_for(lambda m: m["vllm:num_requests_running"] == 0 and
             m["vllm:kv_cache_usage_perc"] == 0, "KV not freed after the disconnect")
gen = m["vllm:generation_tokens_total"]
time.sleep(0.3)
assert metrics()["vllm:generation_tokens_total"] == gen, "something still generates"
print(f"ok: streaming client left after 20 tokens; running 0, KV 0, {gen:.0f} tokens in all")

# A non-streaming client that leaves: the request is noticed gone within ~100 ms.
s = socket.create_connection(("127.0.0.1", port), timeout=5)
payload = json.dumps({"prompt": "x", "max_tokens": 100000, "ignore_eos": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
wait_for(lambda m: m["vllm:num_requests_running"] == 1, "non-streaming request not running")
s.close()
wait_for(lambda m: m["vllm:num_requests_running"] == 0 and
         m["vllm:kv_cache_usage_perc"] == 0, "non-streaming request not aborted", timeout=3)
print("ok: non-streaming client left; aborted, KV freed")

# Many clients leaving at once while others stream.
stay = [Stream(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
        "max_tokens": 200, "ignore_eos": True, "stream": True}) for _ in range(4)]
go = [Stream(port, "/v1/completions", body, close_after=5 + i) for i in range(16)]
assert run_all(stay + go, 60)
assert all(s.done and len(s.token_chunks()) == 200 for s in stay)
wait_for(lambda m: m["vllm:num_requests_running"] == 0 and
         m["vllm:kv_cache_usage_perc"] == 0, "KV not freed after 16 disconnects")
print("ok: 16 clients left mid-stream while 4 finished; KV back to 0")
PY
)"
stop_server TERM

# ---- signals with streams in flight ---------------------------------------------------------
for sig in INT TERM; do
  start_server "sig$sig"
  py "$(cat <<PY
import os, signal, time
from serve_client import Stream, run_all
port = int(os.environ["PORT"])
pid = int(os.environ["SERVER_PID"])
streams = [Stream(port, "/v1/completions", {"prompt": "go", "max_tokens": 100000,
           "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
           for _ in range(6)]
streams += [Stream(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
            "max_tokens": 100000, "ignore_eos": True, "stream": True}) for _ in range(2)]
for s in streams:
    s.start()
deadline = time.monotonic() + 20
while time.monotonic() < deadline and not all(len(s.events) >= 10 for s in streams):
    time.sleep(0.02)
os.kill(pid, signal.SIG$sig)
for s in streams:
    s.join(20)
for s in streams:
    assert not s.is_alive() and s.error is None, s.error
    assert s.status == 200 and s.raw_ok and s.done, "stream not ended cleanly"
    assert s.finish_reason() == "abort", s.finish_reason()
u = [s.usage() for s in streams[:6]]
assert all(x["completion_tokens"] == len(s.token_chunks()) for x, s in zip(u, streams)), u
print("ok: SIG$sig ended 8 streams with finish_reason abort, usage and [DONE]")
PY
)"
  wait_server "SIG$sig"
done
pass "serve disconnect and signals"
