#!/usr/bin/env bash
# kernel_unroll — the cpu kernels unroll their loops through CPU_UNROLL (cpu_isa_kernels.h),
# which gives gcc "#pragma GCC unroll" and clang "#pragma clang loop unroll(full)": clang
# takes gcc's pragma without a warning, then keeps the arrays of accumulators the loops index
# in memory, and its build's attention ran far slower. Checked here:
#   1. no kernel file under src/engine/cpu writes gcc's pragma itself (the check is first
#      shown to catch a made-up file that does);
#   2. clang compiles both kernel files with -Wall -Wextra -Werror: every CPU_UNROLL loop can
#      be unrolled whole (clang warns when it cannot).
# usage: kernel_unroll.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
: "$bin"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
rm -rf "$dir"; mkdir -p "$dir/made_up"

# raw_pragmas DIR: the lines of DIR's .c and .h files that write gcc's pragma themselves
# (the macro's own definition in cpu_isa_kernels.h excepted)
raw_pragmas() {
  grep -nE '^[[:space:]]*#[[:space:]]*pragma[[:space:]]+GCC[[:space:]]+unroll' "$1"/*.c "$1"/*.h 2>/dev/null |
    grep -v 'cpu_isa_kernels.h:.*define' || true
}

printf 'void f(float *a)\n{\n#pragma GCC unroll 4\n    for (int i = 0; i < 4; i++)\n        a[i] += 1;\n}\n' \
  >"$dir/made_up/k.c"
: >"$dir/made_up/k.h"
[ -n "$(raw_pragmas "$dir/made_up")" ] || fail "a made-up file with gcc's pragma was not caught"
pass "a made-up file with gcc's pragma is caught: $(raw_pragmas "$dir/made_up")"

found=$(raw_pragmas "$src/src/engine/cpu")
[ -z "$found" ] || fail "kernel loops unrolled with gcc's pragma, not CPU_UNROLL: $found"
uses=$(grep -c 'CPU_UNROLL(' "$src/src/engine/cpu/cpu_avx512.c" "$src/src/engine/cpu/cpu_avx2.c" |
  awk -F: '{n += $2} END {print n + 0}')
[ "$uses" -gt 0 ] || fail "no CPU_UNROLL in the kernel files: the check above looked at nothing"
pass "the kernel files unroll through CPU_UNROLL only ($uses loops)"

command -v clang >/dev/null || skip_or_fail "clang is not installed"
for f in cpu_avx512 cpu_avx2; do
  clang -std=c11 -O2 -Wall -Wextra -Werror -I "$src/src" -c "$src/src/engine/cpu/$f.c" \
    -o "$dir/$f.o" 2>"$dir/$f.err" || { cat "$dir/$f.err"; fail "clang: $f.c did not compile clean"; }
done
pass "clang compiles both kernel files with no warning: every CPU_UNROLL loop unrolled whole"
