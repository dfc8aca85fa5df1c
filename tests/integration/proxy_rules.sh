#!/usr/bin/env bash
# The proxy's Prometheus rules and Grafana dashboard (deploy/), held to the metric table of
# docs/reference/proxy-metrics.md:
#  1. `promtool check rules` accepts the rules file, with as many rules as it lists;
#  2. `promtool test rules` passes its unit tests (stallscope_proxy_test.yml);
#  3. each of those tests can fail: the rules (and once the tests) broken one way at a time
#     in a copy, promtool must fail and name the check that caught it;
#  4. the names: every metric a rule's expr or a dashboard query selects is in the table
#     (a histogram as NAME_bucket/_sum/_count) or is a recording rule; every function is
#     PromQL's; the page lists every record and alert, the dashboard shows every metric (by
#     itself or through a rule); the dashboard is JSON, schema 36 or later, its data source
#     the variable ${DS_PROMETHEUS} everywhere, its `upstream` variable
#     label_values(stallscope_proxy_streams_in_flight, upstream), and every selector of a
#     proxy metric in it filters upstream=~"$upstream". The checker is first shown to catch
#     an unknown metric, a fixed data source and a selector without the filter.
# Without promtool: a FAILURE as root or with CI=true (`make test` installs it there:
# scripts/deps.sh test, Debian's prometheus package), skipped (exit 77) otherwise.
# usage: proxy_rules.sh STALLSCOPE_BINARY SCRATCH_DIR   (the binary is not used)
set -euo pipefail
dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
rules=$src/deploy/prometheus/stallscope_proxy.rules.yml
unit=$src/deploy/prometheus/stallscope_proxy_test.yml
dash=$src/deploy/grafana/stallscope_proxy.json
doc=$src/docs/reference/proxy-metrics.md
for f in "$rules" "$unit" "$dash" "$doc"; do [ -f "$f" ] || fail "no $f"; done

command -v promtool >/dev/null 2>&1 ||
  skip_or_fail "promtool is not installed (apt-get install --no-install-recommends prometheus)"
promtool --version 2>&1 | head -1

# 1. The rules load, all of them.
promtool check rules "$rules" >"$dir/check.out" 2>&1 ||
  { cat "$dir/check.out"; fail "promtool check rules $rules"; }
want=$(grep -cE '^[[:space:]]*- (record|alert):' "$rules")
grep -q "SUCCESS: $want rules found" "$dir/check.out" ||
  { cat "$dir/check.out"; fail "promtool check rules: want 'SUCCESS: $want rules found'"; }
pass "promtool check rules: $want rules"

# 2. Their unit tests pass.
promtool test rules "$unit" >"$dir/test.out" 2>&1 ||
  { cat "$dir/test.out"; fail "promtool test rules $unit"; }
grep -q SUCCESS "$dir/test.out" || { cat "$dir/test.out"; fail "promtool test rules: no SUCCESS"; }
pass "promtool test rules: $(grep -c '^  - name:' "$unit") tests pass"

# 3. Each test can fail. mutant NAME FILE FROM TO WANT: a copy of the rules and tests with
# FROM (found exactly once in FILE, rules or tests) replaced by TO; promtool test rules must
# fail, and its output name the failed check WANT.
mutant() {
  local name=$1 which=$2 from=$3 to=$4 want=$5 m=$dir/mutant target
  rm -rf "$m"; mkdir -p "$m"
  cp "$rules" "$unit" "$m/"
  target=$m/$(basename "$rules")
  [ "$which" = tests ] && target=$m/$(basename "$unit")
  replace_once "$target" "$from" "$to" ||
    fail "mutant '$name': '$from' is not in $(basename "$target") exactly once"
  local rc=0
  promtool test rules "$m/$(basename "$unit")" >"$m/out" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail_later "mutant '$name': promtool test rules passed, its tests do not see it"
  if [ "$rc" != 0 ] && ! grep -qF -- "$want" "$m/out"; then
    sed 's/^/    /' "$m/out" | head -20 >&2
    fail_later "mutant '$name': promtool failed, but not at '$want'"
  fi
  [ "$rc" = 0 ] || ! grep -qF -- "$want" "$m/out" || pass "mutant '$name' fails at: $want"
}
# test 1 (no stalls)
mutant "alert on any rate" rules 'prefill_stalls:rate5m > 0.05' 'prefill_stalls:rate5m >= 0' \
  'alertname: LongPromptStalls, time: 10m'
# test 2 (steady prefill stalls)
mutant "threshold 0.5" rules 'prefill_stalls:rate5m > 0.05' 'prefill_stalls:rate5m > 0.5' \
  'alertname: LongPromptStalls, time: 7m'
mutant "for 4m" rules 'for: 5m' 'for: 4m' 'alertname: LongPromptStalls, time: 6m'
mutant "for 6m" rules 'for: 5m' 'for: 6m' 'alertname: LongPromptStalls, time: 7m'
mutant "every cause counted as prefill" rules \
  'rate(stallscope_proxy_stalls_total{cause="prefill"}[5m])' \
  'rate(stallscope_proxy_stalls_total[5m])' 'expr: "stallscope_proxy:prefill_stalls:rate5m"'
mutant "stalls: one cause" rules \
  'sum by (upstream) (rate(stallscope_proxy_stalls_total[5m]))' \
  'sum by (upstream) (rate(stallscope_proxy_stalls_total{cause="unexplained"}[5m]))' \
  'expr: "stallscope_proxy:stalls:rate5m"'
mutant "stalled seconds per minute" rules \
  'rate(stallscope_proxy_stalled_seconds_total[5m])' \
  'rate(stallscope_proxy_stalled_seconds_total[5m]) * 60' \
  'expr: "stallscope_proxy:stalled_seconds:rate5m"'
mutant "the fix left out" rules ' SGLang --chunked-prefill-size;' '' \
  'alertname: LongPromptStalls, time: 7m'
# test 3 (ITL percentiles)
mutant "p999 at 0.99" rules 'histogram_quantile(0.999,' 'histogram_quantile(0.99,' \
  'expr: "stallscope_proxy:itl_seconds:p999_5m"'
mutant "p50 per proxy instance" rules 'histogram_quantile(0.5, sum by (upstream, le)' \
  'histogram_quantile(0.5, sum by (upstream, instance, le)' \
  'expr: "stallscope_proxy:itl_seconds:p50_5m"'
mutant "ITL alert above 2 s" rules 'itl_seconds:p999_5m > 1' 'itl_seconds:p999_5m > 2' \
  'alertname: InterTokenLatencyP999High, time: 11m'
mutant "ITL for 9m" rules 'for: 10m' 'for: 9m' 'alertname: InterTokenLatencyP999High, time: 10m'
mutant "a broken expected value" tests 'value: 0.0875' 'value: 0.0876' \
  'expr: "stallscope_proxy:itl_seconds:p99_5m"'
failures_end "promtool tests fail on each broken rule"

# 4. The names.
cat >"$dir/check_names.py" <<'PY'
"""usage: check_names.py DOC RULES DASHBOARD: the problems, one a line; exit 1 if any."""
import json, re, sys

doc_path, rules_path, dash_path = sys.argv[1:]
problems = []

# The metric table: | `name` | type | labels | meaning |
metrics = {}
for line in open(doc_path, encoding="utf-8"):
    m = re.match(r'^\| `(stallscope_proxy_[a-z0-9_]+)` \| (histogram|counter|gauge) \|', line)
    if m:
        metrics[m.group(1)] = m.group(2)
if not metrics:
    sys.exit(f"{doc_path}: no metric table (rows '| `stallscope_proxy_...` | TYPE |')")
series = set()  # the names a query can select
for name, kind in metrics.items():
    series |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}

# The rules: record/alert names and their exprs (one line, or a | or > block).
rules, lines = [], open(rules_path, encoding="utf-8").read().split("\n")
i = 0
while i < len(lines):
    m = re.match(r'^\s*(?:- )?(record|alert):\s*(\S+)\s*$', lines[i])
    if m:
        rules.append({"kind": m.group(1), "name": m.group(2), "expr": None})
    m = re.match(r'^(\s*)expr:\s*(.*?)\s*$', lines[i])
    if m:
        expr = m.group(2)
        if expr[:1] in ("|", ">"):
            indent, block = len(m.group(1)), []
            while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                          len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                i += 1
                block.append(lines[i].strip())
            expr = " ".join(block)
        if not rules or rules[-1]["expr"] is not None:
            problems.append(f"{rules_path}:{i + 1}: an expr outside a record or alert")
        else:
            rules[-1]["expr"] = expr.strip("'\"")
    i += 1
records = {r["name"] for r in rules if r["kind"] == "record"}
if not records:
    problems.append(f"{rules_path}: no recording rules")

FUNCS = {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk",
         "quantile", "count_values", "rate", "irate", "increase", "delta", "idelta", "deriv",
         "histogram_quantile", "abs", "ceil", "floor", "round", "clamp", "clamp_min",
         "clamp_max", "scalar", "vector", "time", "timestamp", "absent", "absent_over_time",
         "changes", "resets", "sort", "sort_desc", "label_replace", "label_join",
         "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
         "count_over_time", "quantile_over_time", "last_over_time", "present_over_time",
         "predict_linear", "exp", "ln", "log2", "log10", "sqrt"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"bool", "and", "or", "unless", "offset", "inf", "nan"}
TOKEN = re.compile(r'''\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\{[^{}]*\}|\[[^\[\]]*\]|\$\{?\w+\}?'''
                   r'''|[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[smhdwy]?|\.\d+'''
                   r'''|[()+\-*/%^,<>=!~]+''')
MATCHER = re.compile(r'\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')

def selectors(expr):
    """[(metric name, {label: (op, value)})] of every selector in expr; raises ValueError."""
    tokens, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read at '{expr[pos:pos + 20]}'")
        if m.group().strip():
            tokens.append(m.group())
        pos = m.end()
    found, k = [], 0
    while k < len(tokens):
        tok = tokens[k]
        nxt = tokens[k + 1] if k + 1 < len(tokens) else ""
        if tok in GROUPING:
            if nxt != "(" or ")" not in tokens[k + 1:]:
                raise ValueError(f"'{tok}' without its label list")
            k = tokens.index(")", k + 1) + 1
            continue
        if re.match(r'^[A-Za-z_:]', tok) and (nxt == "(" or nxt in ("by", "without")):
            if tok not in FUNCS:  # a function, or an aggregation: sum by (x) (...)
                raise ValueError(f"unknown function {tok}()")
        elif tok in KEYWORDS:
            pass
        elif re.match(r'^[A-Za-z_:]', tok):
            labels = {}
            if nxt.startswith("{"):
                body, at = nxt[1:-1], 0
                while at < len(body):
                    mm = MATCHER.match(body, at)
                    if not mm:
                        raise ValueError(f"cannot read the matchers {nxt}")
                    labels[mm.group(1)] = (mm.group(2), mm.group(3))
                    at = mm.end()
                k += 1
            found.append((tok, labels))
        elif tok.startswith("{"):
            raise ValueError(f"a selector without a metric name: {tok}")
        k += 1
    return found

# Each rule's expr names only the table's metrics (an alert's, the records' too).
for r in rules:
    where = f"{rules_path}: {r['kind']} {r['name']}"
    if r["expr"] is None:
        problems.append(f"{where}: no expr")
        continue
    try:
        sel = selectors(r["expr"])
    except ValueError as e:
        problems.append(f"{where}: {e}")
        continue
    allowed = series | (records if r["kind"] == "alert" else set())
    for name, _ in sel:
        if name not in allowed:
            problems.append(f"{where}: selects {name}, not a metric of the table"
                            + (" nor a recording rule" if r["kind"] == "alert" else ""))
    if not sel:
        problems.append(f"{where}: selects no metric")

# The page lists every record and alert, and no other record.
doc_text = open(doc_path, encoding="utf-8").read()
for r in rules:
    if f"`{r['name']}`" not in doc_text:
        problems.append(f"{doc_path}: does not list the {r['kind']} {r['name']}")
for name in sorted(set(re.findall(r'`(stallscope_proxy:[a-z0-9_:]+)`', doc_text)) - records):
    problems.append(f"{doc_path}: lists {name}, not a recording rule of {rules_path}")

# The dashboard.
try:
    dash = json.load(open(dash_path, encoding="utf-8"))
except ValueError as e:
    print(f"{dash_path}: not JSON: {e}")
    sys.exit(1)
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
    problems.append(f"{dash_path}: schemaVersion {dash.get('schemaVersion')!r}, want 36 or later")

def walk(node, path):
    """Every data source reference anywhere is the templated one."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource" and value not in (DS, "${DS_PROMETHEUS}"):
                problems.append(f"{dash_path}: {path}.datasource is {json.dumps(value)}, "
                                f"want {json.dumps(DS)}")
            walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for n, value in enumerate(node):
            walk(value, f"{path}[{n}]")
walk(dash, "$")
variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
ds_var = variables.get("DS_PROMETHEUS", {})
if ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus":
    problems.append(f"{dash_path}: no datasource variable DS_PROMETHEUS (query prometheus)")
up_var = variables.get("upstream", {})
query = up_var.get("query")
query = query.get("query") if isinstance(query, dict) else query
want_q = "label_values(stallscope_proxy_streams_in_flight, upstream)"
if up_var.get("datasource") != DS or query != want_q or up_var.get("definition", want_q) != want_q:
    problems.append(f"{dash_path}: the variable upstream is not {want_q} on {json.dumps(DS)}")

def panels_of(node):
    for p in node.get("panels", []):
        yield p
        yield from panels_of(p)  # a row's panels
used, ids, n_targets = set(), set(), 0
for p in panels_of(dash):
    if p.get("type") == "row":
        continue
    where = f"{dash_path}: panel {p.get('id')} '{p.get('title', '')}'"
    if p.get("id") in ids:
        problems.append(f"{where}: its id again")
    ids.add(p.get("id"))
    if p.get("datasource") != DS:
        problems.append(f"{where}: datasource {json.dumps(p.get('datasource'))}, want {json.dumps(DS)}")
    if not p.get("targets"):
        problems.append(f"{where}: no query")
    for t in p.get("targets", []):
        n_targets += 1
        expr = t.get("expr", "")
        try:
            sel = selectors(expr)
        except ValueError as e:
            problems.append(f"{where} {t.get('refId')}: {e}: {expr}")
            continue
        if not sel:
            problems.append(f"{where} {t.get('refId')}: selects no metric: {expr!r}")
        for name, labels in sel:
            used.add(name)
            if name not in series and name not in records:
                problems.append(f"{where} {t.get('refId')}: selects {name}, not a metric of the "
                                f"table nor a recording rule")
            elif labels.get("upstream") != ("=~", "$upstream"):
                problems.append(f"{where} {t.get('refId')}: {name} without "
                                f'upstream=~"$upstream"')
# Every metric of the table is on the dashboard, by itself or through a rule it shows.
shown = set(used)
for r in rules:
    if r["name"] in used and r["expr"]:
        try:
            shown |= {name for name, _ in selectors(r["expr"])}
        except ValueError:
            pass
for name, kind in sorted(metrics.items()):
    names = {name + "_bucket"} if kind == "histogram" else {name}
    if not names & shown:
        problems.append(f"{dash_path}: no panel shows {name}")

for line in problems:
    print(line)
print(f"{len(metrics)} metrics, {len(rules)} rules, {len(ids)} panels, {n_targets} queries, "
      f"{len(problems)} problems", file=sys.stderr)
sys.exit(1 if problems else 0)
PY

# The checker catches what it should: a dashboard with an unknown metric, a fixed data
# source, and a selector without the upstream filter; and a rule naming no table metric.
python3 - "$dash" "$dir/bad.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
targets = [t for p in d["panels"] for t in p.get("targets", [])]
targets[0]["expr"] = targets[0]["expr"].replace("stallscope_proxy_stalls_total", "stallscope_proxy_stall_total", 1)
d["panels"][1]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
targets[-1]["expr"] = targets[-1]["expr"].replace('upstream=~"$upstream"', 'upstream=~".+"', 1)
json.dump(d, open(sys.argv[2], "w"))
PY
sed 's/rate(stallscope_proxy_stalled_seconds_total\[5m\])/rate(stallscope_proxy_frozen_seconds_total[5m])/' \
  "$rules" >"$dir/bad.rules.yml"
rc=0; python3 "$dir/check_names.py" "$doc" "$dir/bad.rules.yml" "$dir/bad.json" >"$dir/self.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$dir/self.out"; fail "the checker exited $rc on a broken dashboard and rules, want 1"; }
# shellcheck disable=SC2016 # the dashboard's $upstream, not ours
for want in 'selects stallscope_proxy_stall_total, not a metric' \
            'datasource is {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}' \
            'without upstream=~"$upstream"' \
            'record stallscope_proxy:stalled_seconds:rate5m: selects stallscope_proxy_frozen_seconds_total'; do
  grep -qF -- "$want" "$dir/self.out" || { cat "$dir/self.out"; fail "the checker missed: $want"; }
done
pass "the checker catches an unknown metric, a fixed data source, a missing filter, a rule off the table"

python3 "$dir/check_names.py" "$doc" "$rules" "$dash" >"$dir/names.out" 2>"$dir/names.err" ||
  { cat "$dir/names.out" "$dir/names.err"; fail "the rules or the dashboard disagree with $doc"; }
pass "names: $(cat "$dir/names.err")"
