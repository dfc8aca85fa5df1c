#!/usr/bin/env bash
# Bad input to sim and model: one clear line on stderr, exit status 2, no artifacts.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

expect_usage_error() {
  local name=$1; shift
  local out=$dir/case
  rm -rf "$out"
  set +e
  "$bin" "$@" --out "$out" >"$dir/stdout" 2>"$dir/stderr"
  local rc=$?
  set -e
  [ $rc -eq 2 ] || fail "$name: exit status $rc, want 2"
  [ "$(wc -l <"$dir/stderr")" -eq 1 ] || { cat "$dir/stderr"; fail "$name: want one line on stderr"; }
  grep -q "^stallscope " "$dir/stderr" || fail "$name: stderr does not name the tool"
  [ ! -e "$out/comparison.json" ] && [ ! -e "$out/interference/summary.json" ] ||
    fail "$name: artifacts written"
  pass "$name: $(cat "$dir/stderr")"
}
expect_usage_error "unknown preset" sim --preset nope
expect_usage_error "unknown gpu" sim --gpu h900
expect_usage_error "unknown model" sim --model llama-9
expect_usage_error "malformed size" sim --prompt-tokens 8q
expect_usage_error "zero duration" sim --duration 0s
expect_usage_error "negative duration" sim --duration -5s
expect_usage_error "zero period" sim --inject-every 0
expect_usage_error "unknown option" sim --frobnicate
expect_usage_error "prompt longer than the context" sim --prompt-tokens 200k --policy chunked
expect_usage_error "prompt longer than the budget under mixed" sim --prompt-tokens 20k
expect_usage_error "unknown policy" sim --policy fifo
echo "sim_bad_input: all checks passed"
