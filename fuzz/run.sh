#!/usr/bin/env bash
# Build and run the fuzzers: fuzz/run.sh WORK_DIR SECONDS [TARGET...]
#
# Each target runs for SECONDS (libFuzzer -max_total_time) on its seed corpus
# (fuzz/corpus/<target>, read only) plus WORK_DIR/corpus/<target>, where new inputs
# accumulate between runs. One line of figures per target (runs, execs/s, edges covered,
# corpus size). A crash, a leak or a sanitizer report fails the run: the input is kept as
# WORK_DIR/crash-<target>-* and printed in hex; reproduce with WORK_DIR/<target> FILE.
# Exit 77 (skipped) when clang or libFuzzer are missing (fuzz/build.sh says which).
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:?usage: fuzz/run.sh WORK_DIR SECONDS [TARGET...]}
SECONDS_EACH=${2:?usage: fuzz/run.sh WORK_DIR SECONDS [TARGET...]}
shift 2
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(fuzz_sse_split fuzz_sse_chunk fuzz_request fuzz_units fuzz_reqframe fuzz_http1 fuzz_trace fuzz_gguf fuzz_prom fuzz_redact fuzz_proxy_request)
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

bash "$SRC/fuzz/build.sh" "$WORK"
rc=$?
[ "$rc" = 0 ] || exit "$rc"

# The harnesses allocate per input; without a quarantine cap ASan's RSS grows to ~1 GB,
# which a parallel ctest on a small machine does not need.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=16:detect_leaks=1"
failed=0
for t in "${TARGETS[@]}"; do
  [ -x "$WORK/$t" ] || { echo "fuzz: unknown target $t" >&2; failed=1; continue; }
  mkdir -p "$WORK/corpus/$t"
  log="$WORK/$t.log"
  # -timeout: one input taking > 10 s is a hang; -rss_limit_mb bounds a runaway allocation.
  "$WORK/$t" "$WORK/corpus/$t" "$SRC/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" \
    -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$WORK/crash-$t-" >"$log" 2>&1
  status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -a -o 'cov: [0-9]*' "$log" | tail -1)
  corp=$(grep -a -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1)
  if [ "$status" != 0 ]; then
    failed=1
    echo "FAIL $t (exit $status):"
    grep -a -E 'ERROR|SUMMARY|runtime error|fuzz_[a-z_]*: ' "$log" | head -8
    for f in "$WORK"/crash-"$t"-* "$WORK"/leak-"$t"-* "$WORK"/timeout-"$t"-* "$WORK"/oom-"$t"-*; do
      [ -e "$f" ] || continue
      echo "  input $f:"; head -c 512 "$f" | od -A d -c | head -12
    done
  else
    echo "ok   $t: ${runs:-?} runs in ${SECONDS_EACH} s, ${speed:-?} exec/s, ${cov:-cov: ?} edges, ${corp:-corp: ?} corpus"
  fi
done
exit "$failed"
