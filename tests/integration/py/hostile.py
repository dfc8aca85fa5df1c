"""Hostile clients for `stallscope serve` (stdlib only, 127.0.0.1 only, every wait bounded).

Used by tests/integration/serve_hostile.sh (ctest registers only *.sh). Each attack returns
a list of problems (empty: the server behaved); `legit_users` runs well-behaved streaming
users alongside and checks every answer they get."""
import json
import random
import socket
import struct
import threading
import time

from serve_client import Stream, parse_responses, request

HOST = "127.0.0.1"


def raw(port, data, wait=5.0, shut=False, rst=False):
    """Send data on a fresh connection; read until the server closes or `wait` passes.
    Returns (bytes received, seconds until close or None when still open)."""
    s = socket.create_connection((HOST, port), timeout=wait)
    t0 = time.monotonic()
    out = b""
    closed = None
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        s.settimeout(wait)
        while True:
            part = s.recv(65536)
            if not part:
                closed = time.monotonic() - t0
                break
            out += part
            if time.monotonic() - t0 > wait:
                break
    except socket.timeout:
        pass
    except OSError:
        closed = time.monotonic() - t0  # reset by the server: closed too
    finally:
        if rst:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    return out, closed


def status_of(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def metrics(port):
    _, _, b = request(port, "/metrics", method="GET", timeout=10)
    vals = {}
    for line in b.decode().splitlines():
        if line and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            vals[name.split("{")[0]] = float(v)
    return vals


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def post(path, body, extra=b"", headers=b"", version=b"HTTP/1.1"):
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {path} ".encode() + version + b"\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n" + headers
            + b"Content-Length: %d\r\n\r\n" % len(payload) + payload + extra)


OK = b'{"prompt": "hi", "max_tokens": 2}'


def refusal_problems(name, got):
    """Every error answer in `got` (parse_responses) must be an OpenAI-style JSON error
    (code == status) and, when it refuses the request's framing, close the connection."""
    problems = []
    for st, hdrs, body in got:
        if st < 400:
            continue
        try:
            err = json.loads(body)["error"]
            assert err["code"] == st and isinstance(err["type"], str) and err["message"]
            assert hdrs.get("content-type", "").startswith("application/json")
        except Exception:  # noqa: BLE001 - reported
            problems.append(f"{name}: {st} is not an OpenAI-style JSON error: {body[:100]!r}")
            continue
        if st != 405 and hdrs.get("connection", "").lower() != "close":
            problems.append(f"{name}: {st} without Connection: close")
    return problems


# ---- legitimate load ------------------------------------------------------------------------

class LegitUsers:
    """`users` closed-loop streaming users (both endpoints) until stop(); every answer must be
    complete: 200, SSE framing intact, [DONE], usage == tokens streamed == max_tokens."""

    def __init__(self, port, users=6, seed=1):
        self.port, self.users = port, users
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.done = 0
        self.tokens = 0
        self.problems = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._user, args=(u,), daemon=True)
                        for u in range(users)]

    def start(self):
        for t in self.threads:
            t.start()

    def _user(self, u):
        k = 0
        while not self.stopping.is_set():
            with self.lock:
                n = self.rng.randint(20, 120)
            chat = (u + k) % 2 == 1
            body = {"max_tokens": n, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            if chat:
                body["messages"] = [{"role": "user", "content": f"user {u} turn {k}"}]
            else:
                body["prompt"] = [100 + u + k % 50] * 24
            s = Stream(self.port, "/v1/chat/completions" if chat else "/v1/completions", body,
                       timeout=60)
            s.run()  # in this thread
            k += 1
            got = len(s.token_chunks())
            usage = s.usage() or {}
            ok = (s.error is None and s.status == 200 and s.raw_ok and s.done
                  and usage.get("completion_tokens") == got == n
                  and s.finish_reason() == "length")
            with self.lock:
                if ok:
                    self.done += 1
                    self.tokens += got
                else:
                    self.problems.append(f"user {u} request {k}: status {s.status}, error "
                                         f"{s.error}, done {s.done}, {got}/{n} tokens, "
                                         f"usage {usage}")

    def stop(self, timeout=60):
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.problems.append("a legitimate user did not finish")
        return self.problems


# ---- attacks --------------------------------------------------------------------------------

def slowloris(port, read_timeout_s, conns=20, body=False):
    """Each connection sends one byte a second (a request line and headers that never end,
    or complete headers and then a body at a byte a second): the server must close it about
    read_timeout_s after it opened, without answering 200."""
    problems = []
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n" if body
            else b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    results = [None] * conns

    def one(i):
        s = socket.create_connection((HOST, port), timeout=5)
        t0 = time.monotonic()
        closed, got = None, b""
        try:
            if body:
                s.sendall(head)  # headers at once, then the body drips
            s.setblocking(False)
            sent = 0
            limit = t0 + read_timeout_s + 6
            while time.monotonic() < limit:
                try:
                    part = s.recv(4096)
                    if not part:
                        closed = time.monotonic() - t0
                        break
                    got += part
                except BlockingIOError:
                    pass
                except OSError:
                    closed = time.monotonic() - t0
                    break
                try:
                    s.send(b"a")
                    sent += 1
                except BlockingIOError:
                    pass
                except OSError:
                    closed = time.monotonic() - t0
                    break
                time.sleep(1.0)
        finally:
            s.close()
        results[i] = (closed, got)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(read_timeout_s + 15)
    for i, r in enumerate(results):
        if r is None:
            problems.append(f"slowloris {i}: thread did not end")
            continue
        closed, got = r
        if closed is None:
            problems.append(f"slowloris {i}: still open after {read_timeout_s + 6:.0f} s")
        elif closed > read_timeout_s + 3:
            problems.append(f"slowloris {i}: closed only after {closed:.1f} s")
        if status_of(got) == 200:
            problems.append(f"slowloris {i}: answered 200")
    return problems


def oversized(port):
    """Headers and bodies over the limits: the status below with an OpenAI-style JSON error
    (before issue 15 evhttp answered several of these itself, with an HTML page), or a
    close, quickly. The server's limits: 64 KiB of head (reqframe.h), --max-body-size
    64 KiB here."""
    cases = [
        ("a 100 KB header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000
         + b"\r\n\r\n", {431}),
        ("20,000 headers", b"GET /health HTTP/1.1\r\n"
         + b"".join(b"X-%d: v\r\n" % i for i in range(20000)) + b"\r\n", {431}),
        ("a 100 KB URI", b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {414}),
        ("a 100 KB body (over the limit)", post("/v1/completions", b"a" * 100000), {413}),
        ("a 1 MB body (over 4 x the limit)", post("/v1/completions", b"a" * 1000000), {413}),
        ("Content-Length 10^12, no body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 1000000000000\r\n\r\n{", {413}),
        ("a negative Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: -5\r\n\r\n{}", {400}),
        ("a chunk of 2^64-1 bytes", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc", {413}),
    ]
    problems = []
    for name, data, want in cases:
        try:
            resp, closed = raw(port, data, wait=5, shut=False)
        except OSError as exc:  # the server may reset while we still send: also a refusal
            resp, closed = b"", 0.0
            if not isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                problems.append(f"{name}: {exc!r}")
        st = status_of(resp)
        if st is None and closed is None:
            problems.append(f"{name}: neither an answer nor a close")
        elif st is not None and st not in want:
            problems.append(f"{name}: status {st}, want one of {sorted(want)}")
        problems += refusal_problems(name, parse_responses(resp)[0])
    return problems


def churn(port, total=2000, batch=250, seed=2):
    """Open `total` connections in batches and drop them: closed at once, after half a
    request line, after a whole streaming request (so the engine gets work to cancel), or
    with a reset (SO_LINGER 0). Every connect must succeed."""
    rng = random.Random(seed)
    stream_req = post("/v1/completions", {"prompt": [5] * 16, "max_tokens": 400,
                                          "ignore_eos": True, "stream": True})
    problems = []
    failures = 0
    for start in range(0, total, batch):
        socks = []
        for i in range(start, min(total, start + batch)):
            try:
                s = socket.create_connection((HOST, port), timeout=10)
            except OSError as exc:
                failures += 1
                if failures <= 3:
                    problems.append(f"churn connect {i}: {exc!r}")
                continue
            kind = rng.randrange(4)
            try:
                if kind == 1:
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHo")
                elif kind >= 2:
                    s.sendall(stream_req)
                if kind == 3:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            socks.append(s)
        time.sleep(0.05)
        for s in socks:
            s.close()
    if failures:
        problems.append(f"churn: {failures} of {total} connects failed")
    return problems


def disconnects(port, n=40, seed=3, max_tokens=4000):
    """Streams that leave at a random point (after 1..40 events), half of them with a reset.
    They must have been streaming normally until they left."""
    rng = random.Random(seed)
    problems = []

    streams = []
    for i in range(n):
        s = Stream(port, "/v1/completions" if i % 2 else "/v1/chat/completions",
                   {"prompt": [9] * 20, "messages": [{"role": "user", "content": "x"}],
                    "max_tokens": max_tokens, "ignore_eos": True, "stream": True},
                   timeout=30, close_after=rng.randint(1, 40), reset=i % 4 < 2)
        streams.append(s)
    for s in streams:
        s.start()
    deadline = time.monotonic() + 60
    for s in streams:
        s.join(max(0.0, deadline - time.monotonic()))
    for i, s in enumerate(streams):
        if s.is_alive():
            problems.append(f"leaver {i}: still running")
        elif s.error or s.status != 200 or len(s.events) != s.close_after:
            problems.append(f"leaver {i}: status {s.status}, error {s.error}, "
                            f"{len(s.events)}/{s.close_after} events")
    return problems


def pipelined(port):
    """Valid requests followed by garbage on one connection: the valid ones are answered in
    order, then the garbage gets a 400 (or a close), never a crash. Also a streaming request
    with garbage behind it: the stream completes first."""
    problems = []
    ok = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    resp, closed = raw(port, ok * 3 + b"\x00\xffgarbage \x01\x02\r\n\r\n" + ok, wait=5)
    if resp.count(b"HTTP/1.1 200 OK") != 3:
        problems.append(f"pipelined: {resp.count(b'HTTP/1.1 200 OK')} answers before the "
                        "garbage, want 3")
    if b"400 Bad Request" not in resp and closed is None:
        problems.append("pipelined: garbage neither refused nor the connection closed")
    problems += refusal_problems("pipelined garbage", parse_responses(resp)[0])
    stream = post("/v1/completions", {"prompt": "hi", "max_tokens": 30, "ignore_eos": True,
                                      "stream": True}, extra=b"\xde\xad\xbe\xef" * 64)
    resp, closed = raw(port, stream, wait=10)
    if b"data: [DONE]" not in resp or resp.count(b'"text"') != 30:
        problems.append("pipelined: the stream ahead of the garbage did not complete")
    for name, data in [("binary noise", bytes(range(256)) * 16),
                       ("HTTP/0.9", b"GET /\r\n\r\n"),
                       ("a NUL in a header", b"GET /health HTTP/1.1\r\nHost: a\x00b\r\n\r\n"),
                       ("a bare LF request", b"GET /health HTTP/1.1\nHost: x\n\n"),
                       ("an unknown method", b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n")]:
        resp, closed = raw(port, data, wait=5)
        st = status_of(resp)
        # 501 Not Implemented is the right answer to an unknown method; other 5xx are not.
        if st is not None and st >= 500 and not (st == 501 and b"BREW" in data):
            problems.append(f"{name}: status {st}")
        if st is None and closed is None:
            problems.append(f"{name}: neither an answer nor a close")
        problems += refusal_problems(name, parse_responses(resp)[0])
    return problems


def bad_bodies(port):
    """Invalid UTF-8, deep nesting, numbers out of range: every one a 4xx with an
    OpenAI-style JSON error (code == status), never a 5xx."""
    C, CH = "/v1/completions", "/v1/chat/completions"
    cases = [
        (C, b'{"prompt": "\xff\xfe"}'),
        (C, b'{"prompt": "overlong \xc0\x80 nul"}'),
        (C, b'{"prompt": "cut \xe2\x82"}'),
        (C, b'{"prompt": "surrogate \xed\xa0\x80"}'),
        (C, b'{"prompt": "\\ud800 lone surrogate escape"}'),
        (C, b'{"prompt": "bad escape \\\xde\x99"}'),
        (CH, b'{"messages": [{"role": "user", "content": "\xf5\x80\x80\x80"}]}'),
        (C, b'{"prompt": "hi", "stop": ["\xc3"]}'),
        (C, b'{"model": "\xe6\x97\xa5\xe6\x9c\xac' * 30 + b'", "prompt": "x"}'),
        (C, b"[" * 60000 + b"]" * 60000),
        (C, b'{"prompt": ' + b"[" * 30000 + b"]" * 30000 + b"}"),
        (C, b'{"prompt": "x", "stream_options": ' + b'{"a":' * 3000 + b"1" + b"}" * 3001),
        (C, b'{"prompt": "hi", "max_tokens": 1e400}'),
        (C, b'{"prompt": "hi", "max_tokens": 99999999999999999999}'),
        (C, b'{"prompt": "hi", "max_tokens": -9223372036854775809}'),
        (C, b'{"prompt": "hi", "max_tokens": 2147483648}'),
        (C, b'{"prompt": "hi", "max_tokens": 4294967297}'),
        (C, b'{"prompt": "hi", "max_tokens": -1}'),
        (C, b'{"prompt": "hi", "temperature": 1e400}'),
        (C, b'{"prompt": "hi", "temperature": -1e-300}'),
        (C, b'{"prompt": "hi", "temperature": NaN}'),
        (C, b'{"prompt": "hi", "seed": 18446744073709551616}'),
        (C, b'{"prompt": "hi", "min_tokens": 9223372036854775807}'),
        (C, b'{"prompt": "hi", "n": 0}'),
        (C, b'{"prompt": [2147483648]}'),
        (C, b'{"prompt": [-1]}'),
        (C, b'{"prompt": [1.5]}'),
        (C, json.dumps({"prompt": list(range(70000 // 7))}).encode()),
        (CH, b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}'),
        (C, b'{"prompt": "hi", "stop": ' + json.dumps(["s"] * 17).encode() + b"}"),
        (C, b'{"prompt": "hi", "stop": "' + b"x" * 1025 + b'"}'),
        (C, b'{"prompt": "hi", "prompt": [1], "prompt": {}}'),
        (C, b'{"prompt": "\\u0000"}'),
    ]
    problems = []
    for path, body in cases:
        try:
            st, _, b = request(port, path, body, timeout=10)
        except Exception as exc:  # noqa: BLE001 - reported as a problem
            problems.append(f"{body[:40]!r}: {exc!r}")
            continue
        if not 400 <= st < 500:
            problems.append(f"{body[:40]!r}: status {st}: {b[:120]!r}")
            continue
        try:
            err = json.loads(b)["error"]
            assert err["code"] == st and isinstance(err["message"], str) and err["message"]
        except Exception:  # noqa: BLE001
            problems.append(f"{body[:40]!r}: not an OpenAI-style error: {b[:120]!r}")
    return problems


def smuggling(port, verbose=False):
    """Request smuggling and framing the server must refuse (RFC 9112; reqframe.h), and
    framing it must accept, each on its own connection. Every refusal: the status listed,
    an OpenAI-style JSON error (code == status), "Connection: close", the connection closed,
    nothing answered after it; requests pipelined before it answered first, in order; a
    request hidden in another's body never answered."""
    GET = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    METRICS = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    HIDDEN = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"

    # (name, bytes sent, statuses expected in order; the last one refuses and closes if >= 400)
    cases = [
        ("two different Content-Length",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: 67\r\n\r\n"
         % len(OK) + OK + METRICS, [400]),
        ("the same Content-Length twice",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n"
         % (len(OK), len(OK)) + OK, [400]),
        ("Content-Length: +N",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +%d\r\n\r\n" % len(OK) + OK,
         [400]),
        ("Content-Length and Transfer-Encoding",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + METRICS, [400]),
        ("Transfer-Encoding: gzip", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: gzip\r\n\r\n" + METRICS, [400]),
        ("Transfer-Encoding in HTTP/1.0", b"POST /v1/completions HTTP/1.0\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", [400]),
        ("HTTP/1.2", b"GET /health HTTP/1.2\r\nHost: x\r\n\r\n", [505]),
        ("HTTP/2.0 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", [505]),
        ("an unknown method", b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", [501]),
        ("Expect: other", post("/v1/completions", OK, headers=b"Expect: 200-ok\r\n"), [417]),
        ("obs-fold", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", [400]),
        ("a space before the colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", [400]),
        ("a bare LF", b"GET /health HTTP/1.1\nHost: x\n\n", [400]),
        ("a NUL in a header", b"GET /health HTTP/1.1\r\nHost: a\x00b\r\n\r\n", [400]),
        ("HTTP/1.1 without Host", b"GET /health HTTP/1.1\r\n\r\n", [400]),
        ("two Host fields", b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", [400]),
        ("a bad chunk size", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + OK, [400]),
        ("chunk data without its CRLF", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(OK) + OK + b"XX0\r\n\r\n", [400]),
        ("101 header fields", b"GET /health HTTP/1.1\r\nHost: x\r\n"
         + b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"\r\n", [431]),
        ("a chunked body over the limit", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n" + b"8000\r\n" + b"a" * 0x8000 + b"\r\n"
         + b"8001\r\n" + b"a" * 0x8001 + b"\r\n0\r\n\r\n", [413]),
        # Pipelined: the good ones first, in order, then the refusal.
        ("two good requests, then a smuggled one", GET + GET
         + b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}"
         + METRICS, [200, 200, 400]),
        # Accepted.
        ("a GET whose body hides a request", b"GET /health HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN + GET, [200, 200]),
        ("a TRACE whose body hides a request", b"TRACE /health HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN + GET, [405, 200]),
        ("a chunk extension", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n" % len(OK) + OK
         + b"\r\n0;done\r\nX-Trailer: t\r\n\r\n" + GET, [200, 200]),
        ("absolute-form", b"GET http://127.0.0.1/health HTTP/1.1\r\nHost: x\r\n\r\n", [200]),
        ("empty lines before a request", b"\r\n\r\n" + GET, [200]),
    ]
    failures = []
    for name, data, want in cases:
        resp, closed = raw(port, data, wait=3 if want[-1] >= 400 else 1)
        got, rest = parse_responses(resp)
        statuses = [st for st, _, _ in got]
        why = []
        if statuses != want:
            why.append(f"statuses {statuses}, want {want}")
        if rest:
            why.append(f"{len(rest)} bytes after the last response: {rest[:80]!r}")
        why += refusal_problems(name, got)
        if want[-1] >= 400 and closed is None:
            why.append("connection still open 3 s after the refusal")
        if want[-1] == 200 and statuses[-1:] == [200] and closed is not None:
            why.append("keep-alive connection closed")
        if any(b"vllm:" in body for _, _, body in got):
            why.append("a request smuggled inside another was answered (/metrics)")
        if why:
            failures.append(f"{name}: " + "; ".join(why))
        elif verbose:
            last = json.loads(got[-1][2])["error"]["message"] if want[-1] >= 400 else "ok"
            print(f"ok: {name}: {statuses} ({last})")
    return failures
