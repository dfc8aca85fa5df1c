#!/usr/bin/env bash
# stallscope serve at its engine limits:
#  1. --max-waiting: with every seat taken and the queue full, one more request gets 429, an
#     OpenAI-style JSON error that says why, and Retry-After; the queued ones still complete
#     (after waiting longer than --request-read-timeout: a deadline for requests to arrive,
#     not for answers), and once the queue drains requests are accepted again;
#  2. max_model_len: prompts and prompt + max_tokens over it are refused with vLLM's words;
#     a chat without max_tokens gets exactly max_model_len - prompt tokens;
#  3. KV-cache exhaustion (a tiny --kv-blocks), under each policy: the engine preempts and
#     recomputes; every stream completes with usage == tokens streamed, [DONE] and — all 16
#     of them — the same text as the same request served without preemption (recompute
#     never skips, repeats or changes a token);
#     vllm:num_preemptions_total > 0; KV usage, running and waiting back to 0.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

# ---- 1. the waiting queue ----------------------------------------------------------------
start_server waiting --max-num-seqs 2 --max-waiting 4 --request-read-timeout 1s
py "$(cat <<'PY'
import json, os, time
from serve_client import Stream, request, run_all
port = int(os.environ["PORT"])

def metric(name):
    _, _, b = request(port, "/metrics", method="GET")
    for l in b.decode().splitlines():
        if l.startswith(name + "{"):
            return float(l.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}")

long = {"prompt": [7] * 16, "max_tokens": 400, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}}
short = dict(long, max_tokens=5)
seats = [Stream(port, "/v1/completions", long) for _ in range(2)]
for s in seats:
    s.start()
deadline = time.monotonic() + 20
while time.monotonic() < deadline and not all(len(s.events) >= 3 for s in seats):
    time.sleep(0.01)
assert all(len(s.events) >= 3 for s in seats), "the two seated streams did not start"
queued = [Stream(port, "/v1/completions", short) for _ in range(4)]
for q in queued:
    q.start()
deadline = time.monotonic() + 10
while time.monotonic() < deadline and not all(q.status == 200 for q in queued):
    time.sleep(0.01)
assert all(q.status == 200 and not q.events for q in queued), "queued streams not waiting"
st, h, b = request(port, "/v1/completions", short)
assert st == 429, (st, b[:200])
err = json.loads(b)["error"]
assert err["code"] == 429 and err["type"] == "rate_limit_error", err
assert "--max-waiting 4" in err["message"] and "retry" in err["message"], err
assert h.get("retry-after") == "1", h
assert h["content-type"].startswith("application/json")
assert metric("stallscope_requests_rejected_queue_full_total") == 1
print(f"ok: 429 with the queue full: {err['message']}")
assert run_all(seats + queued, 60), "streams did not finish"
for s in seats + queued:
    assert s.error is None and s.done and s.raw_ok, (s.error, s.done)
    assert s.usage()["completion_tokens"] == len(s.token_chunks()), s.usage()
waited = min(q.events[0][0] for q in queued) - min(s.events[0][0] for s in seats)
assert waited > 1.5e9, f"the queued streams waited only {waited / 1e9:.1f} s"
st, _, b = request(port, "/v1/completions", {"prompt": [7] * 16, "max_tokens": 5,
                                              "ignore_eos": True})
assert st == 200 and json.loads(b)["usage"]["completion_tokens"] == 5, b[:200]
print(f"ok: the queued streams completed after {waited / 1e9:.1f} s of silence (read "
      "timeout 1 s); after the queue drained a request was accepted")
PY
)"
stop_server TERM

# ---- 2. max_model_len ----------------------------------------------------------------------
start_server modellen --max-model-len 256
py "$(cat <<'PY'
import json, os
from serve_client import Stream, request
port = int(os.environ["PORT"])
C, CH = "/v1/completions", "/v1/chat/completions"
st, _, b = request(port, C, {"prompt": list(range(1, 301)), "max_tokens": 1})
err = json.loads(b)["error"]
assert st == 400 and "maximum context length is 256 tokens" in err["message"], (st, err)
assert "300 input tokens" in err["message"], err
st, _, b = request(port, C, {"prompt": list(range(1, 201)), "max_tokens": 57})
err = json.loads(b)["error"]
assert st == 400 and "requested 257 tokens (200 in the prompt, 57 in the completion)" in err["message"], err
st, _, b = request(port, C, {"prompt": list(range(1, 201)), "max_tokens": 56, "ignore_eos": True})
assert st == 200 and json.loads(b)["usage"]["completion_tokens"] == 56, b[:200]
# chat without max_tokens: the rest of the context. 1 + 4 + 1 ("hi") + 3 = 9 prompt tokens.
s = Stream(port, CH, {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True,
           "stream": True, "stream_options": {"include_usage": True}})
s.start(); s.join(60)
assert s.done and s.usage() == {"prompt_tokens": 9, "total_tokens": 256,
                                "completion_tokens": 247}, s.usage()
assert len(s.token_chunks()) == 247 and s.finish_reason() == "length"
print("ok: max_model_len 256: over-long prompts and prompt + max_tokens refused (vLLM's "
      "words); a chat without max_tokens filled the context exactly")
PY
)"
stop_server TERM

# ---- 3. KV-cache exhaustion: preemption and recompute ------------------------------------
# 40 blocks of 16 tokens = 640 tokens of KV; 16 streams of 32 + 200 tokens need up to 15
# blocks each (240 in all), so the cache runs out over and over.
for policy in mixed chunked prefill-first; do
  start_server "kv_$policy" --policy "$policy" --max-num-batched-tokens 512 --kv-blocks 40 \
    --max-num-seqs 64
  py "$(cat <<'PY'
import json, os, time
from serve_client import Stream, request, run_all
port = int(os.environ["PORT"])

def metrics():
    _, _, b = request(port, "/metrics", method="GET")
    vals = {}
    for l in b.decode().splitlines():
        if l and not l.startswith("#"):
            name, v = l.rsplit(" ", 1)
            vals[name.split("{")[0]] = float(v)
    return vals

def body(u, stream=True):
    # temperature 0: the answer is a function of the prompt alone, so it can be checked
    # against the same request served without any preemption.
    b = {"prompt": [100 + u] * 32, "max_tokens": 200, "ignore_eos": True, "temperature": 0}
    if stream:
        b.update(stream=True, stream_options={"include_usage": True})
    return b

streams = [Stream(port, "/v1/completions", body(u)) for u in range(16)]
assert run_all(streams, 120), "streams did not finish under KV pressure"
m = metrics()
pre = m["vllm:num_preemptions_total"]
assert pre > 0, "no preemption: the test did not exhaust the cache"
for u, s in enumerate(streams):
    assert s.error is None and s.status == 200 and s.done and s.raw_ok, (u, s.error, s.status)
    assert s.finish_reason() == "length", s.finish_reason()
    n = len(s.token_chunks())
    assert s.usage()["completion_tokens"] == n == 200, (u, s.usage(), n)
# Every one of the 16 again without preemption (two at a time: 2 x 15 blocks fit the 40),
# and the same text.
import threading
alone = {}
def serve_alone(u):
    st, _, b = request(port, "/v1/completions", body(u, stream=False), timeout=60)
    alone[u] = (st, b)
for u in range(0, 16, 2):
    pair = [threading.Thread(target=serve_alone, args=(v,), daemon=True) for v in (u, u + 1)]
    for t in pair:
        t.start()
    for t in pair:
        t.join(60)
assert sorted(alone) == list(range(16)), f"answers missing: {sorted(alone)}"
for u in range(16):
    st, b = alone[u]
    assert st == 200, (u, b[:200])
    assert json.loads(b)["choices"][0]["text"] == streams[u].text(), \
        f"stream {u}: recompute changed the answer"
assert metrics()["vllm:num_preemptions_total"] == pre, "preempted while served in pairs"
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    m = metrics()
    if (m["vllm:kv_cache_usage_perc"], m["vllm:num_requests_running"],
            m["vllm:num_requests_waiting"], m["stallscope_requests_open"]) == (0, 0, 0, 0):
        break
    time.sleep(0.05)
assert m["vllm:kv_cache_usage_perc"] == 0 and m["vllm:num_requests_running"] == 0, m
assert m["vllm:num_requests_waiting"] == 0 and m["stallscope_requests_open"] == 0, m
print(f"ok: {int(pre)} preemptions; 16 streams x 200 tokens complete, usage == tokens "
      f"streamed, all 16 the same text as without preemption; KV back to 0")
PY
)"
  stop_server TERM
done
pass "serve limits"
