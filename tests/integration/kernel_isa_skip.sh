#!/usr/bin/env bash
# kernel_isa_skip — a kernel test whose instruction set the CPU lacks reports skipped, never
# passed. The cpu kernels' tests (test_cpu_kernels, test_cpu_attn, test_cpu_sample,
# test_cpu_forward) run as
# one ctest test per group (portable, avx2, avx512: each file's "ctest: groups" line); a
# group the CPU cannot run exits 77 (ctest's SKIP_RETURN_CODE) with the reason.
# STALLSCOPE_CPU_ISA caps the dispatch as a CPU without those instructions would have it, so
# the rule is checked here on any CPU, for each test's groups: capped to "avx2", an avx512
# group must exit 77 and say why; capped to "portable", an avx2 group too; a portable group
# always runs. And without a cap, each group this CPU can run must run its tests and exit 0.
# A test's groups are those its usage line names (an unknown group: exit 2).
# usage: kernel_isa_skip.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail

bin=$1
scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"

flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has_avx2=$(grep -qw avx2 <<<"$flags" && grep -qw fma <<<"$flags" && echo yes || echo no)
has_avx512=$(grep -qw avx512f <<<"$flags" && grep -qw avx512dq <<<"$flags" && echo yes || echo no)

# run_group TEST CAP GROUP: exit status in $rc, output in $scratch/out
run_group() {
  rc=0
  STALLSCOPE_CPU_ISA=$2 timeout 120 "$1" "$3" >"$scratch/out" 2>&1 || rc=$?
}

# expect_ran NAME WHAT: the last group exited 0 and ran at least one test
expect_ran() {
  [ "$rc" = 0 ] || { cat "$scratch/out"; fail "$1: $2 exited $rc"; }
  grep -Eq "PASSED +\] [1-9][0-9]* test" "$scratch/out" || fail "$1: $2 ran no test"
}

# expect_skipped NAME WHAT REASON: the last group exited 77, said why, and ran nothing
expect_skipped() {
  [ "$rc" = 77 ] || { cat "$scratch/out"; fail "$1: $2 exited $rc, not 77"; }
  grep -q "$3" "$scratch/out" || { cat "$scratch/out"; fail "$1: $2's skip gave no reason"; }
  ! grep -q "PASSED" "$scratch/out" || fail "$1: $2 was skipped but still ran tests"
}

seen=" "
for name in test_cpu_kernels test_cpu_attn test_cpu_sample test_cpu_forward; do
  tests=$(dirname "$bin")/$name
  [ -x "$tests" ] || fail "no $tests next to $bin (the test build makes both)"
  rc=0
  "$tests" no-such-group >"$scratch/usage" 2>&1 || rc=$?
  [ "$rc" = 2 ] || { cat "$scratch/usage"; fail "$name: an unknown group exited $rc, not 2"; }
  groups=$(sed -n 's/^usage: .* \[\(.*\)|all\]$/\1/p' "$scratch/usage" | tr '|' ' ')
  [ -n "$groups" ] || fail "$name: no groups in its usage line: $(cat "$scratch/usage")"
  for group in $groups; do
    seen="$seen$group "
    case $group in
      portable)
        run_group "$tests" portable portable
        expect_ran "$name" "the portable group capped to portable"
        pass "$name: the portable group runs under any cap"
        ;;
      avx2)
        run_group "$tests" portable avx2
        expect_skipped "$name" "capped to portable, the avx2 group" "SKIP avx2: STALLSCOPE_CPU_ISA caps the kernels below, or this CPU has no AVX2"
        pass "$name: capped to portable, the avx2 group is skipped (77) with its reason"
        ;;
      avx512)
        run_group "$tests" avx2 avx512
        expect_skipped "$name" "capped to avx2, the avx512 group" "SKIP avx512: STALLSCOPE_CPU_ISA caps the kernels below, or this CPU has no AVX-512"
        pass "$name: capped to avx2, the avx512 group is skipped (77) with its reason"
        ;;
      *) fail "$name: unknown group $group" ;;
    esac
    [ "$group" = portable ] && continue
    has=$([ "$group" = avx2 ] && echo "$has_avx2" || echo "$has_avx512")
    run_group "$tests" native "$group"
    if [ "$has" = yes ]; then
      expect_ran "$name" "the $group group on this CPU, which has it"
      pass "$name: this CPU has $group: its group ran and passed"
    else
      [ "$rc" = 77 ] || fail "$name: this CPU lacks $group but its group exited $rc, not 77"
      pass "$name: this CPU lacks $group: its group is skipped (77)"
    fi
  done
done
for group in portable avx2 avx512; do
  [[ $seen == *" $group "* ]] || fail "no kernel test has a $group group"
done
echo "kernel_isa_skip: all passed"
