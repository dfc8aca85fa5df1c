# Shared helpers for every integration test (sourced; ctest registers only *.sh files).
# serve_lib.bash adds the serve_*.sh tests' server helpers on top of these.
# PY_DIR: the Python test servers and checkers (fault_server.py, hostile.py, serve_client.py
# ...), one folder; a script runs them as "$PY_DIR/NAME.py" or imports them with
# PYTHONPATH="$PY_DIR".
PY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/py" && pwd)"
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
# fail_later WHY: a failed check after which the test goes on to its other checks, so one
# run names every failure; failures_end NAME then fails the test if any check did.
FAILURES=0
fail_later() {
  echo "FAIL: $*" >&2
  FAILURES=$((FAILURES + 1))
}
failures_end() {
  [ "$FAILURES" = 0 ] || fail "$1: $FAILURES check(s) failed"
  echo "$1: all checks passed"
}
# skip_or_fail WHY: a tool this test needs is missing. `make test` installs the tools
# (scripts/deps.sh test) when run as root, and CI runs it as root with CI=true: there a
# missing tool is a broken set-up and the test FAILS, so it can never pass by not running.
# Elsewhere (not root, no CI) it is skipped: exit 77, ctest's SKIP_RETURN_CODE.
skip_or_fail() {
  if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
    fail "$1; as root or in CI \`make test\` installs it (scripts/deps.sh test): a broken set-up, not a skip"
  fi
  echo "SKIP: $1"
  exit 77
}
# json FILE EXPR: evaluate a python expression over the parsed JSON bound to `j`.
# start_serve BIN LOG ARGS...: `BIN serve --port 0 ARGS` (at the priority `run` gives its own
# server), its PID in $serve_pid and its URL in $url ("" when it printed none within 10 s).
start_serve() {
  local bin=$1 log=$2; shift 2
  timeout 120 nice -n -10 "$bin" serve --port 0 "$@" >"$log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 100); do grep -qs 'listening on' "$log" && break; sleep 0.1; done
  url=$(grep -os 'http://[0-9.]*:[0-9]*' "$log" | head -1)
}

# replace_once FILE FROM TO: FROM, found exactly once in FILE, replaced by TO (a test's
# mutant copy); 1, FILE untouched, when FROM is not there exactly once.
replace_once() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(1)
open(path, "w").write(text.replace(old, new))
PY
}

json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# check NAME PYTHON-BOOL-EXPR FILE...: files bound to a, b, c ...
check() {
  local name=$1 expr=$2; shift 2
  python3 - "$expr" "$@" <<'PY' || fail "$name"
import json, sys
expr = sys.argv[1]
env = {}
for i, path in enumerate(sys.argv[2:]):
    env["abcdefgh"[i]] = json.load(open(path))
ok = eval(expr, {}, env)
if not ok:
    # what was read, so a failure says why (the "measured" part when there is one)
    for k, v in env.items():
        shown = v.get("measured", v) if isinstance(v, dict) else v
        print(f"  {k}: {json.dumps(shown, sort_keys=True)[:3000]}", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
  pass "$name"
}
# free_port: a TCP port on 127.0.0.1 nobody listens on right now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# wait_http URL: 0 once URL answers 200, 1 after 30 s (bounded: 300 tries, 0.1 s apart).
wait_http() {
  for _ in $(seq 300); do
    curl -fsS -o /dev/null --max-time 1 "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# stop_pids PID...: SIGTERM each, wait up to 10 s (bounded) for all to exit, then SIGKILL
# what is left and say which: a process that outlives SIGTERM by 10 s is named in the log
# instead of holding the test until its own --duration ends.
stop_pids() {
  local pid left
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    left=
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for pid in $left; do
    echo "note: pid $pid ($(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-80)) outlived SIGTERM by 10 s: SIGKILL" >&2
    kill -9 "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
