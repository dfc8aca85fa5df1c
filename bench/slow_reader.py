"""A client that asks for a long stream and never reads it, against a running
`stallscope serve` (127.0.0.1:PORT): how long until the server gives up on it, and how much
the kernel's socket buffers held meanwhile. Prints one line every 5 s (elapsed s, tokens
the server generated, requests open, connections dropped for not reading) and stops when
the server has dropped it (or after 200 s).

    stallscope serve --engine emulate --port 8000 --request-read-timeout 5s &
    python3 bench/slow_reader.py 8000

Too slow for the test suite: on loopback the kernel buffers a few MB before the server's
own output buffer starts to fill (docs/results/serve-slow-reader.md has the figures)."""
import json
import socket
import sys
import time
import urllib.request

port = int(sys.argv[1])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", port))
body = json.dumps({"prompt": "x", "max_tokens": 100000, "ignore_eos": True,
                   "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
          % len(body) + body)
t0 = time.time()
while time.time() - t0 < 200:
    time.sleep(5)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    m = {l.split("{")[0]: l.split()[-1] for l in text.decode().splitlines()
         if l and not l.startswith("#")}
    print(f"{time.time() - t0:5.0f} s  generated {m['vllm:generation_tokens_total']}  open "
          f"{m['stallscope:requests_open']}  dropped {m['stallscope:http_write_stalls_total']}",
          flush=True)
    if m["stallscope:http_write_stalls_total"] != "0" and m["stallscope:requests_open"] == "0":
        break
s.settimeout(5)
got = 0
try:
    while True:
        part = s.recv(1 << 20)
        if not part:
            break
        got += len(part)
except OSError as exc:
    print("recv:", exc)
print(f"the client then read {got} bytes the kernel had buffered, and the end of the stream")
