#!/usr/bin/env bash
# The load generator's threads beside the server (issue 22, defect 9: --client-threads 2
# beside the embedded server on 2 cores made the stamps 10x worse, and the default counted
# the machine's CPUs, not the ones taskset gives): the default is the CPUs of the process's
# affinity mask the embedded server leaves, recorded in config.json and said with the run's
# setup; an explicit value that, with the server's threads, wants more CPUs than there are is
# warned about once. Nothing here depends on timing: the decision and its words only.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || skip_or_fail "python3 is missing"
command -v taskset >/dev/null || skip_or_fail "taskset (util-linux) is missing"
rm -rf "$dir"; mkdir -p "$dir"
read -r cpu0 cpu1 < <(python3 -c "import os; c = sorted(os.sched_getaffinity(0)); print(*c[:2])")
if [ -z "${cpu1:-}" ]; then
  echo "SKIP: one CPU available: no second affinity to compare"
  exit 77
fi
short=(--users 2 --duration 1s --warmup 0)
threads() { json "$1/config.json" "j['client']['threads'], j['client']['threads_given']"; }

# The default beside the embedded emulated server on two CPUs: one loop, no warning.
taskset -c "$cpu0,$cpu1" "$bin" run --engine emulate "${short[@]}" --no-inject --out "$dir/two" \
    >"$dir/two.out" 2>&1 || { tail -20 "$dir/two.out"; fail "run on two CPUs"; }
[ "$(threads "$dir/two/traffic")" = "1 False" ] || fail "two CPUs: $(threads "$dir/two/traffic")"
grep -qF "[traffic] client: 1 event loop (the default; 2 CPUs available, 1 busy in the embedded emulate server)" \
    "$dir/two.out" || { cat "$dir/two.out"; fail "two CPUs: the decision is not said"; }
! grep -q "warning: --client-threads" "$dir/two.out" || fail "two CPUs: a warning for the default"
pass "two CPUs, emulate: $(grep -o 'client: 1 event loop.*' "$dir/two.out")"

# --client-threads 2 there: 3 busy threads on 2 CPUs, warned once over the baseline and the
# interference run.
taskset -c "$cpu0,$cpu1" "$bin" run --engine emulate "${short[@]}" --inject-at 500ms --prompt-tokens 1k \
    --client-threads 2 --out "$dir/over" >"$dir/over.out" 2>&1 ||
  { tail -20 "$dir/over.out"; fail "run --client-threads 2"; }
[ "$(threads "$dir/over/baseline")" = "2 True" ] || fail "--client-threads 2: $(threads "$dir/over/baseline")"
warned=$(grep -c "^stallscope: warning: --client-threads 2 beside the embedded emulate server's 1 busy thread: 3 threads on 2 CPUs" "$dir/over.out" || true)
[ "$warned" = 1 ] || { cat "$dir/over.out"; fail "--client-threads 2 on two CPUs: warned $warned times, want once"; }
pass "$(grep -o 'warning: --client-threads 2.*' "$dir/over.out")"

# A --target on one CPU: the client gets that one CPU, not the machine's count.
BIN=$bin DIR=$dir
. "$(dirname "$0")/serve_lib.bash"
start_server target
taskset -c "$cpu0" "$bin" run --target "http://127.0.0.1:$PORT" "${short[@]}" --no-inject \
    --out "$dir/remote" >"$dir/remote.out" 2>&1 || { tail -20 "$dir/remote.out"; fail "run --target on one CPU"; }
stop_server
[ "$(threads "$dir/remote/traffic")" = "1 False" ] ||
  fail "--target on one CPU: $(threads "$dir/remote/traffic") client threads, want 1"
grep -qF "client: 1 event loop (the default; 1 CPU available, the server runs elsewhere)" "$dir/remote.out" ||
  { cat "$dir/remote.out"; fail "--target on one CPU: the decision is not said"; }
pass "--target under taskset -c $cpu0: one client thread"
