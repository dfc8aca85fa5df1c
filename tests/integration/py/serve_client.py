"""Test client for `stallscope serve` (stdlib only): plain requests, and streams over raw
sockets that stamp every SSE event with time.monotonic_ns() (CLOCK_MONOTONIC on Linux, the
server's clock) right after the bytes carrying it were read.

Used by tests/integration/serve_*.sh; not a test itself (ctest registers only *.sh)."""
import http.client
import json
import os
import socket
import struct
import sys
import threading
import time


def request(port, path, body=None, method="POST", headers=None, timeout=30):
    """One request on its own connection: (status, headers dict, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    out = resp.read()
    status, rh = resp.status, {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    return status, rh, out


def parse_responses(data):
    """Split the bytes a server sent on one connection into responses: a list of (status,
    headers dict (lower-case names), body bytes), and the bytes left over that do not make
    a whole response. Bodies by Content-Length, chunked (de-chunked here), or, without
    either, up to the end (an HTTP/1.0 stream ended by the close)."""
    out = []
    rest = data
    for _ in range(1000):  # bounded: a response per loop
        if b"\r\n\r\n" not in rest:
            break
        head, after = rest.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            break
        status = int(parts[1])
        hdrs = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            hdrs[name.strip().lower()] = value.strip()
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            body, pos = b"", 0
            while True:
                eol = after.find(b"\r\n", pos)
                if eol < 0:
                    return out, rest
                size = int(after[pos:eol].split(b";")[0], 16)
                if len(after) < eol + 2 + size + 2:
                    return out, rest
                body += after[eol + 2:eol + 2 + size]
                pos = eol + 2 + size + 2
                if size == 0:
                    break
            rest = after[pos:]
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"])
            if len(after) < n:
                break
            body, rest = after[:n], after[n:]
        else:
            body, rest = after, b""
        out.append((status, hdrs, body))
    return out, rest


def get_json(port, path, **kw):
    status, _, body = request(port, path, method="GET", **kw)
    return status, json.loads(body) if body else None


class Stream(threading.Thread):
    """A streaming POST over HTTP/1.1 with chunked decoding done here, so the receive time
    of each SSE event is the time of the recv() that completed it."""

    def __init__(self, port, path, body, headers=None, timeout=60, close_after=None,
                 reset=False):
        super().__init__(daemon=True)
        self.port, self.path, self.body = port, path, body
        self.headers = headers or {}
        self.timeout = timeout
        self.close_after = close_after  # disconnect after this many events
        self.reset = reset  # disconnect with a TCP reset (SO_LINGER 0) instead of a FIN
        self.status = None
        self.events = []  # (t_recv_ns, data string)
        self.error = None
        self.raw_ok = True  # chunked framing and SSE framing were valid
        self.done = False  # saw [DONE]

    def run(self):
        try:
            self._run()
        except Exception as exc:  # reported by the test
            self.error = repr(exc)

    def _run(self):
        payload = json.dumps(self.body).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
        )
        for k, v in self.headers.items():
            head += f"{k}: {v}\r\n"
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        sock.sendall(head.encode() + b"\r\n" + payload)
        buf = b""
        while b"\r\n\r\n" not in buf:
            part = sock.recv(65536)
            if not part:
                raise RuntimeError("connection closed before the headers")
            buf += part
        header, buf = buf.split(b"\r\n\r\n", 1)
        lines = header.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
        chunked = hdrs.get("transfer-encoding", "").lower() == "chunked"
        body = b""  # de-chunked bytes not yet split into events
        raw = buf
        t = time.monotonic_ns()
        finished = False
        while True:
            # De-chunk what we have.
            while chunked and raw:
                if b"\r\n" not in raw:
                    break
                size_line, rest = raw.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                if len(rest) < size + 2:
                    break
                if rest[size : size + 2] != b"\r\n":
                    self.raw_ok = False
                body += rest[:size]
                raw = rest[size + 2 :]
                if size == 0:
                    finished = True
                    break
            if not chunked:
                body += raw
                raw = b""
            while b"\n\n" in body:
                event, body = body.split(b"\n\n", 1)
                text = event.decode()
                if not text.startswith("data: ") or "\n" in text:
                    self.raw_ok = False
                data = text[len("data: ") :]
                if data == "[DONE]":
                    self.done = True
                else:
                    self.events.append((t, data))
                if self.close_after is not None and len(self.events) >= self.close_after:
                    if self.reset:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
                    sock.close()
                    return
            if finished:
                break
            part = sock.recv(65536)
            t = time.monotonic_ns()
            if not part:
                break
            raw += part
        if body.strip():
            self.raw_ok = False  # bytes after the last complete event
        sock.close()

    def chunks(self):
        return [(t, json.loads(d)) for t, d in self.events]

    def token_chunks(self):
        """Chunks that carry a token: choices non-empty, not the chat role chunk, not an
        abort marker."""
        out = []
        for t, c in self.chunks():
            if not c.get("choices"):
                continue
            ch = c["choices"][0]
            if "delta" in ch and "role" in ch["delta"]:
                continue
            if ch.get("finish_reason") == "abort":
                continue
            out.append((t, c))
        return out

    def text(self):
        s = ""
        for _, c in self.chunks():
            for ch in c.get("choices", []):
                s += ch.get("text", "") if "text" in ch else ch.get("delta", {}).get("content", "")
        return s

    def usage(self):
        for _, c in self.chunks():
            if not c.get("choices") and "usage" in c:
                return c["usage"]
        return None

    def finish_reason(self):
        for _, c in self.chunks():
            for ch in c.get("choices", []):
                if ch.get("finish_reason"):
                    return ch["finish_reason"]
        return None


def run_all(streams, timeout):
    """Start the streams not started yet; wait for all, at most timeout seconds."""
    for s in streams:
        if s.ident is None:
            s.start()
    deadline = time.monotonic() + timeout
    for s in streams:
        s.join(max(0.0, deadline - time.monotonic()))
    return all(not s.is_alive() for s in streams)


def read_steps(path):
    """steps.csv -> list of dicts of ints. Every row must be whole: the server flushes the
    log at exit, so a short or non-numeric row is an error, not something to skip."""
    rows = []
    with open(path) as f:
        header = f.readline().strip().split(",")
        assert header[:2] == ["step", "t_start_ns"], f"{path}: not a step log: {header}"
        for n, line in enumerate(f, start=2):
            vals = line.strip().split(",")
            assert len(vals) == len(header), f"{path}:{n}: {len(vals)} fields, want {len(header)}"
            try:
                rows.append(dict(zip(header, map(int, vals))))
            except ValueError:
                raise AssertionError(f"{path}:{n}: not integers: {line.strip()!r}") from None
    assert rows, f"{path}: no steps"
    return rows


# The rule a timing test may excuse a slow step by (serve_interference.sh, serve_chunked.sh,
# docs/reference/tests.md quote these numbers): a step may overrun its bound by TOLERANCE_NS; a
# larger overrun is excused only when the engine itself recorded the step that late (its
# late_ns: the executor's own wake-up delay, in the step log) — the overrun minus the
# recorded lateness stays within TOLERANCE_NS — and the overrun is at most EXCUSE_CAP_NS;
# at most 5 % of the steps (rounded down) may be excused.
# When every violation is lateness the engine recorded (over the cap, or on more steps than
# the 1 %) and none is unexplained, the machine held the engine back, not the engine itself:
# check_step_timing raises RecordedLateOnly, the script exits RETRY_EXIT, and the test
# measures once more (once only); the second measurement must pass the same rule.
TOLERANCE_NS = 500_000
EXCUSE_CAP_NS = 10_000_000
EXCUSE_FRACTION = 0.05
RETRY_EXIT = 3


class RecordedLateOnly(AssertionError):
    """The timing rule failed only on lateness the engine recorded itself (see above)."""


def _exit_for_retry(kind, value, tb):
    sys.__excepthook__(kind, value, tb)
    if issubclass(kind, RecordedLateOnly):
        sys.stderr.flush()
        os._exit(RETRY_EXIT)


sys.excepthook = _exit_for_retry


def check_step_timing(steps, bound_ns, what):
    """Apply the rule above to `steps` (step-log rows), each against bound_ns(step) (its own
    modeled_ns, or the longest). Raises AssertionError naming the offending steps; returns
    (number excused, largest overrun in ns) for the test to print."""
    assert steps, f"{what}: no steps to check"
    excused, bad = [], []
    unexplained = False  # a violation the engine's record does not account for
    for st in steps:
        over = st["t_end_ns"] - st["t_start_ns"] - bound_ns(st)
        if over <= TOLERANCE_NS:
            continue
        late = st.get("late_ns")
        if late is None:
            unexplained = True
            bad.append(f"step {st['step']}: {over / 1e6:.3f} ms over, and the log records no "
                       "lateness (no late_ns column)")
        elif over - late > TOLERANCE_NS:
            unexplained = True
            bad.append(f"step {st['step']}: {over / 1e6:.3f} ms over, the engine recorded "
                       f"{late / 1e6:.3f} ms late: {(over - late) / 1e6:.3f} ms unexplained")
        elif over > EXCUSE_CAP_NS:
            bad.append(f"step {st['step']}: {over / 1e6:.3f} ms over (recorded late "
                       f"{late / 1e6:.3f} ms): more than the {EXCUSE_CAP_NS / 1e6:.0f} ms an "
                       "excuse covers")
        else:
            excused.append(st)
    allowed = int(len(steps) * EXCUSE_FRACTION)
    if len(excused) > allowed:
        bad.append(f"{len(excused)} steps over by > {TOLERANCE_NS / 1e6} ms with the engine's "
                   f"record, more than {EXCUSE_FRACTION:.0%} of {len(steps)} ({allowed})")
    if bad:
        kind = AssertionError if unexplained else RecordedLateOnly
        raise kind(f"{what}: " + "; ".join(bad[:6]))
    worst = max(st["t_end_ns"] - st["t_start_ns"] - bound_ns(st) for st in steps)
    return len(excused), worst


def interference_run(port, users=32, prompt_tokens=8000, bg_tokens=600, timeout=120):
    """The lesson in miniature: `users` streaming background requests, and once every one
    of them is streaming, one long prompt (token ids) with 16 answer tokens. Returns
    (background streams, injection stream, injection send time in CLOCK_MONOTONIC ns)."""
    bg = [
        Stream(port, "/v1/completions", {"prompt": [100 + u] * 48, "max_tokens": bg_tokens,
               "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
               "stallscope": {"timestamps": True}})
        for u in range(users)
    ]
    for s in bg:
        s.start()
    deadline = time.monotonic() + timeout / 2
    while time.monotonic() < deadline and not all(len(s.events) >= 20 for s in bg):
        time.sleep(0.01)
    assert all(len(s.events) >= 20 for s in bg), "background streams did not start"
    inject = Stream(port, "/v1/completions", {"prompt": list(range(1, prompt_tokens + 1)),
                    "max_tokens": 16, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True},
                    "stallscope": {"timestamps": True}})
    t_send = time.monotonic_ns()
    inject.start()
    assert run_all(bg + [inject], timeout), "streams did not finish"
    for s in bg + [inject]:
        assert s.error is None and s.status == 200 and s.raw_ok and s.done, (s.error, s.status)
    return bg, inject, t_send


def stamps(stream):
    """[(t_recv_ns, emit_ns, step)] of a stream's token chunks."""
    return [(t, c["stallscope"]["emit_ns"], c["stallscope"]["step"])
            for t, c in stream.token_chunks()]
