#!/usr/bin/env bash
# stallscope run when the server misbehaves mid-run, when the user interrupts it, when it
# is killed, and when its disk fills (run_faults.sh covers refused, stalled and killed
# servers):
#  1. a server (fault_server.py) that, request by request, answers 500 or 429, sends a
#     malformed SSE chunk, resets the connection, sends an error event, ends a stream
#     without [DONE], stalls, lies about its token count and sends events after [DONE], or
#     claims in its usage twice the tokens it streamed (counted as what streamed, the claim
#     a violation in the table, fidelity.json and stderr); and answers 503 to everything
#     for a second (an overload burst). Each affected request ends with its error
#     recorded, its tokens up to the fault kept (tokens.csv == requests.csv == what the
#     server sent), the lies ignored and counted as protocol violations, a 429's or 503's
#     Retry-After honoured, and the run goes on to the end: complete, exit 0. Tokens
#     lost: only what a reset discards (counted exactly) and at most 2 per stream cut at
#     the end of the run (see IN_FLIGHT_LOSS below);
#  2. SIGINT during the interference run and during the baseline: the artifacts are
#     written, summary.json and config.json say "complete": false, exit 1, no server left;
#  3. kill -9 of the client mid-run: tokens.csv (written incrementally) holds at least
#     every token the server had generated one second before the kill;
#  4. kill -9 at random moments of 8 runs at ~35,000 tokens/s: tokens.csv and requests.csv
#     end with a newline and every row has its fields (the row writer writes whole rows),
#     save one cut the writer cannot prevent: Linux stops a write(2) of several pages at a
#     page boundary when SIGKILL arrives during it (generic_perform_write), so a file may
#     end inside its last row at a size that is a multiple of 4096. Such a file passes only
#     if every row before the cut is whole and `report` on the run drops exactly that one
#     row with its warning and says the run is incomplete;
#  5. a full disk (`ulimit -f`: writes fail with EFBIG): the run stops within 1 s of
#     tokens.csv's last write, exit 1 with the reason on stderr's last line, the rows
#     written before intact.
set -euo pipefail
BIN=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# ---- 1. faults mid-run ---------------------------------------------------------------------
# Once per transport: raw (the default: kernel receive stamps) and --transport curl. Each
# run's summary says which it used and where every stamp came from.
faults_case() {
local name=$1 transport=$2
shift 2
local PORT
PORT=$(free_port)
python3 "$PY_DIR/fault_server.py" "$PORT" "$WORK/fault_server_$name.jsonl" 5.0 1.0 \
  >"$WORK/fault_server_$name.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q ready "$WORK/fault_server_$name.out" && break; sleep 0.1; done
set +e
timeout 120 "$BIN" run --target "http://127.0.0.1:$PORT" --no-baseline --users 6 --duration 9s \
  --inject-at 1s --inject-every 2s --prompt-tokens 200 --inject-max-tokens 16 \
  --bg-answer-tokens 20..40 --warmup 0 --request-timeout 1s --out "$WORK/$name" "$@" \
  >"$WORK/$name.out" 2>"$WORK/$name.err"
RC=$?
set -e
[ "$RC" = 0 ] || { tail -5 "$WORK/$name.err"; fail "$name: exit $RC, want 0 (the run must go on)"; }
python3 - "$WORK/$name/interference" "$WORK/fault_server_$name.jsonl" "$WORK/$name.err" \
  "$transport" "$WORK/$name.out" <<'EOF'
import collections, csv, json, re, sys
d, server_log, stderr, transport, stdout = sys.argv[1:6]
s = json.load(open(f"{d}/summary.json"))
reqs = list(csv.DictReader(open(f"{d}/requests.csv")))
toks = list(csv.DictReader(open(f"{d}/tokens.csv")))
served = [json.loads(l) for l in open(server_log)]
problems = []
if s["complete"] is not True:
    problems.append("summary not complete")
want = {"HTTP 500": "http500", "HTTP 429": "http429", "HTTP 503": "burst503",
        "malformed SSE": "malformed", "connection lost": "reset",
        "server error event": "error_event", "stream ended without [DONE]": "no_done",
        "timeout: no bytes": "stall"}
seen = collections.Counter()
for r in reqs:
    for key in want:
        if r["error"].startswith(key):
            seen[key] += 1
for key, fault in want.items():
    if not seen[key]:
        problems.append(f"no request recorded '{key}' ({fault}); errors seen: "
                        f"{sorted(set(r['error'][:40] for r in reqs if r['error']))}")
# Per request: the token rows add up to its completion count; a fault after 3 tokens keeps 3.
per_req = collections.Counter()
for t in toks:
    per_req[t["request"]] += int(t["n_tokens"])
for r in reqs:
    if r["t_end_ns"] == "-1":
        continue
    if per_req[r["request"]] != int(r["completion_tokens"]):
        problems.append(f"request {r['request']}: {per_req[r['request']]} token rows, "
                        f"completion_tokens {r['completion_tokens']}")
    e = r["error"]
    if e.startswith(("HTTP 5", "HTTP 4")) and int(r["completion_tokens"]) != 0:
        problems.append(f"request {r['request']}: tokens on an HTTP error")
    # A reset may discard the tokens still unread in the client's socket (TCP drops the
    # receive queue on RST): at most the 3 sent, then.
    lost = int(r["completion_tokens"])
    if e.startswith("connection lost") and not 0 <= lost <= 3:
        problems.append(f"request {r['request']} ({e[:30]}): {lost} tokens, at most 3 sent")
    if e.startswith(("server error event", "stream ended", "timeout",
                     "malformed")) and int(r["completion_tokens"]) != 3:
        problems.append(f"request {r['request']} ({e[:30]}): {r['completion_tokens']} tokens, "
                        "want the 3 sent before the fault")
# The run went on: requests ended normally after the 503 burst, and after every fault kind.
burst_ends = [int(r["t_end_ns"]) for r in reqs if r["error"].startswith("HTTP 503")]
ok_after = [r for r in reqs if not r["error"] and r["finish_reason"] == "length"
            and burst_ends and int(r["t_first_ns"]) > max(burst_ends)]
if not ok_after:
    problems.append("no request completed after the 503 burst")
# Retry-After: a user refused with 429 (Retry-After: 1) or 503 (an HTTP-date 2 s ahead, 1 s
# resolution) sends its next request 1 s later at the earliest (its own back-off: 50 ms).
by_user = collections.defaultdict(list)
for r in reqs:
    if r["user"] != "-1":
        by_user[r["user"]].append(r)
waits = []
for rs in by_user.values():
    for a, b in zip(rs, rs[1:]):
        if a["error"].startswith(("HTTP 429", "HTTP 503")):
            waits.append((int(b["t_send_ns"]) - int(a["t_end_ns"])) / 1e9)
if not waits:
    problems.append("no retry after a 429 or 503 to check")
elif min(waits) < 1.0:
    problems.append(f"a retry {min(waits):.3f} s after a 429/503 with Retry-After >= 1 s")
# The liar's counts are bounded by the request (no 2^31 - 1 tokens), its events after
# [DONE] ignored; 3 violations per liar stream served whole, said on stderr.
liars = sum(1 for x in served if x["fault"] == "liar")
aborted = sum(1 for r in reqs if r["finish_reason"] == "abort")
biggest = max(int(r["completion_tokens"]) for r in reqs)
if biggest > 40:
    problems.append(f"a request has {biggest} completion tokens; none asked for more than 40")
m = re.search(r"(\d+) protocol violations", open(stderr).read())
violations = int(m.group(1)) if m else 0
# An overclaim stream's usage (all max_tokens, after half of them streamed) is refused: one
# violation each ("above_stream" in fidelity.json), and the request has what streamed (the
# token rows == completion_tokens check above). A stream cut at the end may miss its usage.
overclaims = sum(1 for x in served if x["fault"] == "overclaim")
f = json.load(open(f"{d}/fidelity.json"))
kinds = f.get("violations_by_kind", {})
above = kinds.get("above_stream", -1)
if not overclaims or not max(overclaims - aborted, 1) <= above <= overclaims:
    problems.append(f"{above} usage counts above the stream for {overclaims} overclaim streams")
if f.get("protocol_violations") != violations or sum(kinds.values()) != violations:
    problems.append(f"fidelity.json: {f.get('protocol_violations')} violations ({kinds}), "
                    f"stderr {violations}")
if above > 0 and "usage counts claimed more completion tokens than were streamed" not in open(stderr).read():
    problems.append("stderr does not say that usage claimed more than streamed")
if not liars or not 3 * max(liars - aborted, 1) <= violations - above <= 3 * liars:
    problems.append(f"{violations - above} protocol violations reported for {liars} liar streams")
if not re.search(rf"^protocol violations .* {violations}$", open(stdout).read(), re.M):
    problems.append(f"the table does not show {violations} protocol violations")
# ... and the same count in the run's record and its summary (what `report` reads back).
c = json.load(open(f"{d}/config.json"))
if s.get("protocol_violations") != violations or c["session"].get("protocol_violations") != violations:
    problems.append(f"protocol violations: stderr {violations}, summary "
                    f"{s.get('protocol_violations')}, config {c['session'].get('protocol_violations')}")
# Tokens lost: the client keeps every token the server sent, except (a) what a reset
# discards from the client's socket (TCP drops its receive queue on RST: counted exactly,
# the server sent 3) and (b) at the end of the run, per stream the client cuts: the token
# on the wire when it cancelled, the one the server's next write put in its socket before
# our close came back as a reset (its write after that fails and is not counted), and on a
# loaded machine one more written while our close was on its way (a clean CI run lost 9 on
# 4 cut streams). Three per cut stream; a token lost anywhere else still fails.
IN_FLIGHT_LOSS = 3
client_total = sum(int(t["n_tokens"]) for t in toks)
server_total = sum(x["tokens_sent"] for x in served if x["max_tokens"] > 1)
reset_loss = sum(3 - int(r["completion_tokens"]) for r in reqs
                 if r["error"].startswith("connection lost"))
if client_total != s["tokens_received"]:
    problems.append(f"tokens.csv {client_total} != summary {s['tokens_received']}")
in_flight_loss = server_total - client_total - reset_loss
if not 0 <= in_flight_loss <= IN_FLIGHT_LOSS * aborted:
    problems.append(f"client kept {client_total} tokens, the server sent {server_total}: "
                    f"{in_flight_loss} lost beyond the {reset_loss} of resets, allowed "
                    f"{IN_FLIGHT_LOSS} x {aborted} streams cut at the end")
print(f"     {len(reqs)} requests, {sum(seen.values())} faults recorded "
      f"({', '.join(f'{k}: {v}' for k, v in seen.items())}), {len(ok_after)} normal answers "
      f"after the 503 burst; retries after 429/503 waited {min(waits or [0]):.2f}-"
      f"{max(waits or [0]):.2f} s; {violations} protocol violations from {liars} liar and "
      f"{overclaims} overclaim streams")
print(f"     {client_total} tokens kept of {server_total} sent: {reset_loss} discarded by "
      f"resets, {in_flight_loss} in flight at the end ({aborted} streams cut, allowed "
      f"{IN_FLIGHT_LOSS * aborted})")
# Where the stamps came from: the transport used, every event counted once; the raw
# transport's from the kernel (loopback always stamps), curl's from user space.
st = s.get("stamps", {})
counts = [st.get(k, -1) for k in ("kernel", "kernel_coalesced", "user")]
if st.get("transport") != transport or f.get("stamps") != st:
    problems.append(f"stamps {st} (fidelity.json: {f.get('stamps')}), want transport {transport}")
elif sum(counts) != len(toks):
    problems.append(f"stamps {st} count {sum(counts)} events, tokens.csv has {len(toks)}")
elif transport == "raw" and st["user"] != 0:
    problems.append(f"raw transport: {st['user']} user-space stamps on loopback")
elif transport == "curl" and st["user"] != len(toks):
    problems.append(f"curl transport: stamps {st}, want all user-space")
else:
    print(f"     stamps ({transport}): {st['kernel']} kernel, {st['kernel_coalesced']} kernel "
          f"coalesced, {st['user']} user-space")
for p in problems:
    print("FAIL faults:", p)
sys.exit(1 if problems else 0)
EOF
echo "ok   ($transport) 500, 429, 503 burst, malformed SSE, reset, error event, no [DONE]," \
  "stall, lies, a usage above the stream: each recorded, the run went on"
}
faults_case faults raw
faults_case faults_curl curl --transport curl

# ---- 2. SIGINT -------------------------------------------------------------------------------
sigint_run() { # NAME EXTRA_FLAGS...: start an embedded run, SIGINT it 3 s into its recording
  local name=$1; shift
  ( exec "$BIN" run --engine emulate --users 4 --duration 30s --warmup 0 --inject-at 1s \
      --inject-every 2s --prompt-tokens 2000 --out "$WORK/$name" "$@" \
      >"$WORK/$name.out" 2>"$WORK/$name.err" ) &
  RUN_PID=$!
  PIDS+=($RUN_PID)
}
wait_rows() { # FILE: until it has a few token rows (at most 30 s)
  for _ in $(seq 300); do
    [ -f "$1" ] && [ "$(wc -l <"$1")" -gt 20 ] && return 0
    sleep 0.1
  done
  fail "no token rows in $1"
}
stop_with_sigint() { # NAME: SIGINT, then exit 1 within 15 s and no server child left
  local name=$1 child
  child=$(pgrep -P "$RUN_PID" || true)
  kill -INT "$RUN_PID"
  local rc=0
  for _ in $(seq 150); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$RUN_PID" 2>/dev/null && fail "$name: still running 15 s after SIGINT"
  wait "$RUN_PID" || rc=$?
  [ "$rc" = 1 ] || fail "$name: exit $rc after SIGINT, want 1: $(tail -3 "$WORK/$name.err")"
  grep -q "interrupted" "$WORK/$name.err" || fail "$name: stderr does not say interrupted"
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then fail "$name: embedded server $child left running"; fi
  if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$WORK/$name.err"; then
    cat "$WORK/$name.err"; fail "$name: sanitizer report"
  fi
}
check_incomplete() {
  python3 - "$1" <<'EOF'
import csv, json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
c = json.load(open(f"{d}/config.json"))
rows = sum(int(t["n_tokens"]) for t in csv.DictReader(open(f"{d}/tokens.csv")))
assert s["complete"] is False and c["complete"] is False, "not marked incomplete"
assert rows > 0 and rows == s["tokens_received"], f"tokens.csv {rows} vs summary {s['tokens_received']}"
print(f"     {d}: complete false, {rows} tokens kept")
EOF
}
sigint_run sigint --no-baseline
wait_rows "$WORK/sigint/interference/tokens.csv"
sleep 2
stop_with_sigint sigint
check_incomplete "$WORK/sigint/interference"
echo "ok   SIGINT during the run: artifacts written, complete false, exit 1"

sigint_run sigint_baseline
wait_rows "$WORK/sigint_baseline/baseline/tokens.csv"
stop_with_sigint sigint_baseline
check_incomplete "$WORK/sigint_baseline/baseline"
[ ! -e "$WORK/sigint_baseline/interference" ] || fail "an interference run after an interrupted baseline"
[ ! -e "$WORK/sigint_baseline/comparison.json" ] || fail "a comparison against half a baseline"
echo "ok   SIGINT during the baseline: its artifacts written, complete false, no comparison, exit 1"

# ---- 3. kill -9 of the client ------------------------------------------------------------------
start_serve() { # NAME SERVE_FLAGS...: a separate emulated server; sets SERVE_PID and URL
  local name=$1; shift
  ( exec "$BIN" serve --engine emulate --port 0 "$@" >"$WORK/serve_$name.out" \
      2>"$WORK/serve_$name.err" ) &
  SERVE_PID=$!
  PIDS+=($SERVE_PID)
  for _ in $(seq 100); do grep -q 'listening on' "$WORK/serve_$name.out" && break; sleep 0.1; done
  URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/serve_$name.out" | head -1)
  [ -n "$URL" ] || fail "serve $* did not start"
}
start_serve default
python3 - "$BIN" "$URL" "$WORK/killed" <<'EOF'
import csv, os, signal, subprocess, sys, threading, time, urllib.request
binary, url, out = sys.argv[1:4]

def generated():
    body = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith("vllm:generation_tokens_total{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("no vllm:generation_tokens_total")

samples = []  # (monotonic s, server tokens generated)
stop = threading.Event()
def poll():
    while not stop.is_set():
        samples.append((time.monotonic(), generated()))
        time.sleep(0.05)
before = generated()
poller = threading.Thread(target=poll, daemon=True)
poller.start()
client = subprocess.Popen([binary, "run", "--target", url, "--no-baseline", "--users", "8",
                           "--duration", "30s", "--warmup", "0", "--inject-at", "1s",
                           "--inject-every", "2s", "--prompt-tokens", "2000", "--out", out],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tokens_csv = f"{out}/interference/tokens.csv"
deadline = time.monotonic() + 30
while time.monotonic() < deadline and not (os.path.exists(tokens_csv) and os.path.getsize(tokens_csv) > 1000):
    time.sleep(0.05)
time.sleep(4)
t_kill = time.monotonic()
client.send_signal(signal.SIGKILL)
client.wait(10)
time.sleep(0.3)
stop.set()
poller.join(5)
# Whole rows only: the last one may have been cut by the kill.
lines = open(tokens_csv).read().split("\n")
kept = sum(int(r["n_tokens"]) for r in csv.DictReader(lines[:-1]) if r["n_tokens"])
at = lambda t: max([g for s, g in samples if s <= t] or [before]) - before
one_second_before = at(t_kill - 1.0)
at_kill = at(t_kill + 0.3)  # samples every 50 ms: the first ones after the kill bound it
print(f"     kill -9 at {len(samples) * 0.05:.1f} s: tokens.csv kept {kept}; the server had "
      f"generated {one_second_before} one second before the kill, {at_kill} by 0.3 s after it")
# The probe's 1-token answer is generated but not recorded.
assert kept >= one_second_before - 1, "tokens.csv lost more than the last second"
assert kept <= at_kill, "tokens.csv holds tokens the server never generated"
EOF
kill "$SERVE_PID"
echo "ok   kill -9 of the client: tokens.csv lost less than the last second"

# ---- 4, 5. kill -9 many times; a full disk -------------------------------------------------------
# A 1B model on the emulated H100: ~35,000 tokens/s (0.8 MB/s of tokens.csv) with 64 users,
# so rows are written many times between any two kills, and a 512 KiB file fills in a second.
start_serve fast --model llama-3.2-1b
python3 - "$BIN" "$URL" "$WORK" <<'EOF'
import csv, io, json, os, random, signal, subprocess, sys, time
binary, url, work = sys.argv[1:4]
problems = []

def run_argv(out, duration):
    return [binary, "run", "--target", url, "--no-baseline", "--users", "64", "--duration",
            duration, "--warmup", "0", "--inject-at", "1s", "--inject-every", "2s",
            "--prompt-tokens", "2000", "--out", out]

PAGE = 4096
kernel_cuts = []  # the run directory of each file a SIGKILL cut at a page boundary

def whole_rows(what, path, fields, kill_cut_ok=False):
    """The file's rows (header included) if it ends with a newline and every row has its
    fields; else a problem noted and []. kill_cut_ok: a file cut by SIGKILL inside its last
    row at a page boundary is noted in kernel_cuts (report must drop that row) and its rows
    before the cut are checked."""
    data = open(path, "rb").read()
    if not data.endswith(b"\n"):
        if not (kill_cut_ok and len(data) % PAGE == 0 and b"\n" in data):
            problems.append(f"{what}: {os.path.basename(path)} ends inside a row ({len(data)} "
                            f"bytes, ends {data[-30:]!r})")
            return []
        kernel_cuts.append(os.path.dirname(path))
        print(f"     {what}: {os.path.basename(path)} cut inside its last row at {len(data)} "
              f"bytes, a page boundary (SIGKILL during a write of several pages)")
        data = data[:data.rindex(b"\n") + 1]
    rows = list(csv.reader(io.StringIO(data.decode())))
    bad = sum(1 for r in rows if len(r) != fields)
    if bad or not rows:  # the header at least (no request may have ended yet)
        problems.append(f"{what}: {os.path.basename(path)}: {bad} of {len(rows)} rows without "
                        f"{fields} fields")
        return []
    return rows

# 4. kill -9 at a random moment, 8 times: both files end with whole rows.
random.seed(15)
sizes = []
for i in range(8):
    d = f"{work}/kills/{i}/interference"
    client = subprocess.Popen(run_argv(f"{work}/kills/{i}", "30s"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (os.path.exists(f"{d}/tokens.csv") and
                                               os.path.getsize(f"{d}/tokens.csv") > 100000):
        time.sleep(0.02)
    time.sleep(random.uniform(0, 0.5))
    client.send_signal(signal.SIGKILL)
    client.wait(10)
    sizes.append(os.path.getsize(f"{d}/tokens.csv"))
    whole_rows(f"kill {i}", f"{d}/tokens.csv", 5, kill_cut_ok=True)
    whole_rows(f"kill {i}", f"{d}/requests.csv", 12, kill_cut_ok=True)
print(f"     8 kills: tokens.csv {min(sizes)}-{max(sizes)} bytes, every file whole rows: "
      f"{not problems and not kernel_cuts}")
# A cut the kernel made: report reads the run, drops that one row with its warning and
# says the run is incomplete (one warning per run: "dropped N rows", N the files cut).
for d in sorted(set(kernel_cuts)):
    n_cut = kernel_cuts.count(d)
    rep = subprocess.run([binary, "report", os.path.dirname(d), "--no-report"],
                         capture_output=True, text=True, timeout=120)
    want = f"dropped {n_cut} row{'' if n_cut == 1 else 's'} cut short"
    summary = f"{d}/summary.json"
    complete = json.load(open(summary)).get("complete") if os.path.exists(summary) else None
    if rep.returncode != 0 or want not in rep.stderr or complete is not False:
        problems.append(f"report on the cut run {d}: exit {rep.returncode}, complete "
                        f"{complete}, stderr {rep.stderr.strip()[-300:]!r} (want {want!r})")
    else:
        print(f"     report on {d}: {want}, complete false")

# 5. `ulimit -f 512`: a write past 512 KiB fails with EFBIG (SIGXFSZ ignored), as a full
# disk's would with ENOSPC. The run must stop at once (exit 1, the reason on stderr's last
# line), not stream on to the end of its 20 s; the rows written before stay whole.
LIMIT_KIB = 512
tokens = f"{work}/full/interference/tokens.csv"
t_start = time.monotonic()
client = subprocess.Popen(["bash", "-c", f"trap '' XFSZ; ulimit -f {LIMIT_KIB}; exec \"$0\" \"$@\""]
                          + run_argv(f"{work}/full", "20s"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
size, t_change = -1, t_start
deadline = t_start + 40
while client.poll() is None and time.monotonic() < deadline:
    now_size = os.path.getsize(tokens) if os.path.exists(tokens) else -1
    if now_size != size:
        size, t_change = now_size, time.monotonic()
    time.sleep(0.01)
t_exit = time.monotonic()
if client.poll() is None:
    client.kill()
rc = client.wait(10)
err = client.stderr.read().strip().splitlines()
last = err[-1] if err else ""
if rc != 1:
    problems.append(f"full disk: exit {rc}, want 1")
if "cannot write" not in last or "File too large" not in last:
    problems.append(f"full disk: stderr's last line does not say why: {last!r}")
# The failed write is at most one flush (250 ms) after tokens.csv last changed size.
if t_exit - t_change > 1.0:
    problems.append(f"full disk: exited {t_exit - t_change:.2f} s after tokens.csv's last "
                    "write, want <= 1 s")
rows = whole_rows("full disk", tokens, 5)
whole_rows("full disk", f"{work}/full/interference/requests.csv", 12)
if len(rows) < 1000 or os.path.getsize(tokens) > LIMIT_KIB * 1024:
    problems.append(f"full disk: tokens.csv {len(rows)} rows, {os.path.getsize(tokens)} bytes")
print(f"     ulimit -f {LIMIT_KIB}: exit {rc} {t_exit - t_start:.2f} s after start, "
      f"{t_exit - t_change:.2f} s after tokens.csv's last write; {len(rows) - 1} whole rows "
      f"kept; stderr: {last}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
EOF
kill "$SERVE_PID"
echo "ok   kill -9 at 8 random moments: every row whole (a row SIGKILL cut at a page boundary dropped by report)"
echo "ok   a full disk: the run stopped at once, exit 1, the rows before kept"
echo "0 failed"
