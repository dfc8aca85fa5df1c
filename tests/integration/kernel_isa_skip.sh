#!/usr/bin/env bash
# kernel_isa_skip — a kernel test whose instruction set the CPU lacks reports skipped, never
# passed. test_cpu_kernels runs as three ctest tests, one per group (portable, avx2,
# avx512); a group the CPU cannot run exits 77 (ctest's SKIP_RETURN_CODE) with the reason.
# STALLSCOPE_CPU_ISA caps the dispatch as a CPU without those instructions would have it, so
# the rule is checked here on any CPU: capped to "avx2", the avx512 group must exit 77 and
# say why; capped to "portable", the avx2 group too; the portable group always runs. And
# without a cap, each group this CPU can run must run its tests and exit 0.
# usage: kernel_isa_skip.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail

bin=$1
scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"

tests=$(dirname "$bin")/test_cpu_kernels
[ -x "$tests" ] || fail "no $tests next to $bin (the test build makes both)"

# run_group CAP GROUP: exit status in $rc, output in $scratch/out
run_group() {
  rc=0
  STALLSCOPE_CPU_ISA=$1 timeout 120 "$tests" "$2" >"$scratch/out" 2>&1 || rc=$?
}

run_group avx2 avx512
[ "$rc" = 77 ] || { cat "$scratch/out"; fail "capped to avx2, the avx512 group exited $rc, not 77"; }
grep -q "SKIP avx512: this CPU has no AVX-512" "$scratch/out" ||
  { cat "$scratch/out"; fail "the avx512 group's skip gave no reason"; }
grep -q "PASSED" "$scratch/out" && fail "the skipped avx512 group still ran tests"
pass "capped to avx2: the avx512 group is skipped (77) with its reason"

run_group portable avx2
[ "$rc" = 77 ] || { cat "$scratch/out"; fail "capped to portable, the avx2 group exited $rc, not 77"; }
grep -q "SKIP avx2: this CPU has no AVX2" "$scratch/out" || fail "the avx2 group's skip gave no reason"
pass "capped to portable: the avx2 group is skipped (77) with its reason"

run_group portable portable
[ "$rc" = 0 ] || { cat "$scratch/out"; fail "the portable group exited $rc"; }
grep -Eq "PASSED +\] [1-9][0-9]* test" "$scratch/out" || fail "the portable group ran no test"
pass "the portable group runs under any cap"

flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
for group in avx2 avx512; do
  case $group in
    avx2) has=$(grep -qw avx2 <<<"$flags" && grep -qw fma <<<"$flags" && echo yes || echo no) ;;
    avx512) has=$(grep -qw avx512f <<<"$flags" && grep -qw avx512dq <<<"$flags" && echo yes || echo no) ;;
  esac
  run_group native "$group"
  if [ "$has" = yes ]; then
    [ "$rc" = 0 ] || { cat "$scratch/out"; fail "this CPU has $group but its group exited $rc"; }
    grep -Eq "PASSED +\] [1-9][0-9]* test" "$scratch/out" || fail "the $group group ran no test"
    pass "this CPU has $group: its group ran and passed"
  else
    [ "$rc" = 77 ] || fail "this CPU lacks $group but its group exited $rc, not 77"
    pass "this CPU lacks $group: its group is skipped (77)"
  fi
done
echo "kernel_isa_skip: all passed"
