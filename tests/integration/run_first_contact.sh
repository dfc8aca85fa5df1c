#!/usr/bin/env bash
# First contact with a --target that wants a key, and no secret on disk (issue 12, "Secrets and
# first contact"):
#  1. a 401 from the target is the first thing said, with the flag that fixes it (exit 1);
#  2. the key from --api-key, from OPENAI_API_KEY and from a --config file, and a credential
#     header, reach the target (the run completes against a server that demands the key) and
#     appear in no artifact: every file under the run directory is searched for them;
#  3. a target without a scheme (HOST:PORT), --extra-body, --label and --metadata are taken and
#     recorded in config.json; `--version` and `help CMD` answer.
# usage: run_first_contact.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
KEY=secret123
HDR_VALUE=abc-token-7f3e
port=$(free_port)
"$bin" serve --engine emulate --port "$port" --api-key "$KEY" >"$dir/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
wait_http "http://127.0.0.1:$port/health" || fail "the server did not come up"
short=(--duration 2s --inject-at 500ms --users 3 --warmup 0 --no-baseline)

# ---- 1. no key: one clear line first ----------------------------------------------------------
set +e
env -u OPENAI_API_KEY timeout 60 "$bin" run --target "127.0.0.1:$port" "${short[@]}" \
  --out "$dir/nokey" >"$dir/nokey.out" 2>"$dir/nokey.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "no key: exit $rc, want 1"
first=$(grep -v '^\[' "$dir/nokey.err" | head -1)
case "$first" in
  *"refused our credentials (HTTP 401"*"--api-key"*) pass "no key: $first" ;;
  *) fail "no key: the first line is not about the key: $(cat "$dir/nokey.err")" ;;
esac

# ---- 2. the key three ways, a credential header, nothing on disk ------------------------------
HDR="X-Token: $HDR_VALUE"
timeout 60 "$bin" run --target "127.0.0.1:$port" "${short[@]}" --api-key "$KEY" --header "$HDR" \
  --extra-body '{"temperature": 0.25}' --label "first contact" --metadata team=infra \
  --metadata ticket=12 --out "$dir/flag" >"$dir/flag.out" 2>&1 || { tail "$dir/flag.out"; fail "--api-key run"; }
OPENAI_API_KEY=$KEY timeout 60 "$bin" run --target "127.0.0.1:$port" "${short[@]}" \
  --out "$dir/env" >"$dir/env.out" 2>&1 || { tail "$dir/env.out"; fail "OPENAI_API_KEY run"; }
printf '{"target": "http://127.0.0.1:%s", "api-key": "%s", "header": ["%s"], "users": 3}\n' \
  "$port" "$KEY" "$HDR" >"$dir/flags.json"
env -u OPENAI_API_KEY timeout 60 "$bin" run --config "$dir/flags.json" "${short[@]}" \
  --out "$dir/config" >"$dir/config.out" 2>&1 || { tail "$dir/config.out"; fail "--config run"; }
for run in flag env config; do
  n=$(find "$dir/$run" -type f | wc -l)
  [ "$n" -ge 8 ] || fail "$run: only $n artifacts"
  if grep -r -a -l -e "$KEY" -e "$HDR_VALUE" "$dir/$run" "$dir/$run.out"; then
    fail "$run: a secret was written (files above)"
  fi
  pass "$run: the run completed against a server that wants the key; none of its $n files holds it"
done
check "--config: argv keeps the file's flags, the key's and the header's values masked" \
  'a["argv"][2:6] == ["--api-key", "***", "--header", "***"]' "$dir/config/interference/config.json"

# ---- 3. what was taken is recorded ---------------------------------------------------------------
check "config.json: target with its scheme, extra body, label, metadata" \
  'a["client"]["target"] == "http://127.0.0.1:'"$port"'" and a["client"]["extra_body"] == "{\"temperature\":0.25}" and a["experiment"]["label"] == "first contact" and a["experiment"]["metadata"] == "team=infra\nticket=12"' \
  "$dir/flag/interference/config.json"
grep -q "first contact" "$dir/flag/report.html" || fail "the report does not show the label"
"$bin" --version >"$dir/version.out"
grep -Eq '^stallscope [0-9]+\.[0-9]+\.[0-9]+$' "$dir/version.out" || fail "--version: $(cat "$dir/version.out")"
"$bin" help run >"$dir/help.out"
grep -q "^usage: stallscope run" "$dir/help.out" || fail "help run: $(head -3 "$dir/help.out")"
set +e
"$bin" run --extra-body '{"stream": false}' --out "$dir/x" >/dev/null 2>"$dir/extra.err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q '"stream" is the experiment' "$dir/extra.err" ||
  fail "--extra-body overriding stream: exit $rc, $(cat "$dir/extra.err")"
pass "recorded: target, extra body, label, metadata; --version, help, --extra-body refusals"
