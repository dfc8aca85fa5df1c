#!/usr/bin/env bash
# ctest: run-serial
# The lesson through `stallscope proxy`, scraped by a real Prometheus: `run --target` the
# proxy -> the proxy -> `serve --engine emulate` (H100, Llama 3.1 8B, one-step prefill), 32
# users for 10 s with an 8,000-token prompt at 2, 5 and 8 s, while Prometheus (Debian's
# package, started here on loopback, scraping the admin port every second) watches.
# Checks (the issue's goals for the lesson):
#  1. the proxy's stall count, its prefill stalls, max gap and gap p50 (its --out rows over
#     run's window, reported by `stallscope report --from --to`), and the prefill stalls its
#     /metrics counted live, within 5 % of what `run` measured at the client;
#  2. every prefill stall names an injected prompt (about 8,000 tokens) first among its
#     culprits, and the culprit histogram counted exactly the injections (3, 8,000 tokens
#     each as the server's usage said);
#  3. Prometheus's HTTP API answers sum(stallscope_proxy_stalls_total) with the count the
#     proxy's /metrics shows, and the recording rules of deploy/prometheus load;
#  4. the exposition is well-formed (promtool check metrics), every metric of
#     docs/reference/proxy-metrics.md's table is in it, and /health answers.
# Without prometheus/promtool: a FAILURE as root or with CI=true (make test installs them),
# skipped (exit 77) otherwise.
set -euo pipefail
BIN=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 ||
  skip_or_fail "prometheus and promtool are not installed (Debian's prometheus package)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"

SERVE_PID= PROXY_PID= PROM_PID=
cleanup() {
  for pid in $PROM_PID $PROXY_PID $SERVE_PID; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

start_serve "$BIN" "$WORK/serve.log" --engine emulate --gpu h100-sxm --model llama-3.1-8b \
  --policy mixed --max-num-batched-tokens 16384
SERVE_PID=$serve_pid
[ -n "$url" ] || { cat "$WORK/serve.log"; fail "serve did not start"; }

# Bounded by its own --duration, not by timeout(1), which passes the SIGTERM below on to the
# proxy and again to its process group: the second could land after the proxy restored the
# default action on its way out (exit 143 instead of 0, one run in a few here).
"$BIN" proxy --duration 120s --upstream "$url" --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
  --ready-file "$WORK/ready" --out "$WORK/pout" --quiet >"$WORK/proxy.log" 2>&1 &
PROXY_PID=$!
for _ in $(seq 100); do [ -s "$WORK/ready" ] && break; sleep 0.1; done
[ -s "$WORK/ready" ] || { cat "$WORK/proxy.log"; fail "the proxy did not start"; }
read -r PORT ADMIN <"$WORK/ready"
pass "proxy on 127.0.0.1:$PORT, admin $ADMIN"

# Prometheus on loopback, scraping the admin port every second, with our rules loaded.
PROM_PORT=$(free_port)
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $SRC/deploy/prometheus/stallscope_proxy.rules.yml
scrape_configs:
  - job_name: stallscope-proxy
    static_configs:
      - targets: ['127.0.0.1:$ADMIN']
EOF
timeout 120 prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" || { tail -20 "$WORK/prometheus.log"; fail "prometheus did not get ready"; }
pass "prometheus on 127.0.0.1:$PROM_PORT"

timeout 120 "$BIN" run --target "http://127.0.0.1:$PORT" --users 32 --duration 10s --inject-at 2s \
  --inject-every 3s --prompt-tokens 8000 --warmup 1s --no-baseline --out "$WORK/run" \
  >"$WORK/run.out" 2>&1 || { tail -30 "$WORK/run.out"; fail "run through the proxy failed"; }
sleep 0.5 # the last stalls' windows are known by now (a stall waits at most one threshold)
curl -fsS "http://127.0.0.1:$ADMIN/metrics" >"$WORK/metrics.txt" || fail "no /metrics"
curl -fsS "http://127.0.0.1:$ADMIN/health" | grep -q '"status":"ok"' || fail "/health"
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.txt" 2>&1 ||
  { cat "$WORK/promtool.txt"; fail "promtool check metrics refused the exposition"; }
pass "/metrics well-formed (promtool check metrics), /health ok"

# Stop the proxy so its files are whole, then report its rows.
kill "$PROXY_PID"
wait "$PROXY_PID" || fail "the proxy did not stop cleanly on SIGTERM"
PROXY_PID=
# The proxy's rows over run's own window (run's t = 0 and duration, placed on the wall clock
# through the proxy's session: both read this machine's CLOCK_MONOTONIC).
read -r FROM TO < <(python3 - "$WORK" <<'PY'
import glob, json, sys
w = sys.argv[1]
px = json.load(open(glob.glob(f"{w}/pout/*/proxy.json")[0]))
cfg = json.load(open(f"{w}/run/interference/config.json"))
dur = json.load(open(f"{w}/run/interference/summary.json"))["duration_s"]
t0 = px["t0_unix_ns"] + cfg["session"]["t0_monotonic_ns"] - px["t0_monotonic_ns"]
t1 = t0 + int(dur * 1e9)
print(f"@{t0 // 10**9}.{t0 % 10**9:09d} @{t1 // 10**9}.{t1 % 10**9:09d}")
PY
)
"$BIN" report "$WORK/pout" --from "$FROM" --to "$TO" --out "$WORK/window" --json \
  >"$WORK/window.json.out" 2>"$WORK/report.err" || { cat "$WORK/report.err"; fail "report of the proxy's rows"; }
pass "report of the proxy's rows over run's window ($FROM to $TO) in $WORK/window"

python3 - "$WORK" "$SRC/docs/reference/proxy-metrics.md" <<'PY' || fail "the proxy's figures against run's"
import csv, glob, json, re, sys
work, doc = sys.argv[1], sys.argv[2]
metrics = {}
for line in open(f"{work}/metrics.txt"):
    if line.startswith("#") or not line.strip():
        continue
    name_labels, value = line.rsplit(" ", 1)
    metrics[name_labels] = float(value)
def m(prefix):
    return sum(v for k, v in metrics.items() if k.startswith(prefix))
ok = True
def check(what, cond, detail):
    global ok
    print(("ok: " if cond else "FAIL: ") + what + ": " + detail, file=sys.stdout if cond else sys.stderr)
    ok &= bool(cond)
run = json.load(open(f"{work}/run/interference/summary.json"))
win = json.load(open(f"{work}/window/summary.json"))
stalls_run = run["stalls"]["count"]
prefill_run = run["attribution"]["by_cause"]["prefill"]["stalls"]
stalls_px = m("stallscope_proxy_stalls_total{")
prefill_px = m('stallscope_proxy_stalls_total{') - sum(v for k, v in metrics.items() if k.startswith("stallscope_proxy_stalls_total{") and 'cause="prefill"' not in k)
def within(a, b, f=0.05):
    return abs(a - b) <= f * max(abs(b), 1e-9)
# The proxy's rows over run's window, by the same rule (5 x the window's median gap):
stalls_win = win["stalls"]["count"]
prefill_win = win["attribution"]["by_cause"]["prefill"]["stalls"]
# What each side counted, for a failure to say where the difference lies: the threshold (5 x
# its own median gap), the stalls aligned with an injection, and the causes of the others.
def tally(s):
    causes = ", ".join(f"{k} {v['stalls']}" for k, v in s["attribution"]["by_cause"].items() if v.get("stalls"))
    return (f"{s['stalls']['count']} (above {s['stalls']['threshold_ms']:.2f} ms, "
            f"{s['stalls']['aligned']} aligned; {causes})")
check("stall count (the proxy's rows over run's window)", stalls_run > 0 and within(stalls_win, stalls_run),
      f"proxy {tally(win)}, run {tally(run)}")
check("prefill stalls (the same)", prefill_run > 0 and within(prefill_win, prefill_run), f"proxy {prefill_win}, run {prefill_run}")
# live, as /metrics counted them (5 x the rolling median, the proxy's whole life):
check("prefill stalls counted live", within(prefill_px, prefill_run), f"proxy {prefill_px:.0f}, run {prefill_run}")
check("max gap", within(win["itl_ms"]["max"], run["itl_ms"]["max"]), f"proxy {win['itl_ms']['max']:.2f} ms, run {run['itl_ms']['max']:.2f} ms")
check("gap p50", within(win["itl_ms"]["p50"], run["itl_ms"]["p50"]), f"proxy {win['itl_ms']['p50']:.3f} ms, run {run['itl_ms']['p50']:.3f} ms")
n_inj = len(run["injections"])
cc = m("stallscope_proxy_culprit_prompt_tokens_count{")
cs = m("stallscope_proxy_culprit_prompt_tokens_sum{")
check("culprits are the injections", n_inj == 3 and cc == n_inj and abs(cs / max(cc, 1) - 8000) <= 100,
      f"{cc:.0f} culprit(s), {cs:.0f} prompt tokens in all, {n_inj} injections")
rows = []
for path in glob.glob(f"{work}/pout/*/*/stalls.csv"):
    rows += list(csv.DictReader(open(path)))
pre = [r for r in rows if r["cause"] == "prefill"]
named = [r for r in pre if r["culprits"] and abs(int(r["culprits"].split(";")[0].split(":")[1]) - 8000) <= 100]
check("every prefill stall names an injected prompt first", len(pre) > 0 and len(named) == len(pre),
      f"{len(named)} of {len(pre)} rows of stalls.csv")
check("stalls.csv holds every stall", len(rows) == stalls_px, f"{len(rows)} rows, {stalls_px:.0f} counted")
table = re.findall(r"^\| `?(stallscope_proxy_[a-z_]+)`? \|", open(doc).read(), re.M)
names = {k.split("{")[0] for k in metrics}
missing = [t for t in table if not ({t, t + "_bucket", t + "_count"} & names)]
check("every metric of proxy-metrics.md is exported", len(table) >= 10 and not missing,
      f"{len(table)} in the table, missing {missing}")
sys.exit(0 if ok else 1)
PY

# What Prometheus scraped, through its HTTP API: the last scrape of the proxy (it stopped after
# the figures above, and was scraped every second before).
want=$(python3 - "$WORK/metrics.txt" <<'PY'
import sys
print(int(sum(float(l.rsplit(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("stallscope_proxy_stalls_total{"))))
PY
)
got=
for _ in $(seq 100); do
  got=$(curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/query" \
        --data-urlencode 'query=sum(last_over_time(stallscope_proxy_stalls_total[1m]))' 2>/dev/null |
        python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else "")' || true)
  [ "$got" = "$want" ] && break
  sleep 0.2
done
[ "$got" = "$want" ] || fail "Prometheus's API says $got stalls, the proxy's /metrics said $want"
pass "Prometheus's API: sum(stallscope_proxy_stalls_total) = $got, as the proxy said"
rules=$(curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/rules" | python3 -c '
import json,sys; g=json.load(sys.stdin)["data"]["groups"]; print(sum(len(x["rules"]) for x in g), sum(1 for x in g for r in x["rules"] if r.get("health")=="ok"))')
read -r n_rules n_ok <<<"$rules"
[ "$n_rules" -ge 7 ] && [ "$n_rules" = "$n_ok" ] || fail "Prometheus loaded $n_rules rules, $n_ok healthy"
pass "Prometheus loaded the $n_rules rules of deploy/prometheus, all healthy"
echo "proxy_lesson: all checks passed"
