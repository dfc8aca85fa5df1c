#!/usr/bin/env bash
# stallscope serve: request framing is strict (RFC 9112; src/server/reqframe.h), and every
# refusal is an OpenAI-style JSON error. Over raw sockets, on one connection each:
#  - request smuggling: two different Content-Length (CL 31 + CL 67 + body + GET /metrics
#    must not be two 200s), "Content-Length: +N", Content-Length with Transfer-Encoding,
#    a TRACE whose body hides a second request, obs-fold, a bare LF, a space before a colon
#    (hostile.smuggling);
#  - an unknown version (HTTP/1.2, 2.0) is 505, an unknown method 501, Expect other than
#    100-continue 417, a 100 kB header or 101 fields 431, a 100 kB URI 414, a body over the
#    limit or over 4 x the limit 413 (hostile.oversized);
#  - each refusal: status as listed, JSON {"error": {"message", "type", "code" == status}},
#    "Connection: close", the connection closed, nothing answered after it; requests
#    pipelined before it answered first, in order;
#  - accepted: chunk extensions (";ext=1"), trailers, Expect: 100-continue, absolute-form;
#  - HTTP/1.0 streaming, with and without "Connection: keep-alive": 200, no Content-Length,
#    no chunking, the whole SSE stream to [DONE], then the server closes; curl -0 too.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

start_server framing --max-body-size 65536 --max-model-len 8192
py "$(cat <<'PY'
import json, os, time
from hostile import OK, oversized, post, raw, smuggling
from serve_client import parse_responses
port = int(os.environ["PORT"])

failures = smuggling(port, verbose=True)
# Heads and bodies over the limits: exact statuses, JSON errors (evhttp's HTML 413 before).
over = oversized(port)
failures += over
if not over:
    print("ok: oversized: 100 kB header 431, 20,000 headers 431, 100 kB URI 414, bodies over "
          "the limit and over 4 x the limit 413, Content-Length 10^12 413, -5 400, 2^64-1 "
          "chunk 413")

# Expect: 100-continue: the head alone gets "100 Continue", then the body its answer.
import socket
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
          b"Content-Length: %d\r\n\r\n" % len(OK))
interim = s.recv(4096)
assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
s.sendall(OK)
data = b""
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    got, rest = parse_responses(data)
    if got:
        break
    data += s.recv(65536)
s.close()
if [st for st, _, _ in got] == [200]:
    print("ok: Expect: 100-continue: 100 Continue, then 200")
else:
    failures.append(f"Expect: 100-continue: {data[:200]!r}")

# HTTP/1.0 streaming: no chunks in 1.0, so the stream ends with the connection.
def http10_stream(keep_alive):
    extra = b"Connection: keep-alive\r\n" if keep_alive else b""
    body = b'{"prompt": "hi", "max_tokens": 30, "ignore_eos": true, "stream": true}'
    resp, closed = raw(port, post("/v1/completions", body, headers=extra, version=b"HTTP/1.0"),
                       wait=10)
    got, rest = parse_responses(resp)
    assert len(got) == 1 and not rest, (got, rest)
    st, hdrs, stream = got[0]
    assert st == 200 and resp.startswith(b"HTTP/1.0 200"), resp[:100]
    assert "content-length" not in hdrs and "transfer-encoding" not in hdrs, hdrs
    assert hdrs.get("connection", "close").lower() != "keep-alive", hdrs
    events = [e for e in stream.decode().split("\n\n") if e]
    assert events and events[-1] == "data: [DONE]" and len(events) == 31, events[-3:]
    assert all(json.loads(e[6:])["choices"] for e in events[:-1])
    assert closed is not None, "the server did not close after [DONE]"
    print(f"ok: HTTP/1.0 stream{' (keep-alive asked)' if keep_alive else ''}: 200, no "
          f"Content-Length, 30 chunks + [DONE], closed {closed:.2f} s after the request")

for keep_alive in (True, False):
    try:
        http10_stream(keep_alive)
    except AssertionError as exc:
        failures.append(f"HTTP/1.0 stream (keep-alive {keep_alive}): {exc}")
assert not failures, "\n".join(failures)
PY
)"

# The same with curl -0 (HTTP/1.0): before, it got 200 and 0 bytes.
if command -v curl >/dev/null 2>&1; then
  curl -0 -sS -N --max-time 20 -H 'Connection: keep-alive' "http://127.0.0.1:$PORT/v1/completions" \
    -H 'Content-Type: application/json' \
    -d '{"prompt":"hi","max_tokens":12,"ignore_eos":true,"stream":true}' >"$DIR/curl0.sse"
  n=$(grep -c '^data: {' "$DIR/curl0.sse" || true)
  tail -c 16 "$DIR/curl0.sse" | grep -q 'data: \[DONE\]' || fail "curl -0: no [DONE] ($(wc -c <"$DIR/curl0.sse") bytes)"
  [ "$n" = 12 ] || fail "curl -0: $n chunks, want 12"
  pass "curl -0: 12 chunks and [DONE]"
else
  echo "note: no curl; HTTP/1.0 checked over raw sockets only"
fi
stop_server TERM
pass "serve framing"
