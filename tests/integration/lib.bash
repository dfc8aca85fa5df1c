# Shared helpers for integration tests (sourced; ctest registers only *.sh files).
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
# json FILE EXPR: evaluate a python expression over the parsed JSON bound to `j`.
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# check NAME PYTHON-BOOL-EXPR FILE...: files bound to a, b, c ...
check() {
  local name=$1 expr=$2; shift 2
  python3 - "$expr" "$@" <<'PY' || fail "$name"
import json, sys
expr = sys.argv[1]
env = {}
for i, path in enumerate(sys.argv[2:]):
    env["abcdefgh"[i]] = json.load(open(path))
ok = eval(expr, {}, env)
sys.exit(0 if ok else 1)
PY
  pass "$name"
}
