#!/usr/bin/env bash
# docs/reference/cli.md is every command's options as the program prints them: the file must
# be exactly what `stallscope help --markdown` prints (each command's --help-markdown, built
# from the option tables its --help prints), so an option added, renamed or re-worded in
# src/cli/ or an option group fails here until the doc is regenerated (scripts/gen_docs.sh).
# Then each command's --help is held to its section: every option --help lists is in it.
# usage: cli_doc.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
doc=$src/docs/reference/cli.md
[ -f "$doc" ] || fail "no $doc"

"$bin" help --markdown >"$dir/cli.md" || fail "stallscope help --markdown exited $?"
diff -u "$doc" "$dir/cli.md" >"$dir/diff" ||
  { head -40 "$dir/diff"; fail "docs/reference/cli.md differs from 'stallscope help --markdown': run scripts/gen_docs.sh"; }
pass "docs/reference/cli.md is the option tables' ($(grep -c '^| `--' "$doc") option rows)"

# options_missing SECTION_FILE HELP_FILE: the options --help lists that the section lacks.
options_missing() {
  grep -oE '^  --[a-z0-9-]+' "$2" | sed 's/^  //' | sort -u | while read -r opt; do
    grep -q "^| \`$opt[\` ]" "$1" || echo "$opt"
  done
}
# trim: stdin without its leading and trailing blank lines.
trim() { python3 -c 'import sys; print(sys.stdin.read().strip("\n"))'; }
# section NAME FILE: the lines of "## stallscope NAME" up to the next section.
section() { awk -v h="## stallscope $1" '$0 == h {on = 1; next} /^## / {on = 0} on' "$2"; }

commands=$("$bin" --help | awk '/^commands:/ {on = 1; next} on && !NF {exit} on {print $1}')
[ "$(echo "$commands" | wc -w)" -ge 9 ] || fail "stallscope --help lists too few commands: $commands"
for cmd in $commands "calibrate --target URL"; do
  args=($cmd); name=${cmd%% *}
  [ "${args[1]:-}" = --target ] && args=(calibrate --target URL)
  "$bin" "${args[@]}" --help >"$dir/help.txt" || fail "$cmd --help exited $?"
  section "$cmd" "$doc" >"$dir/section.md"
  [ -s "$dir/section.md" ] || fail "docs/reference/cli.md has no section '## stallscope $cmd'"
  grep -qF "usage: $(head -1 "$dir/help.txt" | sed 's/^usage: //')" "$dir/section.md" ||
    fail "$cmd: the section's usage line is not --help's"
  missing=$(options_missing "$dir/section.md" "$dir/help.txt")
  [ -z "$missing" ] || fail "$cmd: --help lists options its section lacks: $missing"
  "$bin" "${args[@]}" --help-markdown | trim >"$dir/own.md"
  section "$cmd" "$dir/cli.md" | trim | cmp -s - "$dir/own.md" ||
    fail "$cmd --help-markdown is not its section of help --markdown"
  echo "  $name${args[1]:+ ${args[1]}}: $(grep -c '^| `--' "$dir/section.md") options"
done
pass "every command's --help options are in its section, and its --help-markdown is that section"

# The cross-check can fail: a section without one of its options is caught.
section run "$doc" | grep -v '^| `--users ' >"$dir/doctored.md"
"$bin" run --help >"$dir/help.txt"
[ "$(options_missing "$dir/doctored.md" "$dir/help.txt")" = --users ] ||
  fail "the cross-check missed a section without --users"
pass "the cross-check catches a section without one of its options"
