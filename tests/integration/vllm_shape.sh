#!/usr/bin/env bash
# A `vllm bench serve` user's command shape (issue 28, points 14-16): --num-prompts N sends N
# requests and waits for every one (none cut, whatever the duration), --request-rate inf with
# --max-concurrency meters them, --save-result carries the settings under vLLM's keys and,
# with --save-detailed, the per-request arrays, each checked against the run's CSVs; a
# saturation sweep varies --max-concurrency, and --rate-search K sets its rates from the
# throughput the first point reached. In the simulator and on the embedded emulated GPU
# (~5 s in all).
# usage: vllm_shape.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
# jcheck FILE EXPR WHAT: EXPR holds for the JSON file as j.
jcheck() {
  python3 -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1" ||
    fail "$3: $(head -c 600 "$1")"
  pass "$3"
}

# 300 prompts at 2 req/s arrive over ~150 s: a timed run (40 s by default) would cut them.
"$bin" sim --num-prompts 300 --request-rate 2 --no-inject --no-report --out "$dir/sim" \
  --save-result "$dir/sim.json" >"$dir/sim.out" 2>&1 || { rc=$?; cat "$dir/sim.out"; fail "sim exited $rc"; }
jcheck "$dir/sim.json" 'j["completed"] == 300 and j["num_prompts"] == 300 and j["request_rate"] == 2' \
  "sim --num-prompts 300 --request-rate 2: every request completed"
jcheck "$dir/sim/traffic/summary.json" 'j["duration_s"] > 140' \
  "the run lasted until the last request finished"

# The usual vLLM command, against the embedded server: all at once through 3 slots.
timeout 60 "$bin" run --engine emulate --num-prompts 12 --request-rate inf --max-concurrency 3 \
  --no-inject --prompt-len fixed:64 --answer-len fixed:8 --warmup 0s --metadata tp=1 \
  --no-report --out "$dir/run" --save-result "$dir/run.json" --save-detailed >"$dir/run.out" 2>&1 ||
  { rc=$?; cat "$dir/run.out"; fail "run exited $rc"; }
jcheck "$dir/run.json" 'j["completed"] == 12 and j["num_prompts"] == 12 and j["request_rate"] == "inf"
  and j["max_concurrency"] == 3 and j["burstiness"] == 1 and j["backend"] == "openai"
  and j["model_id"] and j["tp"] == "1" and len(j["ttfts"]) == 12 and len(j["itls"]) == 12
  and j["input_lens"] == [64] * 12 and j["output_lens"] == [8] * 12 and j["errors"] == [""] * 12' \
  "run: vLLM's settings keys and per-request arrays"
python3 "$PY_DIR/check_result.py" "$dir/run" "$dir/run.json" || fail "--save-result disagrees with the CSVs"
# never more than 3 in flight: the 4th request is sent only once one has ended
python3 - "$dir/run/traffic/requests.csv" <<'PY' || fail "--max-concurrency 3 exceeded"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ev = sorted([(int(r["t_send_ns"]), 1) for r in rows] + [(int(r["t_end_ns"]), -1) for r in rows],
            key=lambda e: (e[0], e[1]))
n = top = 0
for _, d in ev:
    n += d; top = max(top, n)
sys.exit(0 if top <= 3 and len(rows) == 12 else 1)
PY
pass "run --num-prompts 12 --request-rate inf --max-concurrency 3: 12 completed, at most 3 in flight"

if "$bin" run --save-detailed --out "$dir/bad" >"$dir/bad.out" 2>&1; then fail "--save-detailed alone ran"; fi
grep -q "needs\|adds to --save-result" "$dir/bad.out" || fail "--save-detailed alone: $(cat "$dir/bad.out")"
[ ! -e "$dir/bad" ] || fail "--save-detailed alone wrote $dir/bad"
pass "--save-detailed without --save-result: bad input, nothing written"

"$bin" sweep --num-prompts 20 --max-concurrency 1,4 --no-inject --no-report --out "$dir/sweep" \
  >"$dir/sweep.out" 2>&1 || { rc=$?; cat "$dir/sweep.out"; fail "sweep --max-concurrency 1,4 exited $rc"; }
jcheck "$dir/sweep/sweep.json" '[p["values"] for p in j["points"]] == [["1"], ["4"]]' \
  "sweep --max-concurrency 1,4: two points"
"$bin" sweep --num-prompts 20 --rate-search 2 --no-inject --no-report --out "$dir/search" \
  >"$dir/search.out" 2>&1 || { rc=$?; cat "$dir/search.out"; fail "sweep --rate-search exited $rc"; }
grep -q "^--rate-search: .* requests/s at most" "$dir/search.out" || fail "no search line"
jcheck "$dir/search/sweep.json" 'j["points"][0]["values"] == ["max"] and
  abs(float(j["points"][2]["values"][0]) - 2 * float(j["points"][1]["values"][0])) < 1e-3 * float(j["points"][2]["values"][0]) and
  all(p["status"] == "ok" for p in j["points"])' \
  "sweep --rate-search 2: max, then R/2 and R ($(grep '^--rate-search' "$dir/search.out"))"
