"""A vLLM-shaped streaming server (stdlib only) on 127.0.0.1 that stops by itself after 60 s,
for tests/integration/run_faults.sh (ctest registers only *.sh).

    python3 text_prompt_server.py PORT [--drift-after N]

It takes text prompts only (a token-id prompt is refused with 400, so the client calibrates
text against usage), wants "Authorization: Bearer sk-mock", counts 12 prompt tokens of chat
overhead (1 for completions) plus two per word, sends now and then two tokens in one event,
and after the first three requests stops sending mid-answer on every fifth. With
--drift-after N, from the (N + 1)th request on it counts three tokens a word: a tokenizer the
client's calibration (its first requests) no longer describes."""
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
count = 0
lock = threading.Lock()
DRIFT_AFTER = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--drift-after" else None
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health": self.send_json(200, {})
        elif self.path == "/v1/models": self.send_json(200, {"data": [{"id": "mock-model"}]})
        else: self.send_json(404, {"error": {"message": "no such path"}})
    def do_POST(self):
        global count
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer sk-mock":
            return self.send_json(401, {"error": {"message": "bad key"}})
        if self.path == "/v1/chat/completions":
            prompt = req["messages"][0]["content"]; overhead = 12
        else:
            prompt = req["prompt"]; overhead = 1
        if not isinstance(prompt, str):
            return self.send_json(400, {"error": {"message": "prompt must be a string"}})
        with lock:
            count += 1; n = count
        per_word = 3 if DRIFT_AFTER is not None and n > DRIFT_AFTER else 2
        prompt_tokens = overhead + len(prompt.split()) * per_word
        stall = n > 3 and n % 5 == 0  # after the probes: every 5th request stops sending
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        def send(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n"); self.wfile.flush()
        try:
            self.wfile.write(b": keep-alive\n\n")
            send({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                  "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 0}})
            done, i = 0, 0
            while done < req["max_tokens"]:
                k = 2 if i % 7 == 6 else 1   # now and then two tokens in one event
                done = min(req["max_tokens"], done + k); i += 1
                finish = "length" if done >= req["max_tokens"] else None
                send({"object": "chat.completion.chunk",
                      "choices": [{"index": 0, "delta": {"content": " w" * k}, "finish_reason": finish}],
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": done}})
                if stall and i == 3:
                    time.sleep(3); return
                time.sleep(0.01)
            send({"object": "chat.completion.chunk", "choices": [],
                  "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": done}})
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
srv.daemon_threads = True
threading.Timer(60, srv.shutdown).start()
print("ready", flush=True)
srv.serve_forever()
