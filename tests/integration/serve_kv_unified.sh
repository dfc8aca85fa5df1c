#!/usr/bin/env bash
# stallscope serve --kv-layout unified (llama.cpp's unified KV cache) against paged, on the
# emulated cpu profile running the tiny model, one-step prefill (--policy mixed): a lone
# 4,096-token prompt on a fresh server, a second, different 4,096-token prompt, then a
# 1,024-token one, each after the last has finished (4 answer tokens each).
#  - unified: the second prompt's prefill step is modeled (steps.csv modeled_ns) at more than
#    1.5 x the first's (it also spans the first's 4,099 retained cells), the third's at more
#    than 3 x its paged figure (it spans both: 8,198 cells); paged: the two 4,096 prefills
#    are modeled alike. The modeled figures come from the cost model, so they hold on any
#    machine; each TTFT is at least its prefill's modeled duration (the emulated engine
#    sleeps to the step's deadline; a loaded machine only makes it later);
#  - /metrics' stallscope_kv_cells_occupied afterwards: 9,225 cells under unified (4,099 +
#    4,099 + 1,027: each prompt and its answer but the last token), 0 under paged;
#  - --kv-layout radix is refused: exit 2, the accepted values named, no ready line.
set -euo pipefail
BIN=$1
DIR=$2
rm -rf "$DIR"
mkdir -p "$DIR"
source "$(dirname "$0")/serve_lib.bash"

rc=0
"$BIN" serve --engine emulate --port 0 --kv-layout radix >"$DIR/bad.out" 2>"$DIR/bad.err" || rc=$?
[ "$rc" = 2 ] || fail "--kv-layout radix exited $rc, want 2"
grep -q "unknown KV layout 'radix' (expected paged or unified)" "$DIR/bad.err" ||
  fail "--kv-layout radix: $(cat "$DIR/bad.err")"
[ ! -s "$DIR/bad.out" ] || fail "--kv-layout radix printed: $(cat "$DIR/bad.out")"
pass "--kv-layout radix refused with exit 2"

for layout in unified paged; do
  start_server "$layout" --gpu cpu --model tiny --policy mixed --max-num-seqs 33 \
    --kv-layout "$layout" --step-log "$DIR/steps-$layout.csv"
  LAYOUT=$layout py "$(cat <<'PY'
import json, os, time
from serve_client import request
port, d, layout = int(os.environ["PORT"]), os.environ["DIR"], os.environ["LAYOUT"]
ttfts = []
for n, first in ((4096, 1), (4096, 10001), (1024, 20001)):
    body = {"model": "tiny", "prompt": list(range(first, first + n)), "max_tokens": 4,
            "ignore_eos": True}
    t0 = time.monotonic_ns()
    status, _, out = request(port, "/v1/completions", body, timeout=60)
    assert status == 200, out
    ttfts.append(time.monotonic_ns() - t0)  # non-streamed: the whole answer, >= TTFT
json.dump(ttfts, open(f"{d}/client-{layout}.json", "w"))
# The cells left: each request's prompt and all its answer but the last token, kept by its
# slot (unified: 4,099 + 4,099 + 1,027); none under paged.
want = 9225 if layout == "unified" else 0
status, _, out = request(port, "/metrics", method="GET")
line = [l for l in out.decode().splitlines() if l.startswith("stallscope_kv_cells_occupied{")]
assert status == 200 and len(line) == 1 and line[0].endswith(f"}} {want}"), (layout, line)
print(f"ok: {layout}: stallscope_kv_cells_occupied {want}")
PY
)"
  stop_server TERM
done

py "$(cat <<'PY'
import json, os
from serve_client import read_steps
d = os.environ["DIR"]
modeled, ends = {}, {}
for layout in ("unified", "paged"):
    steps = read_steps(f"{d}/steps-{layout}.csv")
    prefills = [s["modeled_ns"] for s in steps if s["prefill_tokens"] > 0]
    assert len(prefills) == 3, (layout, prefills)
    modeled[layout] = prefills
    ends[layout] = json.load(open(f"{d}/client-{layout}.json"))
    print(f"{layout}: prefills modeled at " + ", ".join(f"{ns / 1e6:.1f} ms" for ns in prefills)
          + "; answered in " + ", ".join(f"{ns / 1e6:.1f} ms" for ns in ends[layout]))
    for ns, end in zip(prefills, ends[layout]):
        assert end >= ns, (layout, prefills, ends[layout])
u, p = modeled["unified"], modeled["paged"]
assert u[0] == p[0], (u, p)           # a fresh server: nothing retained
assert u[1] > 1.5 * u[0], (u, p)      # spans the first prompt's cells
assert u[2] > 3 * p[2], (u, p)        # spans both
assert p[1] == p[0], p                # paged: no order effect
print("ok: unified reproduces the order effect, paged does not")
PY
)"
