#!/usr/bin/env bash
# Build the libFuzzer targets: fuzz/build.sh OUT_DIR
#
# Each target is compiled straight from the few pure sources it exercises (no CMake core
# library: that would drag OpenBLAS, cairo, curl and libevent into every fuzzer), with
# clang -fsanitize=fuzzer,address,undefined. Exit 77 (ctest's "skipped") with the reason
# on stderr when clang or its libFuzzer runtime is missing; scripts/deps.sh test installs
# them (clang, libclang-rt-14-dev).
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: fuzz/build.sh OUT_DIR}
mkdir -p "$OUT"

CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
  for c in clang clang-14 clang-15 clang-16 clang-17 clang-18; do
    command -v "$c" >/dev/null 2>&1 && { CC=$c; break; }
  done
fi
[ -n "$CC" ] || { echo "fuzz: no clang on PATH (apt-get install clang libclang-rt-14-dev)" >&2; exit 77; }
pkg-config --exists jansson || { echo "fuzz: jansson (pkg-config) missing" >&2; exit 77; }
pkg-config --exists libevent || { echo "fuzz: libevent (pkg-config) missing" >&2; exit 77; }

FLAGS=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Werror -I"$SRC/src")
# Does this clang link libFuzzer at all? (clang without libclang-rt-*-dev does not.)
probe="$OUT/.probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' >"$probe"
if ! "$CC" "${FLAGS[@]}" "$probe" -o "$OUT/.probe" 2>"$OUT/.probe.err"; then
  echo "fuzz: $CC cannot link -fsanitize=fuzzer ($(head -1 "$OUT/.probe.err")); install libclang-rt-14-dev" >&2
  exit 77
fi
rm -f "$probe" "$OUT/.probe" "$OUT/.probe.err"

# shellcheck disable=SC2207
JANSSON_CFLAGS=($(pkg-config --cflags jansson))
# shellcheck disable=SC2207
JANSSON_LIBS=($(pkg-config --libs jansson))
S=$SRC/src
build() {
  local name=$1; shift
  "$CC" "${FLAGS[@]}" "${JANSSON_CFLAGS[@]}" "$SRC/fuzz/$name.c" "$@" "${JANSSON_LIBS[@]}" -lm \
    -o "$OUT/$name"
}
build fuzz_sse_split "$S/client/sse.c" &
build fuzz_sse_chunk "$S/client/sse.c" "$S/client/chunk.c" "$S/client/json_scan.c" "$S/common/err.c" \
  "$S/common/redact.c" &
build fuzz_request "$S/server/openai.c" "$S/engine/vocab.c" "$S/common/buf.c" "$S/common/rng.c" \
  "$S/common/err.c" "$S/common/redact.c" &
build fuzz_units "$S/common/units.c" "$S/common/err.c" "$S/common/redact.c" &
build fuzz_http1 "$S/client/http1.c" &
build fuzz_trace "$S/workload/trace.c" "$S/workload/tokenizer.c" "$S/workload/gguf.c" \
  "$S/workload/dist.c" "$S/common/units.c" "$S/common/rng.c" "$S/common/buf.c" "$S/common/err.c" \
  "$S/common/redact.c" &
build fuzz_gguf "$S/workload/gguf.c" "$S/common/err.c" "$S/common/redact.c" &
build fuzz_prom "$S/client/prom.c" "$S/common/err.c" "$S/common/redact.c" &
build fuzz_redact "$S/common/err.c" "$S/common/redact.c" &
# The framing checks every head it hands on with evhttp's own URI parser: libevent, not
# instrumented, linked to this one target.
# shellcheck disable=SC2046
build fuzz_reqframe "$S/server/reqframe.c" $(pkg-config --libs libevent) &
# What the proxy does with a client's bytes: the framing, then its head rewrite and body
# reading (inspect.c).
build fuzz_proxy_request "$S/proxy/inspect.c" "$S/server/reqframe.c" "$S/common/buf.c" &
rc=0
for _ in 1 2 3 4 5 6 7 8 9 10 11; do wait -n || rc=1; done
[ "$rc" = 0 ] || { echo "fuzz: a target failed to build" >&2; exit 1; }
echo "fuzz: built fuzz_sse_split fuzz_sse_chunk fuzz_request fuzz_units fuzz_reqframe fuzz_http1 fuzz_trace fuzz_gguf fuzz_prom fuzz_redact fuzz_proxy_request in $OUT with $CC" >&2
