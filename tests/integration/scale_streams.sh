#!/usr/bin/env bash
# Scale, the suite's short version: 1,000 concurrent closed-loop streams for 10 s against
# the embedded emulated server (bench/bench_scale.c: server in a child process, the load
# generator's stream client in this one). Fails if any request errs or any token is lost:
# per request, the tokens the client counted must equal the server's usage, and in all the
# server's vllm:generation_tokens_total. The 10,000-stream, 60 s run is `bench_scale` with
# no arguments (figures in docs/results/scale-10k-streams.md).
set -euo pipefail
BIN=$1
WORK=$2
mkdir -p "$WORK"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
SCALE=$(dirname "$BIN")/bench_scale
# bench/bench_*.c are targets of every build (CMakeLists.txt): a missing one is a broken
# build, not a reason to skip.
[ -x "$SCALE" ] || fail "$SCALE not built (cmake --build builds every bench_* target)"
# ASan's quarantine would hold every freed buffer of 1,000 streams (hundreds of MiB).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
set +e
timeout 120 "$SCALE" "${SCALE_STREAMS:-1000}" "${SCALE_SECONDS:-10}" 64 >"$WORK/scale.out" 2>"$WORK/scale.err"
RC=$?
set -e
cat "$WORK/scale.out"
if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$WORK/scale.err"; then
  cat "$WORK/scale.err"; fail "sanitizer report"
fi
[ "$RC" = 0 ] || { tail -5 "$WORK/scale.err"; fail "bench_scale exit $RC"; }
grep -q "ok: no token lost, no error" "$WORK/scale.out" || fail "no verdict line"
# The scale is the point: all the streams asked for, open at once (bench_scale also fails
# when they never were; here: not quietly fewer for a low descriptor limit).
want=${SCALE_STREAMS:-1000}
! grep -q "streams instead of" "$WORK/scale.out" || fail "fewer streams than $want"
grep -qE "at most $want streams open at once" "$WORK/scale.out" ||
  fail "$want streams were never open at once"
echo "0 failed"
