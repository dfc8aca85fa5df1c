#!/usr/bin/env bash
# `stallscope proxy` forwards untouched: `serve --engine emulate` (llama-3.2-1b) behind the
# proxy, on loopback, each answer compared with the same request sent directly.
#  1. a stream through the proxy is the stream sent directly (status, Content-Type, the
#     SSE events' count and the choices' texts: ids and created differ), on both
#     endpoints; an unknown model's error and GET /v1/models are the server's, byte for byte;
#  2. a malformed request (two Content-Length, a bare LF) gets the proxy's own 400
#     OpenAI-style JSON and the connection closed; an upstream that is down gets a 502 JSON
#     error of type upstream_error, counted in requests_total{code="502"};
#  3. keep-alive: two requests on one connection, a pipelined pair answered in order, HEAD,
#     a chunked request body, Expect: 100-continue answered at once, an HTTP/1.0 client's
#     stream not chunked (it cannot read chunks), a connection idle less than --idle-timeout
#     after a long answer still open (the idle time counts from the answer's end);
#  4. a client that disconnects mid-stream aborts the upstream request: the server's
#     vllm:num_requests_running is back to 0 within 2 s, client_aborts_total counts 1;
#  5. secrets: with --upstream http://user:s3cret@... and a client's "Authorization: Bearer
#     sk-test-XYZ", neither is in the --out files, the proxy's stderr or the metrics;
#  6. --sample 0.5 over 40 streams: between 8 and 32 of them in requests.csv, all 40 in the
#     metrics;
#  7. SIGTERM with a stream in flight: exit 0, the stream cut and its row written (finish
#     "abort"), every file whole (ends with a newline), `stallscope report DIR` reads them
#     (the rows count every stream sent through);
#  8. an https upstream (python's ssl server, a self-signed certificate made here with the
#     openssl CLI) with --insecure: the stream arrives, its tokens are observed, and the
#     URL's credentials reach the upstream as Basic (a client's own Authorization instead
#     when it sent one). Skipped (said so) without the openssl CLI.
# Every process is killed by its PID on exit; every wait is bounded.
set -euo pipefail
BIN=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

SERVE_PID= PA= PB= PC= PD= TLS_PID= CURL_PID=
cleanup() {
  for pid in $CURL_PID $TLS_PID $PD $PC $PB $PA $SERVE_PID; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

start_serve "$BIN" "$WORK/serve.log" --engine emulate --model llama-3.2-1b
SERVE_PID=$serve_pid
[ -n "$url" ] || { cat "$WORK/serve.log"; fail "serve did not start"; }
UP_PORT=${url##*:}

# start_proxy NAME ARGS...: the proxy's PID in $proxy_pid, its ports in $port and $admin.
# Bounded by its own --duration, not by timeout(1): timeout sends the SIGTERM it gets to
# the child and again to its process group, and the second may land after the proxy
# restored the default action on its way out (exit 143 instead of 0).
start_proxy() {
  local name=$1; shift
  "$BIN" proxy --duration 120s --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
    --ready-file "$WORK/$name.ready" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  proxy_pid=$!
  for _ in $(seq 100); do [ -s "$WORK/$name.ready" ] && break; sleep 0.1; done
  [ -s "$WORK/$name.ready" ] || { cat "$WORK/$name.err"; fail "proxy $name did not start"; }
  read -r port admin <"$WORK/$name.ready"
}

# A: the proxy most checks go through, credentials in its upstream URL, rows to $WORK/a.
start_proxy a --upstream "http://user:s3cret@127.0.0.1:$UP_PORT" --out "$WORK/a" --idle-timeout 2s
PA=$proxy_pid A_PORT=$port A_ADMIN=$admin
# C: an upstream nobody listens on.
start_proxy c --upstream "http://127.0.0.1:$(free_port)" --connect-timeout 2s
PC=$proxy_pid C_PORT=$port C_ADMIN=$admin
pass "serve on $UP_PORT; proxy a on $A_PORT (admin $A_ADMIN), proxy c (upstream down) on $C_PORT"

A_PORT=$A_PORT A_ADMIN=$A_ADMIN C_PORT=$C_PORT C_ADMIN=$C_ADMIN UP_PORT=$UP_PORT \
  timeout 60 python3 - >"$WORK/checks.out" 2>&1 <<'PY' || { cat "$WORK/checks.out"; fail "the passthrough checks"; }
import http.client, json, os, socket, subprocess, time, urllib.request

A, AA = int(os.environ["A_PORT"]), int(os.environ["A_ADMIN"])
C, CA = int(os.environ["C_PORT"]), int(os.environ["C_ADMIN"])
UP = int(os.environ["UP_PORT"])
failed = []

def check(what, cond, detail=""):
    print(("ok: " if cond else "FAIL: ") + what + (": " + detail if detail else ""), flush=True)
    if not cond:
        failed.append(what)

def exchange(port, raw, timeout=5):
    """Send raw bytes, read until the peer closes (or timeout): (bytes, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(raw)
    data, closed = b"", False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            closed = True
            break
        data += chunk
    s.close()
    return data, closed

def post(path, body, headers=None, port=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body), headers=h)
    r = c.getresponse()
    out = (r.status, r.getheader("Content-Type"), r.read())
    c.close()
    return out

def sse_texts(raw):
    events = [l[6:] for l in raw.decode().split("\n") if l.startswith("data: ")]
    texts = []
    for e in events:
        if e == "[DONE]":
            continue
        for ch in json.loads(e).get("choices", []):
            texts.append(ch.get("text", (ch.get("delta") or {}).get("content")))
    return len(events), texts

def metrics(port):
    vals = {}
    for l in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode().splitlines():
        if l and not l.startswith("#"):
            k, v = l.rsplit(" ", 1)
            vals[k] = float(v)
    return vals

def proxy_metric(port, name, label=""):
    return sum(v for k, v in metrics(port).items() if k.startswith(name + "{") and label in k)

# 1. streams and errors as the server sends them
for path, body in [
    ("/v1/completions", {"model": "llama-3.2-1b", "prompt": "the passthrough", "max_tokens": 24,
                         "stream": True, "seed": 42}),
    ("/v1/chat/completions", {"model": "llama-3.2-1b", "max_tokens": 24, "stream": True, "seed": 7,
                              "messages": [{"role": "user", "content": "say something"}],
                              "stream_options": {"include_usage": True}}),
]:
    direct, proxied = post(path, body, port=UP), post(path, body, port=A)
    nd, td = sse_texts(direct[2])
    np_, tp = sse_texts(proxied[2])
    check(f"{path} stream as sent directly", direct[:2] == proxied[:2] and nd == np_ and td == tp
          and nd >= 25 and direct[1].startswith("text/event-stream"),
          f"status/type {direct[:2]} vs {proxied[:2]}, {nd} vs {np_} events, texts equal {td == tp}")
bad_model = {"model": "nope", "prompt": "x", "max_tokens": 2}
d, p = post("/v1/completions", bad_model, port=UP), post("/v1/completions", bad_model, port=A)
check("an unknown model's error passed through", d == p and d[0] == 404, f"{d[0]} {d[2][:80]!r} vs {p[0]} {p[2][:80]!r}")
d = urllib.request.urlopen(f"http://127.0.0.1:{UP}/v1/models", timeout=5).read()
p = urllib.request.urlopen(f"http://127.0.0.1:{A}/v1/models", timeout=5).read()
check("GET /v1/models identical", d == p and b"llama-3.2-1b" in d)

# 2. refusals of the proxy's own, and an upstream that is down
for what, raw, word in [
    ("two Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                           b"Content-Length: 2\r\n\r\n{}", b"Content-Length"),
    ("a bare LF", b"GET /v1/models HTTP/1.1\nHost: x\n\n", b"LF"),
]:
    data, closed = exchange(A, raw)
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        err = json.loads(body)["error"]
    except Exception:
        err = {}
    check(f"{what}: the proxy's 400 JSON, connection closed",
          head.startswith(b"HTTP/1.1 400 ") and b"application/json" in head and closed and
          err.get("type") == "invalid_request_error" and err.get("code") == 400 and
          word in err.get("message", "").encode(), f"{data[:200]!r}, closed {closed}")
st, ctype, body = post("/v1/completions", {"model": "m", "prompt": "x"}, port=C)
try:
    err = json.loads(body)["error"]
except Exception:
    err = {}
check("upstream down: 502 JSON upstream_error", st == 502 and ctype == "application/json" and
      err.get("type") == "upstream_error" and err.get("code") == 502, f"{st} {body[:160]!r}")
check("upstream down: counted as code 502",
      proxy_metric(CA, "stallscope_proxy_requests_total", 'code="502"') == 1 and
      proxy_metric(CA, "stallscope_proxy_upstream_errors_total") == 1)

# 3. connections
c = http.client.HTTPConnection("127.0.0.1", A, timeout=10)
c.request("GET", "/v1/models"); r1 = c.getresponse(); b1 = r1.read(); local = c.sock.getsockname()
c.request("GET", "/v1/models"); r2 = c.getresponse(); b2 = r2.read()
check("keep-alive: two requests on one connection", r1.status == r2.status == 200 and b1 == b2
      and c.sock is not None and c.sock.getsockname() == local)
def chunks():
    yield b'{"model": "llama-3.2-1b", '
    yield b'"prompt": "a chunked body", "max_tokens": 3}'
c.request("POST", "/v1/completions", body=chunks(), encode_chunked=True,
          headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
r = c.getresponse(); rb = r.read()
check("a chunked request body", r.status == 200 and json.loads(rb)["usage"]["completion_tokens"] == 3
      and c.sock.getsockname() == local, f"{r.status} {rb[:120]!r}")
c.close()
c = http.client.HTTPConnection("127.0.0.1", A, timeout=10)
c.request("HEAD", "/v1/models"); r = c.getresponse(); hb = r.read()
check("HEAD answered without a body", r.status == 200 and hb == b"" and
      r.getheader("Content-Type") == "application/json")
c.close()
one = json.dumps({"model": "llama-3.2-1b", "prompt": "first", "max_tokens": 4, "seed": 3}).encode()
data, closed = exchange(A, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(one), one) +
                           b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
first = data.find(b'"object":"text_completion"')
second = data.find(b'"object":"list"')
check("a pipelined pair answered in order", data.count(b"HTTP/1.1 200 OK") == 2 and 0 < first < second
      and closed, f"{data[:300]!r}")
curl = subprocess.run(["curl", "-sS", "-i", "--max-time", "10", "-H", "Expect: 100-continue",
                       "-H", "Content-Type: application/json", "-w", "\n%{http_code} %{time_total}",
                       "-d", json.dumps({"model": "llama-3.2-1b", "prompt": "expect", "max_tokens": 2}),
                       f"http://127.0.0.1:{A}/v1/completions"], capture_output=True, text=True)
code, took = curl.stdout.rsplit("\n", 1)[1].split()
check("Expect: 100-continue answered at once", "HTTP/1.1 100 Continue" in curl.stdout and code == "200"
      and float(took) < 0.9, f"{code} in {took} s")
ten = json.dumps({"model": "llama-3.2-1b", "prompt": "old client", "max_tokens": 5, "stream": True}).encode()
data, closed = exchange(A, b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(ten), ten))
head, _, body = data.partition(b"\r\n\r\n")
n, texts = sse_texts(body)
check("an HTTP/1.0 client's stream is not chunked", head.startswith(b"HTTP/1.0 200") and
      b"chunked" not in head.lower() and n == 6 and len(texts) == 5 and closed, f"{data[:200]!r}")
# --idle-timeout 2s: a connection that waited 3 s for its answer is not idle for it, and
# still open 1.2 s after it (the proxy closed it within a second of the answer when the idle
# time counted from the request's arrival)
c = http.client.HTTPConnection("127.0.0.1", A, timeout=10)
why = ""
try:
    for i in range(3):
        c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                  body=json.dumps({"model": "llama-3.2-1b", "prompt": "long",
                                   "max_tokens": 4000 if i < 2 else 2, "ignore_eos": True}))
        r = c.getresponse(); r.read()
        if i == 0:
            local = c.sock.getsockname()
        if r.status != 200 or c.sock is None or c.sock.getsockname() != local:
            why = f"answer {i}: {r.status}, another connection"
            break
        time.sleep(1.2)
except (http.client.HTTPException, OSError) as e:
    why = f"the connection was closed: {e!r}"
c.close()
check("idle time counts from the end of a long answer", not why, why)
# ... and a connection idle past it is closed
s = socket.create_connection(("127.0.0.1", A), timeout=5)
s.settimeout(6)
t0 = time.monotonic()
try:
    gone = s.recv(1) == b""
except (socket.timeout, ConnectionResetError):
    gone = False
took = time.monotonic() - t0
check("a connection idle past --idle-timeout closed", gone and 1.9 < took < 4.5, f"after {took:.1f} s")
s.close()

# 4. a client that leaves mid-stream
def running():
    m = urllib.request.urlopen(f"http://127.0.0.1:{UP}/metrics", timeout=5).read().decode()
    return [float(l.rsplit(" ", 1)[1]) for l in m.splitlines() if l.startswith("vllm:num_requests_running")][0]
long = json.dumps({"model": "llama-3.2-1b", "prompt": "go on", "max_tokens": 100000,
                   "ignore_eos": True, "stream": True}).encode()
s = socket.create_connection(("127.0.0.1", A), timeout=5)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(long), long))
got = b""
while got.count(b"data: ") < 20:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
was = running()
s.close()
t0 = time.monotonic()
while running() != 0 and time.monotonic() - t0 < 2:
    time.sleep(0.02)
left = time.monotonic() - t0
check("a client that leaves aborts the upstream request", was == 1 and running() == 0,
      f"running {was:.0f} while streaming, 0 after {left:.2f} s")
aborts = 0
for _ in range(50):
    aborts = proxy_metric(AA, "stallscope_proxy_client_aborts_total")
    if aborts:
        break
    time.sleep(0.02)
check("client_aborts_total counts it", aborts == 1, f"{aborts}")

# 5. a client's credentials
st, _, body = post("/v1/completions", {"model": "llama-3.2-1b", "prompt": "secret", "max_tokens": 3,
                                       "stream": True}, headers={"Authorization": "Bearer sk-test-XYZ"},
                   port=A)
check("a request with the client's Authorization", st == 200 and sse_texts(body)[0] == 4)
text = urllib.request.urlopen(f"http://127.0.0.1:{AA}/metrics", timeout=5).read().decode()
labels = {l.split('upstream="', 1)[1].split('"', 1)[0] for l in text.splitlines() if 'upstream="' in l}
check("the metrics' upstream label has no credentials", labels == {f"127.0.0.1:{UP}"} and
      "s3cret" not in text and "sk-test-XYZ" not in text, f"{labels}")
print(f"checks: {len(failed)} failed", flush=True)
raise SystemExit(1 if failed else 0)
PY
cat "$WORK/checks.out"

# 6. --sample 0.5: B writes about half the streams, counts them all
start_proxy b --upstream "$url" --out "$WORK/b" --sample 0.5
PB=$proxy_pid B_PORT=$port B_ADMIN=$admin
B_PORT=$B_PORT B_ADMIN=$B_ADMIN timeout 60 python3 - >"$WORK/sample.out" 2>&1 <<'PY' || { cat "$WORK/sample.out"; fail "40 streams through proxy b"; }
import http.client, json, os, urllib.request
port = int(os.environ["B_PORT"])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for i in range(40):
    c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
              body=json.dumps({"model": "llama-3.2-1b", "prompt": f"sample {i}", "max_tokens": 2, "stream": True}))
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
PY
curl -fsS "http://127.0.0.1:$B_ADMIN/metrics" >"$WORK/b.metrics" || fail "no /metrics from proxy b"
kill -TERM "$PB"
rc=0; wait "$PB" || rc=$?; [ "$rc" = 0 ] || { tail -30 "$WORK/b.err"; fail "proxy b exited $rc on SIGTERM, not 0"; }
PB=
python3 - "$WORK/b" "$WORK/b.metrics" <<'PY' || fail "--sample 0.5"
import csv, glob, sys
rows = sum(len(list(csv.DictReader(open(p)))) for p in glob.glob(f"{sys.argv[1]}/*/*/requests.csv"))
m = {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in open(sys.argv[2]) if l[0] != "#"}
counted = sum(v for k, v in m.items() if k.startswith("stallscope_proxy_requests_total{"))
prompts = sum(v for k, v in m.items() if k.startswith("stallscope_proxy_prompt_tokens_count{"))
good = 8 <= rows <= 32 and counted == 40 and prompts == 40
print(f"{'ok' if good else 'FAIL'}: --sample 0.5: {rows} of 40 streams in requests.csv, {counted:.0f} "
      f"requests and {prompts:.0f} streams counted")
sys.exit(0 if good else 1)
PY

# 7. SIGTERM with a stream in flight: A stops cleanly (the stream cut, its row written), its
# files whole, report reads them; 5. no secret anywhere
curl -sS -N --max-time 30 "http://127.0.0.1:$A_PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"llama-3.2-1b","prompt":"cut","max_tokens":100000,"ignore_eos":true,"stream":true}' \
  >"$WORK/cut.stream" 2>/dev/null &
CURL_PID=$!
for _ in $(seq 100); do [ "$(grep -c '^data: ' "$WORK/cut.stream" || true)" -ge 10 ] && break; sleep 0.05; done
[ "$(grep -c '^data: ' "$WORK/cut.stream" || true)" -ge 10 ] || fail "no stream in flight through proxy a"
kill -TERM "$PA"
rc=0; wait "$PA" || rc=$?; [ "$rc" = 0 ] || { tail -30 "$WORK/a.err"; fail "proxy a exited $rc on SIGTERM, not 0"; }
PA=
wait "$CURL_PID" || true # cut: curl says so
CURL_PID=
n_files=0
while IFS= read -r -d '' f; do
  n_files=$((n_files + 1))
  [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" = '\n' ] || fail "$f does not end with a newline"
done < <(find "$WORK/a" -type f -print0)
[ "$n_files" -ge 4 ] || fail "proxy a wrote $n_files files"
pass "SIGTERM: proxy a exited 0, its $n_files files end with a newline"
"$BIN" report "$WORK/a" --out "$WORK/a-report" --json >"$WORK/a-report.out" 2>"$WORK/a-report.err" ||
  { cat "$WORK/a-report.err"; fail "report of proxy a's files"; }
# Streams through a, all observed and written (--sample 1): two compared, one HTTP/1.0, the
# one that left, the client's own Authorization, the one cut by the SIGTERM.
python3 - "$WORK/a" "$WORK/a-report/summary.json" <<'PY' || fail "proxy a's rows"
import csv, glob, json, sys
rows = [r for p in glob.glob(f"{sys.argv[1]}/*/*/requests.csv") for r in csv.DictReader(open(p))]
cut = [r for r in rows if r["finish_reason"] == "abort"]
summary = json.load(open(sys.argv[2]))
good = (len(rows) == 6 and len(cut) == 2 and all(r["error"] == "" for r in rows) and
        summary["requests"] == 6 and summary["tokens_received"] > 80)
print(f"{'ok' if good else 'FAIL'}: proxy a's rows: {len(rows)} requests ({len(cut)} cut: the client that left, "
      f"the stream in flight at SIGTERM), report read {summary['requests']} and {summary['tokens_received']} tokens")
sys.exit(0 if good else 1)
PY
if grep -r -l -e s3cret -e sk-test-XYZ -e dXNlcjpzM2NyZXQ "$WORK/a" "$WORK/a.err" "$WORK/a.out"; then
  fail "a secret in the proxy's files or output (above)"
fi
pass "no s3cret, sk-test-XYZ or their Basic form in $WORK/a or the proxy's output"

# 8. an https upstream
if ! command -v openssl >/dev/null 2>&1; then
  echo "SKIP: the https upstream (no openssl CLI to make a certificate)"
  echo "proxy_passthrough: all checks passed"
  exit 0
fi
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout "$WORK/key.pem" \
  -out "$WORK/cert.pem" >"$WORK/openssl.log" 2>&1 || { cat "$WORK/openssl.log"; fail "openssl req"; }
timeout 60 python3 - "$WORK" >"$WORK/tls.log" 2>&1 <<'PY' &
import http.server, json, ssl, sys
work = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(f"{work}/tls.auth", "a") as f:
            f.write(self.headers.get("Authorization", "-") + "\n")
        body = b"".join(b"data: " + json.dumps({"id": "t", "object": "text_completion", "choices": [
            {"index": 0, "text": w, "finish_reason": None}]}).encode() + b"\n\n" for w in ("tls", " works", " here"))
        body += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(f"{work}/cert.pem", f"{work}/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
open(f"{work}/tls.port.tmp", "w").write(str(srv.server_address[1]))
__import__("os").rename(f"{work}/tls.port.tmp", f"{work}/tls.port")
srv.serve_forever()
PY
TLS_PID=$!
for _ in $(seq 100); do [ -s "$WORK/tls.port" ] && break; sleep 0.1; done
[ -s "$WORK/tls.port" ] || { cat "$WORK/tls.log"; fail "the TLS server did not start"; }
start_proxy d --upstream "https://user:s3cret@127.0.0.1:$(cat "$WORK/tls.port")" --insecure
PD=$proxy_pid D_PORT=$port D_ADMIN=$admin
req='{"model":"m","prompt":"over tls","max_tokens":3,"stream":true}'
curl -sS --max-time 10 "http://127.0.0.1:$D_PORT/v1/completions" -H 'Content-Type: application/json' \
  -d "$req" >"$WORK/tls.stream" || fail "no stream through the proxy from the https upstream"
curl -sS --max-time 10 "http://127.0.0.1:$D_PORT/v1/completions" -H 'Content-Type: application/json' \
  -H 'Authorization: Bearer sk-test-XYZ' -d "$req" >/dev/null || fail "the second request over TLS"
texts=$(grep -o '"text": "[^"]*"' "$WORK/tls.stream" | tr -d '\n' || true)
[ "$texts" = '"text": "tls""text": " works""text": " here"' ] || { cat "$WORK/tls.stream"; fail "the stream over TLS: $texts"; }
tokens=$(curl -fsS "http://127.0.0.1:$D_ADMIN/metrics" | sed -n 's/^stallscope_proxy_tokens_total{[^}]*} //p' || true)
[ "$tokens" = 6 ] || fail "the proxy observed $tokens token events over TLS, expected 6"
[ "$(cat "$WORK/tls.auth")" = "Basic dXNlcjpzM2NyZXQ=
Bearer sk-test-XYZ" ] || { cat "$WORK/tls.auth"; fail "the Authorization the https upstream got"; }
pass "https upstream (--insecure): the stream arrived, 6 token events observed, the URL's credentials as Basic"
echo "proxy_passthrough: all checks passed"
