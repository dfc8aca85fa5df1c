"""A llama.cpp-shaped OpenAI-compatible streaming server (stdlib only, 127.0.0.1), for
tests/integration/run_llamacpp.sh (ctest registers only *.sh).

    python3 llamacpp_server.py PORT STEP_MS

What llama-server's /v1/completions stream looks like, as far as a client can tell: one chunk
per token, {"choices": [{"text", "index", "logprobs", "finish_reason"}], "created", "id",
"model", "object": "text_completion"}, no usage until the last chunk, which carries
finish_reason, "usage" {prompt_tokens, completion_tokens, total_tokens} and "timings"; then
"data: [DONE]". Prompts are token arrays (their length is the prompt's) or text (one token per
word). Tokens leave every STEP_MS per stream; a prompt of P tokens waits P / 100 ms first (a
prefill). Stops by itself after 120 s."""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, step = int(sys.argv[1]), float(sys.argv[2]) / 1000


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "model.gguf", "object": "model",
                                                            "owned_by": "llamacpp"}]})
        else:
            self.send_json(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path != "/v1/completions":
            self.send_json(404, {"error": {"code": 404, "message": "File Not Found"}})
            return
        prompt = req.get("prompt", "")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        max_tokens = int(req.get("max_tokens", 16))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data):
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

        base = {"created": int(time.time()), "id": "chatcmpl-x", "model": "model.gguf",
                "object": "text_completion"}
        t0 = time.monotonic()
        time.sleep(prompt_tokens / 100 / 1000)
        try:
            for i in range(max_tokens):
                last = i == max_tokens - 1
                c = dict(base, choices=[{"text": " tok", "index": 0, "logprobs": None,
                                         "finish_reason": "length" if last else None}])
                if last:
                    c["usage"] = {"completion_tokens": max_tokens, "prompt_tokens": prompt_tokens,
                                  "total_tokens": max_tokens + prompt_tokens}
                    c["timings"] = {"prompt_n": prompt_tokens, "predicted_n": max_tokens,
                                    "predicted_ms": (time.monotonic() - t0) * 1000}
                chunk(json.dumps(c))
                if not last:
                    time.sleep(step)
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
threading.Timer(120, server.shutdown).start()
server.serve_forever()
