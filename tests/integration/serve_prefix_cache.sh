#!/usr/bin/env bash
# stallscope serve --enable-prefix-caching (emulated H100, Llama 3.1 8B), over HTTP:
#  - the same 8,000-token token-id prompt twice: the second finds (8,000 - 1) / 16 = 499
#    blocks = 7,984 tokens cached; /metrics counts queries 16,000 and hits 7,984 (exact:
#    the rule in engine/sched.h), and steps.csv's prefix columns say the same;
#  - a chat conversation, then the same conversation one turn longer: the second request's
#    hits are at least the first request's whole blocks before its assistant header (text
#    prompts are cached by the ids the server tokenized them into);
#  - without the flag the same requests hit nothing and steps.csv has no prefix columns.
# Counts, not times: nothing here depends on the machine's speed.
set -euo pipefail
BIN=$1
DIR=$2
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

drive() {
py "$(cat <<'PY'
import json, os, urllib.request
port, d = int(os.environ["PORT"]), os.environ["DIR"]
base = f"http://127.0.0.1:{port}"
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)
def hits():
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    got = {}
    for line in text.splitlines():
        for k in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
            if line.startswith(k + "{"):
                got[k] = float(line.rsplit(" ", 1)[1])
    return got
ids = [100 + (i * 7919) % 50000 for i in range(8000)]
for _ in range(2):
    post("/v1/completions", {"model": "llama-3.1-8b", "prompt": ids, "max_tokens": 2})
after_ids = hits()
system = "you answer questions about serving large language models " * 30
conv = [{"role": "system", "content": system}, {"role": "user", "content": "what is a stall " * 20}]
a = post("/v1/chat/completions", {"model": "llama-3.1-8b", "messages": conv, "max_tokens": 4})
conv2 = conv + [{"role": "assistant", "content": "a long gap " * 10},
                {"role": "user", "content": "and its cause " * 10}]
before = hits()
post("/v1/chat/completions", {"model": "llama-3.1-8b", "messages": conv2, "max_tokens": 4})
after = hits()
json.dump({"ids": after_ids, "chat_prompt": a["usage"]["prompt_tokens"],
           "chat_hits": after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]},
          open(f"{d}/{os.environ.get('TAG', 'x')}.json", "w"))
PY
)"
}

start_server cached --gpu h100-sxm --model llama-3.1-8b --enable-prefix-caching \
  --step-log "$DIR/steps-on.csv"
grep -q 'prefix caching on' "$DIR/cached.err" || fail "serve's banner does not say prefix caching is on"
TAG=on drive
stop_server

start_server plain --gpu h100-sxm --model llama-3.1-8b --step-log "$DIR/steps-off.csv"
TAG=off drive
stop_server

python3 - "$DIR" <<'PY'
import csv, json, sys
d = sys.argv[1]
on, off = json.load(open(f"{d}/on.json")), json.load(open(f"{d}/off.json"))
def want(cond, what):
    if not cond:
        print("FAIL:", what); sys.exit(1)
    print("ok:", what)
want(on["ids"] == {"vllm:prefix_cache_queries_total": 16000.0, "vllm:prefix_cache_hits_total": 7984.0},
     f"token-id prompt twice: queries 16000, hits 7984 (got {on['ids']})")
# Whole blocks of the first chat prompt before its 3 assistant-header ids.
floor = (on["chat_prompt"] - 3) // 16 * 16
want(on["chat_hits"] >= floor and on["chat_hits"] > 0,
     f"the longer conversation hit {on['chat_hits']} tokens >= {floor} (the first's blocks)")
want(off["ids"].get("vllm:prefix_cache_hits_total", 0) == 0 and off["chat_hits"] == 0,
     "without --enable-prefix-caching nothing hits")
rows = list(csv.DictReader(open(f"{d}/steps-on.csv")))
want(sum(int(r["prefix_hits"]) for r in rows) >= 7984 + floor,
     "steps.csv's prefix_hits add up to /metrics' hits")
want(open(f"{d}/steps-off.csv").readline().strip().endswith("late_ns"),
     "without the flag steps.csv keeps its columns")
PY
