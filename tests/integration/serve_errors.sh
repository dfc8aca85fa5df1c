#!/usr/bin/env bash
# stallscope serve: every bad input gets an OpenAI-style {"error": {"message", "type",
# "code"}} with the right status, while a concurrent stream keeps going untouched.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

# A small max-model-len and body limit so the limits are cheap to reach.
start_server errors --policy mixed --max-num-batched-tokens 2048 --max-model-len 4096 \
  --max-body-size 65536
py "$(cat <<'PY'
import json, os, time
from hostile import raw, refusal_problems
from serve_client import Stream, parse_responses, request
port = int(os.environ["PORT"])

bg = Stream(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}],
            "max_tokens": 600, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}})
bg.start()
time.sleep(0.3)

def expect(status, path, body, method="POST", headers=None, why=""):
    st, h, b = request(port, path, body, method=method, headers=headers)
    assert st == status, f"{why}: status {st}, wanted {status}: {b[:300]!r}"
    err = json.loads(b)["error"]
    assert isinstance(err["message"], str) and err["message"], why
    assert isinstance(err["type"], str) and err["code"] == status, (why, err)
    assert h["content-type"].startswith("application/json"), why
    print(f"ok: {status} {why}: {err['message'][:110]}")
    return err

C, CH = "/v1/completions", "/v1/chat/completions"
expect(400, C, b'{"prompt": "hi", "max_tokens": 3', why="malformed JSON")
expect(400, C, b'\xff\xfe{}', why="not UTF-8")
expect(400, C, b'[1, 2, 3]', why="body not an object")
expect(400, C, b'', why="empty body")
expect(400, C, {"prompt": 42}, why="prompt of the wrong type")
expect(400, C, {"prompt": "hi", "max_tokens": "ten"}, why="max_tokens of the wrong type")
expect(400, C, {"prompt": "hi", "max_tokens": 2.5}, why="max_tokens not an integer")
expect(400, C, {"prompt": "hi", "stream": "yes"}, why="stream of the wrong type")
expect(400, C, {"prompt": "hi", "temperature": "hot"}, why="temperature of the wrong type")
expect(400, C, {"prompt": "hi", "temperature": -1}, why="negative temperature")
expect(400, C, {"prompt": "hi", "stop": [1]}, why="stop of the wrong type")
expect(400, C, {"prompt": [1, "x"]}, why="token ids of the wrong type")
expect(400, C, {"prompt": [1, 999999999]}, why="token id out of vocabulary")
expect(400, C, {"prompt": ["a", "b"]}, why="batched prompts")
expect(400, C, {"max_tokens": 3}, why="missing prompt")
expect(400, CH, {"max_tokens": 3}, why="missing messages")
expect(400, CH, {"messages": "hi"}, why="messages of the wrong type")
expect(400, CH, {"messages": [{"role": "user", "content": 5}]}, why="content of the wrong type")
expect(400, C, {"prompt": ""}, why="empty prompt")
expect(400, C, {"prompt": list(range(5000))}, why="prompt longer than max_model_len")
err = expect(400, C, {"prompt": list(range(3000)), "max_tokens": 10},
             why="prompt longer than the budget under mixed")
assert "max_num_batched_tokens=2048" in err["message"] and "mixed" in err["message"], err
expect(400, C, {"prompt": "hi", "max_tokens": 0}, why="max_tokens = 0")
expect(400, C, {"prompt": "hi", "max_tokens": -5}, why="max_tokens < 0")
expect(400, C, {"prompt": "hi", "max_tokens": 10**12}, why="max_tokens absurdly large")
expect(400, C, {"prompt": list(range(4000)), "max_tokens": 200},
       why="prompt + max_tokens over max_model_len")
expect(400, CH, {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
       why="max_completion_tokens = 0")
expect(400, C, {"prompt": "hi", "min_tokens": 50, "max_tokens": 10}, why="min_tokens > max_tokens")
expect(400, C, {"prompt": "hi", "stream_options": {"include_usage": True}},
       why="stream_options without stream")
expect(400, C, {"prompt": "hi", "n": 2}, why="n > 1")
expect(404, C, {"model": "gpt-4", "prompt": "hi"}, why="unknown model name")
expect(413, C, {"prompt": "x " * 40000}, why="body over the size limit")
expect(404, "/v1/embeddings", {"input": "x"}, why="unknown path")
expect(404, "/", None, method="GET", why="unknown path /")
expect(405, C, None, method="GET", why="GET on a POST endpoint")
expect(405, "/v1/models", {"x": 1}, why="POST on a GET endpoint")
expect(405, "/health", None, method="DELETE", why="DELETE on /health")

# A client that sends garbage instead of HTTP gets a 400 JSON error and the connection
# closed; nobody else notices.
resp, closed = raw(port, b"\x00\x01garbage\r\n\r\n", wait=5)
got, rest = parse_responses(resp)
assert [st for st, _, _ in got] == [400] and not rest, resp[:300]
assert not refusal_problems("garbage", got), refusal_problems("garbage", got)
assert closed is not None, "the garbage client's connection was left open"
print(f"ok: 400 garbage instead of HTTP: {json.loads(got[0][2])['error']['message']}; closed")

bg.join(60)
assert not bg.is_alive() and bg.error is None and bg.status == 200, (bg.error, bg.status)
assert bg.raw_ok and bg.done and bg.finish_reason() == "length"
assert bg.usage()["completion_tokens"] == len(bg.token_chunks()) == 600
# It really was streaming while the errors went by.
assert bg.token_chunks()[-1][0] - bg.token_chunks()[0][0] > 1e9
print("ok: the concurrent stream got all 600 tokens while the bad requests were refused")
st, _, b = request(port, C, {"prompt": "still fine", "max_tokens": 4})
assert st == 200 and json.loads(b)["usage"]["completion_tokens"] == 4
PY
)"
stop_server TERM
pass "serve errors"
