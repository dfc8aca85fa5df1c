#!/usr/bin/env bash
# Inside every folder of src/ the includes run one way (scripts/include_cycles.py): no two
# files that include each other, directly or through a third. First the check itself is
# shown to fail on a made-up folder with a cycle, then it runs over the real tree.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
: "$bin"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
check=$src/scripts/include_cycles.py
rm -rf "$dir"; mkdir -p "$dir/tree/m"

# m/a.c includes m/b.h, m/b.c includes m/c.h, m/c.h includes m/a.h: a cycle of three.
printf '#include "m/a.h"\n#include "m/b.h"\n' >"$dir/tree/m/a.c"
printf '#include "m/c.h"\n' >"$dir/tree/m/b.c"
printf '#include "m/a.h"\n' >"$dir/tree/m/c.h"
: >"$dir/tree/m/a.h"; : >"$dir/tree/m/b.h"
set +e
python3 "$check" "$dir/tree" >"$dir/made_up.out" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { cat "$dir/made_up.out"; fail "a cycle of three: exit $rc, want 1"; }
grep -q 'cycle in m/: a, b, c' "$dir/made_up.out" || { cat "$dir/made_up.out"; fail "the cycle not named"; }
pass "a made-up cycle is found: $(grep 'cycle in' "$dir/made_up.out")"

# Cut it (c.h no longer includes a.h): one way, exit 0.
: >"$dir/tree/m/c.h"
python3 "$check" "$dir/tree" >"$dir/made_up.out" 2>&1 || { cat "$dir/made_up.out"; fail "no cycle left, yet exit 1"; }
pass "one way once cut"

python3 "$check" "$src/src" >"$dir/src.out" 2>&1 || { cat "$dir/src.out"; fail "an include cycle in src/"; }
grep -q '^analysis: ' "$dir/src.out" || { cat "$dir/src.out"; fail "src/analysis not read"; }
pass "src/: $(wc -l <"$dir/src.out") folders, every one one way"
