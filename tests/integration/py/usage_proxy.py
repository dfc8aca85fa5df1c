"""A proxy that lies about token counts, or delivers a prompt's first token late (stdlib
only, 127.0.0.1 only), for tests/integration/calibrate_target.sh (ctest registers only *.sh).

    python3 usage_proxy.py PORT UPSTREAM_URL [--hold-first MS [N]]

It forwards every request to UPSTREAM_URL (an OpenAI-compatible server, e.g. `stallscope
serve`) and every answer back, byte for byte, except in streamed answers: each SSE event's
usage.completion_tokens is doubled, the text left as it is (issue 22, defect 1: a proxy
that doubles usage in front of a server). Events go out as they come (one write per event),
so the gaps between them are the upstream's.

With --hold-first MS it doubles nothing and instead holds the first event of each streamed
answer that asked for exactly N tokens (2 unless given) while 4 or more other answers stream
(calibrate's interference injection; it asked for 1 token before it asked for 2) for MS
milliseconds; the events after it go out as they come, so one held past the next step
arrives right behind it. No ctest runs it: its own threads add a few ms of jitter to every
stream, so a calibration through it is right most times, not every time (the figures:
docs/results/calibrate-policy-inference.md). Prints "ready" when listening; stops by itself
after 300 s."""
import http.client
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[1])
upstream = urllib.parse.urlsplit(sys.argv[2])
HOLD = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 and sys.argv[3] == "--hold-first" else 0
HOLD_N = int(sys.argv[5]) if HOLD and len(sys.argv) > 5 else 2
streaming = 0  # answers streaming now
lock = threading.Lock()
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def doubled(line):
    """One SSE line with its completion_tokens doubled (any other line unchanged)."""
    if not line.startswith(b"data: {"):
        return line
    chunk = json.loads(line[6:])
    usage = chunk.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        usage["completion_tokens"] *= 2
    return b"data: " + json.dumps(chunk).encode() + b"\n"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def forward(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        up = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP | {"host"}}
        up.request(method, self.path, body=body, headers=headers)
        resp = up.getresponse()
        self.send_response(resp.status)
        streamed = resp.getheader("Content-Type", "").startswith("text/event-stream")
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        if not streamed:
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            up.close()
            return
        self.send_header("Connection", "close")
        self.end_headers()
        global streaming
        with lock:
            injection = HOLD and body and streaming >= 4 and json.loads(body).get("max_tokens") == HOLD_N
            hold = HOLD if injection else 0
            streaming += 1
        event = b""
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                event += line if HOLD else doubled(line)
                if line in (b"\n", b"\r\n"):  # an event is whole: out it goes, in one write
                    if hold and event.startswith(b"data: {"):
                        time.sleep(hold)
                        hold = 0
                    self.wfile.write(event)
                    event = b""
            self.wfile.write(event)
        except (BrokenPipeError, ConnectionResetError):
            pass
        with lock:
            streaming -= 1
        up.close()
        self.close_connection = True

    def do_GET(self):
        self.forward("GET")

    def do_POST(self):
        self.forward("POST")


srv = ThreadingHTTPServer(("127.0.0.1", port), H)
srv.daemon_threads = True
threading.Timer(300, srv.shutdown).start()
print("ready", flush=True)
srv.serve_forever()
