#!/usr/bin/env bash
# A short, bounded fuzz run inside the test suite: the eleven libFuzzer targets of fuzz/
# (SSE splitter, SSE chunk decoder, the server's request parser and its request framing,
# the units parsers, the client's HTTP/1.1 response parser, the trace readers, the
# Prometheus text parser, the redaction rule, the proxy's request path: framing, head
# rewrite, body reading) built with clang into the scratch dir and run FUZZ_SHORT_SECONDS
# each (default 8) on the seed corpus. Fails on any crash or sanitizer report. Without clang
# or libFuzzer: a failure as root or with CI=true (scripts/deps.sh test installs clang and
# libclang-rt-14-dev there), skipped (exit 77, reason printed) otherwise. Longer runs: make
# fuzz (FUZZ_SECONDS=300 per target by default), figures in docs/results/fuzzing.md.
set -euo pipefail
BIN=$1 # unused: the fuzzers are built from the sources
WORK=$2
: "$BIN"
SRC=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"
rm -rf "$WORK"
mkdir -p "$WORK"
set +e
# The ctest environment asks ASan for leak checks; run.sh sets its own options.
bash "$SRC/fuzz/run.sh" "$WORK" "${FUZZ_SHORT_SECONDS:-8}"
rc=$?
set -e
# 77: fuzz/build.sh found no clang, no libFuzzer runtime or no jansson (it said which).
[ "$rc" != 77 ] || skip_or_fail "the fuzzers need clang with libFuzzer (clang, libclang-rt-14-dev)"
[ "$rc" = 0 ] || fail "a fuzzer found a problem (inputs kept in $WORK)"
echo "0 failed"
