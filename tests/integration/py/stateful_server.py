"""A fake OpenAI-compatible server with one engine loop and state a calibration must see
(stdlib only, 127.0.0.1), for tests/integration/calibrate_state.sh (ctest registers only *.sh).

    python3 stateful_server.py PORT [options]

One engine thread runs steps, as a continuous-batching server does: every running stream gets
a token per step, and a step that admits new prompts prefills them whole (one-step prefill).
A step lasts --step-ms + --seq-ms per stream, plus --token-us per new prompt token:
  --stall-factor F    a prefill beside running streams costs F x what it costs alone (a profile
                      fitted on lone probes then misses the stalls)
  --drift-after N --drift F   every step F x slower once N completions were asked for
  --cache             a prompt seen before (the same tokens) prefills in 1/20 of the time
  --retain SCALE      llama.cpp's unified KV cache: the last 4 requests' tokens stay cached
                      and a prefill costs (1 + retained / SCALE) x more
  --reset KIND        vllm (POST /reset_prefix_cache), sglang (POST /flush_cache), llamacpp
                      (POST /slots/0?action=erase), none (404): clears the cache and the cells
GET /metrics says vllm:kv_cache_usage_perc (running and retained tokens over --capacity, 100k)
and the
prefix cache's queries and hits. Usage rides on every chunk. Stops by itself after 300 s."""
import argparse
import json
import re
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("--step-ms", type=float, default=8)
ap.add_argument("--seq-ms", type=float, default=0.1)
ap.add_argument("--token-us", type=float, default=40)
ap.add_argument("--stall-factor", type=float, default=1)
ap.add_argument("--drift-after", type=int, default=0)
ap.add_argument("--drift", type=float, default=1)
ap.add_argument("--cache", action="store_true")
ap.add_argument("--retain", type=float, default=0)
ap.add_argument("--reset", default="none")
ap.add_argument("--capacity", type=int, default=100000)
ap.add_argument("--slots", type=int, default=4)  # llama.cpp: ids 0 .. slots-1 erase, others 400
args = ap.parse_args()
RESET_PATHS = {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache",
               "llamacpp": "/slots/0?action=erase"}
CAPACITY = args.capacity
DEADLINE = time.monotonic() + 300

lock = threading.Condition()
state = {"asked": 0, "active": [], "seen": set(), "retained": [], "queries": 0, "hits": 0}


class Req:
    def __init__(self, key, prompt_len, max_tokens):
        self.key, self.prompt_len, self.max_tokens = key, prompt_len, max_tokens
        self.sent, self.started, self.cancelled = 0, False, False
        self.q = queue.Queue()


def engine():
    while time.monotonic() < DEADLINE:
        with lock:
            while not state["active"] and time.monotonic() < DEADLINE:
                lock.wait(0.2)
            batch = [r for r in state["active"] if not r.cancelled]
            state["active"] = batch[:]
            retained = sum(state["retained"])
            slow = args.drift if args.drift_after and state["asked"] > args.drift_after else 1
            prefill = 0.0
            for r in batch:
                if r.started:
                    continue
                n = r.prompt_len
                state["queries"] += n
                if args.cache and r.key in state["seen"]:
                    state["hits"] += n
                    n = max(1, n // 20)
                state["seen"].add(r.key)
                prefill += n * args.token_us / 1e6 * (1 + (retained / args.retain if args.retain else 0))
        if any(r.started for r in batch):
            prefill *= args.stall_factor
        if batch:
            time.sleep((args.step_ms / 1e3 + args.seq_ms / 1e3 * len(batch) + prefill) * slow)
        with lock:
            for r in batch:
                r.started = True
                r.sent += 1
                r.q.put(r.sent)
                if r.sent >= r.max_tokens or r.cancelled:
                    state["active"].remove(r)
                    state["retained"] = (state["retained"] + [r.prompt_len + r.sent])[-4:]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, code, obj, ctype="application/json"):
        body = obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "llama-3.1-8b", "object": "model",
                                                            "max_model_len": 8192}]})
        elif self.path == "/metrics":
            with lock:
                used = sum(r.prompt_len + r.sent for r in state["active"]) + sum(state["retained"])
                page = (f"# completions asked: {state['asked']}\n# TYPE vllm:kv_cache_usage_perc gauge\n"
                        f'vllm:kv_cache_usage_perc{{model_name="llama-3.1-8b"}} {used / CAPACITY}\n'
                        "# TYPE vllm:prefix_cache_queries_total counter\n"
                        f'vllm:prefix_cache_queries_total{{model_name="llama-3.1-8b"}} {state["queries"]}\n'
                        "# TYPE vllm:prefix_cache_hits_total counter\n"
                        f'vllm:prefix_cache_hits_total{{model_name="llama-3.1-8b"}} {state["hits"]}\n')
            self.send_json(200, page, "text/plain; version=0.0.4")
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n) or b"{}"
        if args.reset != "none" and self.path == RESET_PATHS[args.reset]:
            with lock:
                state["seen"].clear()
                state["retained"] = []
                state["erased"] = state.get("erased", 0) + 1
            self.send_json(200, {"ok": True})
            return
        slot = re.fullmatch(r"/slots/(\d+)\?action=erase", self.path)
        if args.reset == "llamacpp" and slot:
            ok = int(slot.group(1)) < args.slots
            with lock:
                state["erased"] = state.get("erased", 0) + (1 if ok else 0)
            self.send_json(200 if ok else 400, {"ok": True} if ok else {"error": "Invalid slot ID"})
            return
        if self.path != "/v1/completions":
            self.send_json(404, {"error": "not found"})
            return
        req = json.loads(raw)
        prompt = req.get("prompt", "")
        key = json.dumps(prompt)
        prompt_len = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        r = Req(key, prompt_len, int(req.get("max_tokens", 16)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with lock:
            state["asked"] += 1
            state["active"].append(r)
            lock.notify_all()
        try:
            while True:
                sent = r.q.get(timeout=60)
                last = sent >= r.max_tokens
                c = {"id": "cmpl-x", "object": "text_completion", "model": "llama-3.1-8b",
                     "choices": [{"text": " tok", "index": 0, "finish_reason": "length" if last else None}],
                     "usage": {"prompt_tokens": prompt_len, "completion_tokens": sent,
                               "total_tokens": prompt_len + sent}}
                payload = f"data: {json.dumps(c)}\n\n".encode()
                self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()
                if last:
                    break
            payload = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n")
            self.wfile.flush()
        except (OSError, queue.Empty):
            r.cancelled = True


threading.Thread(target=engine, daemon=True).start()
srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
srv.daemon_threads = True
threading.Thread(target=lambda: (time.sleep(max(0, DEADLINE - time.monotonic())), srv.shutdown()),
                 daemon=True).start()
print("ready", flush=True)
srv.serve_forever()
