#!/usr/bin/env bash
# The target's own metrics (docs/guide/measure-your-server.md, "The server's own metrics"):
# `run --target` against `stallscope serve --engine emulate` scrapes its /metrics every
# 250 ms into each run's server_metrics.csv, aligned to t = 0, and report.html draws it
# under the timeline.
# Checks: the header; the row count against the scrape period (rule below); times rising,
# each response after its request; the queue (running + waiting) rises after the injection
# above its level before it; the injection's 8,000 prompt tokens counted within 1 s of its
# send while no baseline interval counts as many; config.json's session records the URL and
# the counts; the HTML has the section and the plot. Then the ways it goes on without: a
# URL that answers 404, one that answers 200 with HTML (not the format), each said in one
# line with the run still exit 0 and no CSV; a client killed mid-run keeps whole rows; and
# --scrape-metrics on for the embedded server.
#
# Row count rule: the scraper runs on an absolute 250 ms schedule from before the warm-up;
# a run of D seconds writes the scrapes completed in [t = 0, t = D]: D / 0.25 s slots, one
# more when a slot falls on each end. Scrapes that overrun their period skip a slot, so on
# a loaded machine up to 20 % fewer: the test accepts
# floor(0.8 x D / 0.25 s) - 1 <= rows <= D / 0.25 s + 1 (15..21 for 5 s).
set -euo pipefail
BIN=$1
WORK=$2
SRC=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=lib.bash
source "$SRC/tests/integration/lib.bash"
rm -rf "$WORK"
mkdir -p "$WORK"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
command -v python3 >/dev/null || skip_or_fail "python3 missing"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

timeout 120 "$BIN" serve --engine emulate --gpu h100-sxm --model llama-3.1-8b --policy mixed \
  --max-num-batched-tokens 16384 --host 127.0.0.1 --port 0 >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q 'listening on' "$WORK/serve.log" && break; sleep 0.1; done
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.log" | head -1)
[ -n "$URL" ] || { cat "$WORK/serve.log"; fail "serve did not start"; }

# 1. A pair against the target: each run its own server_metrics.csv.
timeout 120 "$BIN" run --target "$URL" --users 4 --duration 5s --warmup 1s --inject-at 2s \
  --inject-every 10s --prompt-tokens 8000 --inject-max-tokens 200 --out "$WORK/pair" \
  >"$WORK/pair.stdout" 2>"$WORK/pair.stderr" || { cat "$WORK/pair.stderr"; fail "the run failed"; }
for run in baseline interference; do
  grep -q "^\[$run\] server metrics: [0-9]* rows in server_metrics.csv from [0-9]* scrapes of $URL/metrics, 0 failed" \
    "$WORK/pair.stderr" || { cat "$WORK/pair.stderr"; fail "no metrics line for $run"; }
done
pass "each run says how many rows it scraped from $URL/metrics"

python3 - "$WORK/pair" <<'EOF'
import csv, json, os, statistics, sys
pair = sys.argv[1]
PERIOD_S, DURATION_S = 0.25, 5.0
HEADER = "t_ns,t_sent_ns,running,waiting,kv_usage,prompt_tokens,generation_tokens,steps"
bad = []
def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        bad.append(what)
def num(v):
    return float(v) if v != "" else None

rows = {}
for run in ("baseline", "interference"):
    path = os.path.join(pair, run, "server_metrics.csv")
    check(os.path.exists(path), f"{run}/server_metrics.csv exists")
    with open(path) as f:
        check(f.readline().strip() == HEADER, f"{run}: header {HEADER}")
    r = list(csv.DictReader(open(path)))
    rows[run] = r
    expect = DURATION_S / PERIOD_S
    lo, hi = int(0.8 * expect) - 1, int(expect) + 1
    check(lo <= len(r) <= hi, f"{run}: {len(r)} rows, {lo}..{hi} for {DURATION_S} s at {PERIOD_S} s")
    t = [int(x["t_ns"]) for x in r]
    sent = [int(x["t_sent_ns"]) for x in r]
    check(t[0] >= 0 and all(b > a for a, b in zip(t, t[1:])) and t[-1] <= DURATION_S * 1e9,
          f"{run}: t_ns from 0 to the run's end, rising")
    check(all(0 < d - s < 1_000_000_000 for d, s in zip(t, sent)),
          f"{run}: each response complete after its request, within the 1 s timeout")
    spacing = statistics.median(b - a for a, b in zip(t, t[1:])) / 1e9
    check(0.2 <= spacing <= 0.3, f"{run}: median spacing {spacing * 1e3:.0f} ms (period 250 ms)")
    check(all(x["running"] != "" and x["waiting"] != "" and x["kv_usage"] != "" for x in r),
          f"{run}: running, waiting, kv_usage in every row (vLLM's names)")
    check(all(x["generation_tokens"] != "" for x in r[1:]), f"{run}: generation_tokens per interval")
    cfg = json.load(open(os.path.join(pair, run, "config.json")))
    s = cfg.get("session", {})
    check(s.get("metrics_url", "").endswith("/metrics") and s.get("metrics_rows") == len(r)
          and s.get("metrics_scrapes", 0) >= len(r) and s.get("metrics_scrape_failures") == 0,
          f"{run}: config.json session: {s.get('metrics_url')}, {s.get('metrics_scrapes')} scrapes, "
          f"{s.get('metrics_scrape_failures')} failed, {s.get('metrics_rows')} rows")

summary = json.load(open(os.path.join(pair, "interference", "summary.json")))
t_inj = summary["injections"][0]["t_send_s"] * 1e9
x = rows["interference"]
def queue(row):
    return num(row["running"]) + num(row["waiting"])
before = [queue(r) for r in x if int(r["t_ns"]) < t_inj]
after = [queue(r) for r in x if t_inj <= int(r["t_ns"]) <= t_inj + 1.5e9]
check(before and after and max(after) >= max(before) + 1,
      f"queue (running + waiting) {max(before) if before else None} before the injection, "
      f"up to {max(after) if after else None} within 1.5 s after it")
window = sum(num(r["prompt_tokens"]) or 0 for r in x if t_inj <= int(r["t_ns"]) <= t_inj + 1.0e9)
check(window >= 8000, f"{window:.0f} prompt tokens counted within 1 s of the injection (8000 sent)")
base_max = max(num(r["prompt_tokens"]) or 0 for r in rows["baseline"])
check(base_max < 8000, f"no baseline interval counts that many ({base_max:.0f} at most)")
html = open(os.path.join(pair, "report.html")).read()
check('id="server-metrics"' in html and "Inside the server" in html, "report.html has the section")
check(os.path.exists(os.path.join(pair, "plots", "server_metrics.svg")), "plots/server_metrics.svg")
# The same time axis at the same pixels: the injection's marker at one x in both charts.
import re
def marker_x(name):
    svg = open(os.path.join(pair, "plots", name + ".svg")).read()
    return {round(float(x), 2) for x in re.findall(r'stroke:rgb\(60%,0%,60%\)[^>]*d="M ([0-9.]+)', svg)}
tl, sm = marker_x("timeline"), marker_x("server_metrics")
check(len(tl) == 1 and tl == sm, f"the injection marker at x = {tl} px in the timeline, {sm} px below it")
sys.exit(1 if bad else 0)
EOF

# 2. A URL that answers 404: one line, and the run goes on without.
SHORT=(--no-baseline --users 2 --duration 2s --warmup 0.5s --inject-at 1s --prompt-tokens 2000)
timeout 60 "$BIN" run --target "$URL" "${SHORT[@]}" --scrape-metrics "$URL/nope" \
  --out "$WORK/404" >"$WORK/404.stdout" 2>"$WORK/404.stderr" || {
  cat "$WORK/404.stderr"; fail "a run with a 404 metrics URL failed"; }
grep -q "server metrics: not scraped, going on without: GET $URL/nope: HTTP 404" "$WORK/404.stderr" ||
  { cat "$WORK/404.stderr"; fail "the 404 was not said"; }
[ "$(grep -c 'server metrics' "$WORK/404.stderr")" = 1 ] || fail "more than one line about it"
[ -e "$WORK/404/interference/tokens.csv" ] || fail "the run wrote no tokens.csv"
[ ! -e "$WORK/404/interference/server_metrics.csv" ] || fail "a server_metrics.csv without a scrape"
grep -q 'id="server-metrics"' "$WORK/404/report.html" && fail "a section without metrics"
url=$(json "$WORK/404/interference/config.json" 'repr(j["session"]["metrics_url"])')
[ "$url" = "''" ] || fail "metrics_url set: $url"
pass "a 404 metrics URL: said in one line, the run went on (exit 0), no CSV, no section"

# 3. A server that answers 200 but not with the exposition format (an HTML page), and
# records the credentials the scrape carried: the run's own --api-key and --header, sent
# from memory, never written to an artifact.
python3 "$PY_DIR/metrics_page_server.py" "$WORK/www.port" "$WORK/www.headers" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/www.port" ] && break; sleep 0.1; done
WWW_PORT=$(cat "$WORK/www.port" 2>/dev/null || true)
[ -n "$WWW_PORT" ] || fail "the HTML server did not start"
timeout 60 "$BIN" run --target "$URL" "${SHORT[@]}" --scrape-metrics "http://127.0.0.1:$WWW_PORT/m" \
  --api-key sk-scrape-7d1e --header 'X-Token: xtok-9f3c' \
  --out "$WORK/html" >"$WORK/html.stdout" 2>"$WORK/html.stderr" || {
  cat "$WORK/html.stderr"; fail "a run with a non-metrics URL failed"; }
grep -q "server metrics: not scraped, going on without: GET http://127.0.0.1:$WWW_PORT/m: not the Prometheus text format (line 1, column 1: a metric name expected)" \
  "$WORK/html.stderr" || { cat "$WORK/html.stderr"; fail "the wrong format was not said"; }
[ -e "$WORK/html/interference/tokens.csv" ] || fail "the run wrote no tokens.csv"
[ ! -e "$WORK/html/interference/server_metrics.csv" ] || fail "a server_metrics.csv from HTML"
grep -qx "/m Bearer sk-scrape-7d1e xtok-9f3c" "$WORK/www.headers" ||
  { cat "$WORK/www.headers"; fail "the scrape did not carry the run's key and header"; }
if grep -rl -e sk-scrape-7d1e -e xtok-9f3c "$WORK/html" "$WORK/html.stdout" "$WORK/html.stderr"; then
  fail "a secret in an artifact (above)"
fi
pass "a 200 that is not the format: said in one line, the run went on; the scrape carried the key and header, no artifact holds them"

# 3b. /metrics answered with a redirect to /metrics/ (vLLM before it routed the path itself):
# the probe follows that one redirect and the run scrapes the URL that answered.
timeout 60 "$BIN" run --target "$URL" "${SHORT[@]}" --scrape-metrics "http://127.0.0.1:$WWW_PORT/redir" \
  --out "$WORK/redir" >"$WORK/redir.stdout" 2>"$WORK/redir.stderr" || {
  cat "$WORK/redir.stderr"; fail "a run with a redirecting metrics URL failed"; }
grep -q "server metrics: [0-9]* rows in server_metrics.csv from [0-9]* scrapes of http://127.0.0.1:$WWW_PORT/redir/, 0 failed" \
  "$WORK/redir.stderr" || { cat "$WORK/redir.stderr"; fail "the redirect was not followed"; }
url=$(json "$WORK/redir/interference/config.json" 'j["session"]["metrics_url"]')
[ "$url" = "http://127.0.0.1:$WWW_PORT/redir/" ] || fail "metrics_url $url"
python3 - "$WORK/redir/interference/server_metrics.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) >= 5 and all(r["running"] == "3" and r["waiting"] == "" for r in rows), rows[:3]
print(f"ok: /redir -> /redir/ followed: {len(rows)} rows, running 3, waiting empty (not served)")
PY

# 4. A client killed mid-run (SIGKILL: no cleanup) leaves whole rows: each went out in one
# write(2) as it was scraped.
"$BIN" run --target "$URL" --no-baseline --users 2 --duration 20s --warmup 0.5s --inject-at 1s \
  --prompt-tokens 2000 --out "$WORK/killed" >"$WORK/killed.stdout" 2>"$WORK/killed.stderr" &
KILLED=$!
PIDS+=("$KILLED")
CSV="$WORK/killed/interference/server_metrics.csv"
for _ in $(seq 200); do
  [ -f "$CSV" ] && [ "$(wc -l <"$CSV")" -ge 6 ] && break
  sleep 0.05
done
sleep 0.13 # off the 250 ms grid of the rows, at a random point of the next scrape
kill -9 "$KILLED"
wait "$KILLED" 2>/dev/null || true
python3 - "$CSV" <<'EOF2'
import sys
data = open(sys.argv[1], "rb").read()
assert data.endswith(b"\n"), f"the file ends inside a row: {data[-40:]!r}"
lines = data.decode().splitlines()
assert len(lines) >= 6, f"{len(lines)} lines: the run was killed before 5 rows"
assert all(len(l.split(",")) == 8 for l in lines), "a row without its 8 columns"
print(f"ok: killed mid-run (SIGKILL): {len(lines) - 1} whole rows kept")
EOF2

# 5. The embedded server scrapes only when asked (its step log says more).
timeout 60 "$BIN" run --engine emulate --gpu h100-sxm --model llama-3.1-8b "${SHORT[@]}" \
  --scrape-metrics on --out "$WORK/embedded" >"$WORK/embedded.stdout" 2>"$WORK/embedded.stderr" || {
  cat "$WORK/embedded.stderr"; fail "the embedded run with --scrape-metrics on failed"; }
lines=$(wc -l <"$WORK/embedded/interference/server_metrics.csv")
rows=$((lines - 1))
[ "$rows" -ge 5 ] || fail "embedded --scrape-metrics on: $rows rows for 2 s"
grep -q 'id="server-metrics"' "$WORK/embedded/report.html" || fail "no section for the embedded run"
pass "embedded --scrape-metrics on: $rows rows, the section drawn"
echo "0 failed"
