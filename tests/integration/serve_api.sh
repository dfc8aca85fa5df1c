#!/usr/bin/env bash
# stallscope serve: the API shapes. curl -N streams on both endpoints with correct SSE
# framing, the usage chunk equals the tokens streamed, non-streaming answers carry the
# whole text and usage, stop strings, EOS, /v1/models, /health, /metrics, --api-key.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

start_server api --gpu h100-sxm --model llama-3.1-8b
URL=http://127.0.0.1:$PORT

# ---- curl -N on both endpoints --------------------------------------------------------
curl -sS -N --max-time 30 "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"llama-3.1-8b","prompt":"The quick brownish fox","max_tokens":40,"ignore_eos":true,"seed":7,"stream":true,"stream_options":{"include_usage":true}}' \
  >"$DIR/completions.sse"
curl -sS -N --max-time 30 "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"llama-3.1-8b","messages":[{"role":"user","content":"Say something"}],"max_tokens":25,"ignore_eos":true,"seed":7,"stream":true,"stream_options":{"include_usage":true}}' \
  >"$DIR/chat.sse"
curl -sS --max-time 30 "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The quick brownish fox","max_tokens":40,"ignore_eos":true,"seed":7}' >"$DIR/completions.json"
curl -sS --max-time 30 "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Say something"}],"max_tokens":25,"ignore_eos":true,"seed":7}' >"$DIR/chat.json"

py "$(cat <<'PY'
import json, os
d = os.environ["DIR"]

def events(path):
    raw = open(path, "rb").read().decode()
    assert raw.endswith("data: [DONE]\n\n"), "stream must end with data: [DONE]"
    parts = raw.split("\n\n")
    assert parts[-1] == "", "trailing bytes after the last event"
    out = []
    for p in parts[:-1]:
        assert p.startswith("data: ") and "\n" not in p, f"bad SSE event {p[:80]!r}"
        out.append(p[len("data: "):])
    assert out[-1] == "[DONE]" and "[DONE]" not in out[:-1]
    return [json.loads(x) for x in out[:-1]]

# completions
ev = events(f"{d}/completions.sse")
assert all(e["object"] == "text_completion" for e in ev)
assert all(e["id"] == ev[0]["id"] and e["id"].startswith("cmpl-") for e in ev)
tokens = [e for e in ev if e["choices"]]
usage = [e for e in ev if not e["choices"]]
assert len(usage) == 1 and usage[0] is ev[-1], "one usage chunk, last"
u = usage[0]["usage"]
assert u["completion_tokens"] == len(tokens) == 40, (u, len(tokens))
assert u["prompt_tokens"] == 6, u  # The(1) quick(2) brownish(2) fox(1)
assert u["total_tokens"] == 46
assert all(e["choices"][0]["finish_reason"] is None for e in tokens[:-1])
assert tokens[-1]["choices"][0]["finish_reason"] == "length"
streamed = "".join(e["choices"][0]["text"] for e in tokens)
assert len(streamed.split()) == 40

# the same request without streaming: the same words (same seed), the usage
full = json.load(open(f"{d}/completions.json"))
assert full["object"] == "text_completion"
assert full["choices"][0]["text"] == streamed, (full["choices"][0]["text"], streamed)
assert full["choices"][0]["finish_reason"] == "length"
assert full["usage"] == {"prompt_tokens": 6, "total_tokens": 46, "completion_tokens": 40}

# chat
ev = events(f"{d}/chat.sse")
assert all(e["object"] == "chat.completion.chunk" for e in ev)
assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, ev[0]
tokens = [e for e in ev[1:] if e["choices"]]
u = ev[-1]["usage"]
assert not ev[-1]["choices"]
assert u["completion_tokens"] == len(tokens) == 25, (u, len(tokens))
assert all("role" not in e["choices"][0]["delta"] for e in tokens)
assert tokens[-1]["choices"][0]["finish_reason"] == "length"
streamed = "".join(e["choices"][0]["delta"]["content"] for e in tokens)
full = json.load(open(f"{d}/chat.json"))
assert full["object"] == "chat.completion"
m = full["choices"][0]["message"]
assert m["role"] == "assistant" and m["content"] == streamed
assert full["usage"]["completion_tokens"] == 25
assert full["usage"]["prompt_tokens"] == u["prompt_tokens"]
print("ok: SSE framing, usage = tokens streamed, non-streaming text = streamed text")
PY
)"

# ---- behaviour: continuous usage, timestamps, stop strings, EOS, token-id prompts --------
py "$(cat <<'PY'
import json, os, time
from serve_client import Stream, request, get_json, run_all
port = int(os.environ["PORT"])

# continuous_usage_stats + timestamps extension: usage in every chunk, emit_ns/step
s = Stream(port, "/v1/completions", {"prompt": [1, 2, 3, 4, 5], "max_tokens": 12,
           "ignore_eos": True, "stream": True,
           "stream_options": {"include_usage": True, "continuous_usage_stats": True},
           "stallscope": {"timestamps": True}})
assert run_all([s], 30) and s.status == 200 and s.raw_ok and s.done, (s.status, s.error)
ch = s.chunks()
toks = s.token_chunks()
assert len(toks) == 12
for i, (t, c) in enumerate(toks):
    assert c["usage"]["completion_tokens"] == i + 1 and c["usage"]["prompt_tokens"] == 5
for t, c in ch:
    st = c["stallscope"]
    assert 0 < st["emit_ns"] <= t, "emitted before it was received"
    assert st["step"] >= 0
steps = [c["stallscope"]["step"] for _, c in toks]
assert steps == sorted(steps) and len(set(steps)) == 12, steps
# no extension, no field
s = Stream(port, "/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": True})
assert run_all([s], 30) and all("stallscope" not in c for _, c in s.chunks())

# stop strings: the answer ends before the stop string's match, finish_reason stop
status, _, body = request(port, "/v1/completions", {"prompt": "a b", "max_tokens": 30,
                          "ignore_eos": True, "seed": 11})
words = json.loads(body)["choices"][0]["text"].split(" ")[1:]
k = next(i for i in range(3, 30) if words[i] not in words[:i])
stop = " " + words[k]
status, _, body = request(port, "/v1/completions", {"prompt": "a b", "max_tokens": 30,
                          "ignore_eos": True, "seed": 11, "stop": [stop, "zzz"]})
r = json.loads(body)
assert r["choices"][0]["finish_reason"] == "stop", r
assert r["choices"][0]["stop_reason"] == stop
assert r["choices"][0]["text"] == "".join(" " + w for w in words[:k]), (r, words[:k + 1])
assert r["usage"]["completion_tokens"] == k + 1
s = Stream(port, "/v1/completions", {"prompt": "a b", "max_tokens": 30, "ignore_eos": True,
           "seed": 11, "stop": stop, "stream": True, "stream_options": {"include_usage": True}})
assert run_all([s], 30) and s.finish_reason() == "stop" and s.text() == r["choices"][0]["text"]
assert s.usage()["completion_tokens"] == len(s.token_chunks()) == k + 1

# EOS: without ignore_eos the answer ends on its own (16..256 words + EOS), "stop"
status, _, body = request(port, "/v1/completions", {"prompt": "tell", "max_tokens": 1000,
                          "seed": 3})
r = json.loads(body)
n = r["usage"]["completion_tokens"]
assert r["choices"][0]["finish_reason"] == "stop" and 17 <= n <= 257, r
assert len(r["choices"][0]["text"].split()) == n - 1  # EOS has no text
# min_tokens pushes EOS out
status, _, body = request(port, "/v1/completions", {"prompt": "tell", "max_tokens": 1000,
                          "seed": 3, "min_tokens": 300})
r = json.loads(body)
assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == 301, r
# greedy answers follow the prompt
a = json.loads(request(port, "/v1/completions", {"prompt": "same", "temperature": 0})[2])
b = json.loads(request(port, "/v1/completions", {"prompt": "same", "temperature": 0})[2])
assert a["choices"][0]["text"] == b["choices"][0]["text"]

# models, health, metrics
status, m = get_json(port, "/v1/models")
assert status == 200 and m["data"][0]["id"] == "llama-3.1-8b"
assert m["data"][0]["max_model_len"] == 131072
status, _, body = request(port, "/health", method="GET")
assert status == 200
status, h, body = request(port, "/metrics", method="GET")
text = body.decode()
assert status == 200 and h["content-type"].startswith("text/plain")
for name in ["vllm:num_requests_running{", "vllm:num_requests_waiting{",
             "vllm:kv_cache_usage_perc{", "vllm:time_to_first_token_seconds_bucket{",
             "vllm:inter_token_latency_seconds_bucket{", "vllm:iteration_tokens_total_bucket{",
             "vllm:prompt_tokens_total{", "vllm:generation_tokens_total{",
             "vllm:num_preemptions_total{"]:
    assert name + 'model_name="llama-3.1-8b"' in text, name
vals = {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines()
        if l and not l.startswith("#")}
assert vals['vllm:num_requests_running{model_name="llama-3.1-8b"}'] == 0
assert vals['vllm:kv_cache_usage_perc{model_name="llama-3.1-8b"}'] == 0
assert vals['vllm:generation_tokens_total{model_name="llama-3.1-8b"}'] > 100
# vLLM's POST /reset_prefix_cache: 200 (calibrate --target resets between probes); GET: 405
status, _, body = request(port, "/reset_prefix_cache", method="POST")
assert status == 200, (status, body)
status, h, body = request(port, "/reset_prefix_cache", method="GET")
assert status == 405 and h["allow"] == "POST", (status, h)
print("ok: continuous usage, timestamps, stop strings, EOS, min_tokens, models, health, metrics, reset")
PY
)"
stop_server TERM

# ---- --api-key -------------------------------------------------------------------------
start_server apikey --api-key s3cret --served-model-name my-model
py "$(cat <<'PY'
import json, os
from serve_client import request
port = int(os.environ["PORT"])
body = {"model": "my-model", "prompt": "hi", "max_tokens": 2}
st, _, b = request(port, "/v1/completions", body)
assert st == 401 and json.loads(b)["error"]["code"] == 401, (st, b)
st, _, b = request(port, "/v1/completions", body, headers={"Authorization": "Bearer wrong"})
assert st == 401 and "message" in json.loads(b)["error"]
st, _, b = request(port, "/v1/models", method="GET")
assert st == 401
st, _, b = request(port, "/v1/completions", body, headers={"Authorization": "Bearer s3cret"})
assert st == 200 and json.loads(b)["model"] == "my-model", b
st, _, b = request(port, "/health", method="GET")
assert st == 200  # /health and /metrics stay open, as vLLM's
st, _, b = request(port, "/reset_prefix_cache", method="POST")
assert st == 401  # the reset is not open
print("ok: --api-key")
PY
)"
stop_server INT
pass "serve api"
