#!/usr/bin/env bash
# stallscope serve: graceful shutdown (SIGTERM) ends as soon as the live work is done and
# tells every client what happened.
#  1. A non-streaming request cut by shutdown gets 503, Retry-After and an OpenAI-style JSON
#     error (not 200 with a partial answer); a stream cut at the same time ends with
#     finish_reason "abort" and [DONE]; the server exits 0 well inside its 5 s grace.
#  2. Non-streaming clients that left with a TCP reset (their answers can never be written)
#     do not hold the shutdown: with three such clients gone, SIGTERM to exit < 1.5 s
#     (before: the full 5 s grace, a reply counted as "being written" forever).
#  3. Idle: SIGTERM to exit < 1.5 s.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

# sigterm_and_time: SIGTERM the server, wait (<= 10 s) until it has exited, print seconds.
sigterm_and_time() {
  py "$(cat <<'PY'
import os, signal, time
pid = int(os.environ["SERVER_PID"])
def exited():
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
t0 = time.monotonic()
os.kill(pid, signal.SIGTERM)
while not exited() and time.monotonic() - t0 < 10:
    time.sleep(0.01)
print(f"{time.monotonic() - t0:.3f}")
PY
)"
}

# ---- 1. cut by shutdown ------------------------------------------------------------------
start_server cut
py "$(cat <<'PY'
import json, os, signal, threading, time
from serve_client import Stream, request
port, pid = int(os.environ["PORT"]), int(os.environ["SERVER_PID"])
answers = []
def whole():
    answers.append(request(port, "/v1/completions", {"prompt": "go", "max_tokens": 4000,
                                                     "ignore_eos": True}, timeout=20))
t = threading.Thread(target=whole, daemon=True)
t.start()
stream = Stream(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}],
                "max_tokens": 4000, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}, timeout=20)
stream.start()
deadline = time.monotonic() + 10
while time.monotonic() < deadline and len(stream.events) < 20:
    time.sleep(0.01)
assert len(stream.events) >= 20, "the stream did not start"
t0 = time.monotonic()
os.kill(pid, signal.SIGTERM)
t.join(15)
stream.join(15)
assert not t.is_alive() and not stream.is_alive(), "a client still waiting 15 s after SIGTERM"
status, headers, body = answers[0]
err = json.loads(body)["error"] if body else {}
assert status == 503, f"non-streaming request cut by shutdown: {status} {body[:200]!r}"
assert headers.get("retry-after") == "1", headers
assert err.get("code") == 503 and err.get("type") == "server_error" and err.get("message"), err
assert headers.get("content-type", "").startswith("application/json"), headers
print(f"ok: non-streaming request cut by shutdown: 503, Retry-After 1: {err['message']}")
assert stream.status == 200 and stream.done and stream.raw_ok, (stream.status, stream.error)
assert stream.finish_reason() == "abort", stream.finish_reason()
usage = stream.usage()
assert usage and usage["completion_tokens"] == len(stream.token_chunks()), usage
print(f"ok: the stream cut at the same time ended with abort, usage and [DONE] "
      f"({usage['completion_tokens']} tokens)")
PY
)"
wait_server SIGTERM

# ---- 2. clients gone with a reset --------------------------------------------------------
start_server reset
py "$(cat <<'PY'
import json, os, socket, struct, time
from hostile import post
port = int(os.environ["PORT"])
socks = []
for _ in range(3):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(post("/v1/completions", {"prompt": "go", "max_tokens": 4000, "ignore_eos": True}))
    socks.append(s)
time.sleep(0.3)
for s in socks:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
# The server notices within its 100 ms peek, cancels, and fails to write the answers.
time.sleep(0.5)
print("ok: three non-streaming clients left with a reset")
PY
)"
secs=$(sigterm_and_time)
echo "SIGTERM to exit with three reset clients gone: $secs s"
python3 -c "import sys; sys.exit(0 if float('$secs') < 1.5 else 1)" ||
  fail "shutdown took $secs s after non-streaming clients left with a reset (want < 1.5 s; the grace is 5 s)"
wait_server SIGTERM

# ---- 3. idle -----------------------------------------------------------------------------
start_server idle
secs=$(sigterm_and_time)
echo "SIGTERM to exit, idle: $secs s"
python3 -c "import sys; sys.exit(0 if float('$secs') < 1.5 else 1)" || fail "idle shutdown took $secs s"
wait_server SIGTERM
pass "serve shutdown"
