#!/usr/bin/env bash
# A short, bounded fuzz run inside the test suite: the four libFuzzer targets of fuzz/
# (SSE splitter, SSE chunk decoder, the server's request parser, the units parsers) built
# with clang into the scratch dir and run FUZZ_SHORT_SECONDS each (default 15: about a
# minute in all) on the seed corpus. Fails on any crash or sanitizer report; skipped
# (exit 77, reason printed) without clang or libFuzzer. Longer runs: make fuzz
# (FUZZ_SECONDS=300 per target by default), figures in docs/reliability.md.
set -euo pipefail
BIN=$1 # unused: the fuzzers are built from the sources
WORK=$2
: "$BIN"
SRC=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
rm -rf "$WORK"
mkdir -p "$WORK"
set +e
# The ctest environment asks ASan for leak checks; run.sh sets its own options.
bash "$SRC/fuzz/run.sh" "$WORK" "${FUZZ_SHORT_SECONDS:-15}"
rc=$?
set -e
if [ "$rc" = 77 ]; then
  echo "SKIP: the fuzzers need clang with libFuzzer (scripts/deps.sh test installs them)"
  exit 77
fi
[ "$rc" = 0 ] || { echo "FAIL: a fuzzer found a problem (inputs kept in $WORK)"; exit 1; }
echo "0 failed"
