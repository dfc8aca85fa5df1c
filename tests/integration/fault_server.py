"""A vLLM-shaped streaming server (stdlib only, 127.0.0.1) that misbehaves on purpose, for
tests/integration/run_client_faults.sh (ctest registers only *.sh).

    python3 fault_server.py PORT LOG [BURST_AT_S BURST_S]

Token-id prompts are taken (so the client's probe picks them). Requests with max_tokens > 1
cycle through the faults below by arrival order; probes (max_tokens 1) are always served
well. From BURST_AT_S after start, for BURST_S seconds, every request gets 503 (an overload
burst). 429s carry "Retry-After: 1" (delta-seconds), the burst's 503s an HTTP-date 2 s
ahead. A "liar" stream sends 3 tokens, then a token claiming completion_tokens 2^31 - 1,
then a usage-only chunk with the true count (4) and [DONE], then a token and another [DONE]
after it: 3 protocol violations. An "overclaim" stream sends half its max_tokens as chunks
without usage, then a usage-only chunk claiming all max_tokens (issue 22, defect 5): 1
protocol violation, and the request has the half that streamed. Every request and what was done to it is appended to LOG
as one JSON line: {"n", "fault", "max_tokens", "tokens_sent"} so the test can match the
client's records. Stops by itself after 90 s."""
import email.utils
import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ["ok", "http500", "http429", "malformed", "reset", "error_event", "no_done", "stall",
          "ok", "liar", "overclaim"]
START = time.monotonic()
lock = threading.Lock()
count = 0
port, log_path = int(sys.argv[1]), sys.argv[2]
burst_at = float(sys.argv[3]) if len(sys.argv) > 3 else -1
burst_len = float(sys.argv[4]) if len(sys.argv) > 4 else 0
log = open(log_path, "a", buffering=1)


def record(n, fault, max_tokens, sent):
    with lock:
        log.write(json.dumps({"n": n, "fault": fault, "max_tokens": max_tokens,
                              "tokens_sent": sent}) + "\n")


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

    def do_GET(self):
        if self.path == "/health":
            self.send_json(200, {})
        elif self.path == "/v1/models":
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
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        # overclaim: half the answer, without usage (its usage chunk claims all, below)
        answer = max_tokens // 2 if fault == "overclaim" else max_tokens
        try:
            while sent < answer:
                finish = "length" if sent + 1 >= answer else None
                chunk = {"object": "text_completion", "choices": [
                    {"index": 0, "text": " w", "finish_reason": finish}]}
                if fault != "overclaim":
                    chunk["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent + 1}
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
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                with lock:
                    RESET.add(self.connection.fileno())
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


RESET = set()  # descriptors to close with a reset (SO_LINGER 0), not a FIN


class Server(ThreadingHTTPServer):
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
