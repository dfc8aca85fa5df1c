"""A vLLM-shaped streaming server (stdlib only, 127.0.0.1) that misbehaves on purpose, for
tests/integration/run_client_faults.sh and run_hostile_server.sh (ctest registers only *.sh).

    python3 fault_server.py PORT LOG [BURST_AT_S BURST_S]

Token-id prompts are taken (so the client's probe picks them).

Under the base URL http://127.0.0.1:PORT, requests with max_tokens > 1 cycle through FAULTS
by arrival order (two good answers before each fault); probes (max_tokens 1) are always
served well. From BURST_AT_S after start, for BURST_S seconds, every request gets 503 (an
overload burst). 429s carry "Retry-After: 1" (delta-seconds), the burst's 503s an HTTP-date
2 s ahead. A "liar" stream sends 3 tokens, then a token claiming completion_tokens
2^31 - 1, then a usage-only chunk with the true count (4) and [DONE], then a token and
another [DONE] after it: 3 protocol violations. An "overclaim" stream sends half its
max_tokens as chunks without usage, then a usage-only chunk claiming all max_tokens (issue
22, defect 5): 1 protocol violation, and the request has the half that streamed.

Under the base URL http://127.0.0.1:PORT/mode/NAME every request with max_tokens > 1 gets
the hostile behaviour NAME of MODES below (probes are served well, so the run reaches its
load); under http://127.0.0.1:PORT/all/NAME the probes get it too. /health and /v1/models
answer normally under both. One server serves every mode at once. NAME may carry a tag,
NAME+TAG: the same mode, with its own count for "every" below, so that two runs of one mode
at the same time (the raw and the curl transport) each get every N-th of their own requests.

Every request and what was done to it is appended to LOG as one JSON line: {"n", "fault",
"max_tokens", "tokens_sent", "accept_encoding"} so the test can match the client's records.
Stops by itself after 90 s."""
import email.utils
import gzip
import json
import socket
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ["ok", "ok", "http500", "ok", "ok", "http429", "ok", "ok", "malformed", "ok", "ok",
          "reset", "ok", "ok", "error_event", "ok", "ok", "no_done", "ok", "ok", "stall", "ok",
          "ok", "liar", "ok", "ok", "overclaim"]
START = time.monotonic()
lock = threading.Lock()
count = 0
port, log_path = int(sys.argv[1]), sys.argv[2]
burst_at = float(sys.argv[3]) if len(sys.argv) > 3 else -1
burst_len = float(sys.argv[4]) if len(sys.argv) > 4 else 0
log = open(log_path, "a", buffering=1)

# ---- hostile modes --------------------------------------------------------------------------
# Each mode is a small spec; respond() below turns it into bytes on the wire. Keys:
#   status, reason   the status line (default 200 OK); version "HTTP/1.0" for a 1.0 answer
#   ctype            Content-Type (default text/event-stream; None: no header)
#   location         True: a Location header naming /moved on this server
#   body             what the body holds (BODIES), default "sse": a good stream
#   encoding         gzip | deflate | br: the body compressed, with Content-Encoding
#   framing          chunked (default) | length | close | length-short | length-long |
#                    chunk-bad-size | chunk-no-final | chunk-truncated
#   before           bytes sent before the head (an interim 100 Continue)
#   action           what happens instead of (or inside) an answer: reset-before-head,
#                    close-before-head, reset-after-head, reset-mid-stream, silent,
#                    header-flood, header-huge-line
#   every            only every N-th load request of the mode misbehaves (the rest are "ok")
JSON_ERROR = "json-error"
MODES = {
    "ok": {},
    "http10-close": {"version": "HTTP/1.0", "framing": "close"},
    "continue-100": {"before": b"HTTP/1.1 100 Continue\r\n\r\n"},
    "s202-sse": {"status": 202, "reason": "Accepted"},
    "s206-sse": {"status": 206, "reason": "Partial Content"},
    "s204": {"status": 204, "reason": "No Content", "body": "none"},
    "r301-location-empty": {"status": 301, "reason": "Moved Permanently", "location": True,
                            "body": "empty", "framing": "length"},
    "r302-location-sse": {"status": 302, "reason": "Found", "location": True},
    "r307-empty": {"status": 307, "reason": "Temporary Redirect", "body": "empty",
                   "framing": "length"},
    "r308-html": {"status": 308, "reason": "Permanent Redirect", "body": "html",
                  "ctype": "text/html", "framing": "length"},
    "e400-json": {"status": 400, "reason": "Bad Request", "body": JSON_ERROR},
    "e401-json": {"status": 401, "reason": "Unauthorized", "body": JSON_ERROR},
    "e403-html": {"status": 403, "reason": "Forbidden", "body": "html", "ctype": "text/html"},
    "e404-empty": {"status": 404, "reason": "Not Found", "body": "empty", "framing": "length"},
    "e413-html": {"status": 413, "reason": "Payload Too Large", "body": "html",
                  "ctype": "text/html", "framing": "close"},
    "e429-json": {"status": 429, "reason": "Too Many Requests", "body": JSON_ERROR,
                  "headers": [("Retry-After", "1")]},
    "e500-json": {"status": 500, "reason": "Internal Server Error", "body": JSON_ERROR,
                  "framing": "length"},
    "e502-html": {"status": 502, "reason": "Bad Gateway", "body": "html", "ctype": "text/html",
                  "framing": "length"},
    "e503-empty": {"status": 503, "reason": "Service Unavailable", "body": "empty",
                   "framing": "close"},
    "ctype-json-sse": {"ctype": "application/json"},
    "ctype-missing": {"ctype": None},
    "ctype-json-answer": {"ctype": "application/json", "body": "json-answer",
                          "framing": "length"},
    "gzip": {"encoding": "gzip"},
    "deflate": {"encoding": "deflate", "framing": "length"},
    "br": {"encoding": "br"},
    "chunk-bad-size": {"framing": "chunk-bad-size"},
    "chunk-no-final": {"framing": "chunk-no-final"},
    "chunk-truncated": {"framing": "chunk-truncated"},
    "length-short": {"framing": "length-short"},
    "length-long": {"framing": "length-long"},
    "reset-before-head": {"action": "reset-before-head"},
    "close-before-head": {"action": "close-before-head"},
    "reset-after-head": {"action": "reset-after-head"},
    "reset-mid-stream": {"action": "reset-mid-stream"},
    "silent": {"action": "silent"},
    "header-flood": {"action": "header-flood"},
    "header-huge-line": {"action": "header-huge-line"},
    "junk-lines": {"body": "junk-lines"},
    "non-json-data": {"body": "non-json"},
    "error-event": {"body": "error-event"},
    "bad-utf8": {"body": "bad-utf8"},
    "no-done": {"body": "no-done"},
    "done-twice": {"body": "done-twice"},
    "e500-quarter": {"status": 500, "reason": "Internal Server Error", "body": JSON_ERROR,
                     "every": 4},
}
mode_counts = {}


def record(n, fault, max_tokens, sent, accept_encoding=None):
    with lock:
        log.write(json.dumps({"n": n, "fault": fault, "max_tokens": max_tokens,
                              "tokens_sent": sent, "accept_encoding": accept_encoding}) + "\n")


def token_chunk(i, max_tokens, prompt_tokens, text=" w"):
    finish = "length" if i + 1 >= max_tokens else None
    return {"object": "text_completion",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": i + 1}}


def event(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def body_pieces(kind, max_tokens, prompt_tokens, status):
    """The body as pieces written apart (one SSE event each), and the tokens in them."""
    if kind == "none":
        return [], 0
    if kind == "empty":
        return [], 0
    if kind == JSON_ERROR:
        return [json.dumps({"error": {"message": f"hostile {status} answer",
                                      "type": "invalid_request_error", "code": status}}).encode()], 0
    if kind == "html":
        return [(f"<html>\r\n<head><title>{status} hostile page</title></head>\r\n<body>\r\n"
                 f"<center><h1>{status}</h1></center>\r\n<hr><center>nginx</center>\r\n"
                 f"</body>\r\n</html>\r\n").encode()], 0
    if kind == "json-answer":
        return [json.dumps({"object": "text_completion",
                            "choices": [{"index": 0, "text": " w" * max_tokens,
                                         "finish_reason": "length"}],
                            "usage": {"prompt_tokens": prompt_tokens,
                                      "completion_tokens": max_tokens}}).encode()], 0
    tokens = [event(token_chunk(i, max_tokens, prompt_tokens)) for i in range(max_tokens)]
    usage = event({"object": "text_completion", "choices": [],
                   "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens}})
    done = b"data: [DONE]\n\n"
    if kind == "junk-lines":
        # Lines without "data:" between the events: field names SSE ignores.
        pieces = []
        for t in tokens:
            pieces += [b"hello there\n", b"id: 7\nretry: 10\n\n", t]
        return pieces + [usage, done], max_tokens
    if kind == "non-json":
        return tokens[:2] + [b"data: hello, not json\n\n", usage, done], 2
    if kind == "error-event":
        return tokens[:2] + [event({"error": {"message": "hostile engine died", "code": 500}}),
                             done], 2
    if kind == "bad-utf8":
        return tokens[:2] + [b'data: {"choices":[{"index":0,"text":"\xff\xfe bad"}]}\n\n',
                             usage, done], 2
    if kind == "no-done":
        return tokens + [usage], max_tokens
    if kind == "done-twice":
        return tokens + [usage, done, done], max_tokens
    return tokens + [usage, done], max_tokens


def encode(pieces, encoding):
    """A compressed body is one piece: it cannot be split at event boundaries."""
    data = b"".join(pieces)
    if encoding == "gzip":
        return [gzip.compress(data)]
    if encoding == "deflate":
        return [zlib.compress(data)]
    # No brotli in the standard library: bytes that are not text stand in (the client must
    # refuse by the header, never read them).
    return [b"\x1b\x8f\x01\x00" + zlib.compress(data)]


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, code, obj, extra=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def split_mode(self):
        """(mode name or None, probes too, the path under the base URL)."""
        parts = self.path.split("/", 3)
        if len(parts) >= 3 and parts[1] in ("mode", "all"):
            return parts[2], parts[1] == "all", "/" + (parts[3] if len(parts) > 3 else "")
        return None, False, self.path

    def do_GET(self):
        _, _, path = self.split_mode()
        if path == "/health":
            self.send_json(200, {})
        elif path == "/v1/models":
            self.send_json(200, {"data": [{"id": "fault-model"}]})
        else:
            self.send_json(404, {"error": {"message": "no such path"}})

    def do_POST(self):
        global count
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = req.get("prompt")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        max_tokens = req["max_tokens"]
        with lock:
            count += 1
            n = count
        tagged, probes_too, _ = self.split_mode()
        if tagged is not None:
            return self.hostile(n, tagged, probes_too, max_tokens, prompt_tokens)
        fault = FAULTS[n % len(FAULTS)] if max_tokens > 1 else "ok"
        now = time.monotonic() - START
        if burst_at >= 0 and burst_at <= now < burst_at + burst_len:
            fault = "burst503"
        if fault in ("http500", "http429", "burst503"):
            code = {"http500": 500, "http429": 429, "burst503": 503}[fault]
            record(n, fault, max_tokens, 0)
            ahead = email.utils.formatdate(time.time() + 2, usegmt=True)
            extra = {500: [], 429: [("Retry-After", "1")], 503: [("Retry-After", ahead)]}[code]
            return self.send_json(code, {"error": {"message": f"mock {fault}", "code": code}},
                                  extra)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0

        def send(obj):
            self.wfile.write(event(obj))
            self.wfile.flush()

        # overclaim: half the answer, without usage (its usage chunk claims all, below)
        answer = max_tokens // 2 if fault == "overclaim" else max_tokens
        try:
            while sent < answer:
                chunk = token_chunk(sent, answer, prompt_tokens)
                if fault == "overclaim":
                    del chunk["usage"]
                send(chunk)
                sent += 1
                if sent == 3 and fault not in ("ok", "overclaim"):
                    break
                time.sleep(0.005)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if fault == "liar":
            try:
                send({"object": "text_completion", "choices": [{"index": 0, "text": " w"}],
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2**31 - 1}})
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                pass
        # Logged before the fault's own delay (a stall), so the log is complete when the
        # client has ended.
        record(n, fault, max_tokens, sent)
        try:
            if fault == "malformed":
                self.wfile.write(b"data: {\"choices\": [{\"text\": \"x\"}\n\n")
                self.wfile.flush()
                time.sleep(0.5)
            elif fault == "reset":
                self.reset_on_close()
            elif fault == "error_event":
                send({"error": {"message": "mock engine died", "code": 500}})
                self.wfile.write(b"data: [DONE]\n\n")
            elif fault == "stall":
                time.sleep(3)
            elif fault in ("ok", "liar", "overclaim"):
                claimed = max_tokens if fault == "overclaim" else sent
                send({"object": "text_completion", "choices": [],
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": claimed}})
                self.wfile.write(b"data: [DONE]\n\n")
                if fault == "liar":
                    send({"object": "text_completion", "choices": [{"index": 0, "text": " x"}],
                          "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sent + 1}})
                    self.wfile.write(b"data: [DONE]\n\n")
            # no_done: just close after the tokens
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def reset_on_close(self):
        """The connection ends with a reset (SO_LINGER 0), not a FIN."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with lock:
            RESET.add(self.connection.fileno())

    def write(self, data, pause=0.0):
        self.wfile.write(data)
        self.wfile.flush()
        if pause:
            time.sleep(pause)

    def hostile(self, n, tagged, probes_too, max_tokens, prompt_tokens):
        """tagged: NAME or NAME+TAG, the mode and the key of its "every" count."""
        mode, counter = tagged.split("+", 1)[0], tagged
        self.close_connection = True
        accept = self.headers.get("Accept-Encoding")
        spec = MODES.get(mode)
        if spec is None:
            record(n, "unknown:" + mode, max_tokens, 0, accept)
            return self.send_json(404, {"error": {"message": f"no hostile mode '{mode}'"}})
        if max_tokens <= 1 and not probes_too:
            spec = MODES["ok"]
        elif spec.get("every"):
            with lock:
                mode_counts[counter] = mode_counts.get(counter, 0) + 1
                if mode_counts[counter] % spec["every"] != 0:
                    spec = MODES["ok"]
        try:
            sent = self.respond(spec, max_tokens, prompt_tokens)
        except (BrokenPipeError, ConnectionResetError):
            sent = -1  # the client went away (it refused what it read)
        record(n, mode if spec is MODES.get(mode) else "ok", max_tokens, sent, accept)

    def respond(self, spec, max_tokens, prompt_tokens):
        """Write the answer spec describes; returns the tokens put on the wire."""
        action = spec.get("action")
        if action in ("reset-before-head", "close-before-head"):
            if action == "reset-before-head":
                self.reset_on_close()
            return 0
        if action == "silent":
            # Never answer; wait (bounded) for the client to give up and close.
            self.connection.settimeout(10)
            try:
                self.connection.recv(1)
            except OSError:
                pass
            return 0
        status = spec.get("status", 200)
        version = spec.get("version", "HTTP/1.1")
        pieces, tokens = body_pieces(spec.get("body", "sse"), max_tokens, prompt_tokens, status)
        framing = spec.get("framing", "chunked")
        if spec.get("encoding"):
            pieces = encode(pieces, spec["encoding"])
        head = [f"{version} {status} {spec.get('reason', 'OK')}"]
        ctype = spec.get("ctype", "text/event-stream")
        if ctype:
            head.append(f"Content-Type: {ctype}")
        if spec.get("location"):
            head.append(f"Location: http://127.0.0.1:{port}/moved/v1/completions")
        if spec.get("encoding"):
            head.append(f"Content-Encoding: {spec['encoding']}")
        for k, v in spec.get("headers", []):
            head.append(f"{k}: {v}")
        total = sum(len(p) for p in pieces)
        if spec.get("body") == "none":
            framing = "none"
        elif framing.startswith("chunk"):
            head.append("Transfer-Encoding: chunked")
        elif framing == "length":
            head.append(f"Content-Length: {total}")
        elif framing == "length-short":  # ends in the middle of the third event
            head.append(f"Content-Length: {sum(len(p) for p in pieces[:2]) + 10}")
        elif framing == "length-long":
            head.append(f"Content-Length: {total + 100}")
        head.append("Connection: close")
        if action == "header-flood":  # 20,000 short fields: 1 MB of head
            head += [f"X-Flood-{i}: {'f' * 40}" for i in range(20000)]
        elif action == "header-huge-line":  # one field of 200 kB
            head.append("X-Huge: " + "h" * 200000)
        if spec.get("before"):
            self.write(spec["before"], 0.01)
        self.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if action == "reset-after-head":
            time.sleep(0.02)
            self.reset_on_close()
            return 0
        sent = 0
        for i, piece in enumerate(pieces):
            if action == "reset-mid-stream" and i == 3:
                time.sleep(0.02)
                self.reset_on_close()
                return sent
            if framing.startswith("chunk"):
                if framing == "chunk-bad-size" and i == 2:
                    self.write(b"zz\r\n" + piece + b"\r\n")
                    return sent
                if framing == "chunk-truncated" and i == 2:
                    self.write(b"%x\r\n" % (len(piece) + 50) + piece)
                    return sent
                self.write(b"%x\r\n" % len(piece) + piece + b"\r\n", 0.003)
            else:
                self.write(piece, 0.003)
            sent += piece.startswith(b"data: {\"object\"") and b"\"choices\": [{" in piece
        if framing.startswith("chunk") and framing != "chunk-no-final":
            self.write(b"0\r\n\r\n")
        return sent if tokens else 0


RESET = set()  # descriptors to close with a reset (SO_LINGER 0), not a FIN


class Server(ThreadingHTTPServer):
    # socketserver's backlog is 5: runs side by side would have their SYNs dropped (and
    # resent a second later), a stall that is the test's, not the client's.
    request_queue_size = 128

    def shutdown_request(self, request):
        # socketserver sends a FIN (shutdown SHUT_WR) before closing; a reset must not.
        with lock:
            reset = request.fileno() in RESET
            RESET.discard(request.fileno())
        if reset:
            self.close_request(request)
        else:
            super().shutdown_request(request)


srv = Server(("127.0.0.1", port), H)
srv.daemon_threads = True
threading.Timer(90, srv.shutdown).start()
print("ready", flush=True)
srv.serve_forever()
