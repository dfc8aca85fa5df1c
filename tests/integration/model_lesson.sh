#!/usr/bin/env bash
# model_lesson — `stallscope model` reproduces the lesson's arithmetic and refuses bad input.
# usage: model_lesson.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail

bin=$1
scratch=$2
mkdir -p "$scratch"
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"

# ---- the lesson's figures, from --json -------------------------------------------
lesson_args=(--gpu h100-sxm --model llama-3.1-8b --prompt-tokens 4000,8000,16000 --lesson-flops)
"$bin" model "${lesson_args[@]}" --json >"$scratch/lesson.json"
python3 - "$scratch/lesson.json" <<'EOF' || fail_later "the lesson's figures in --json"
import json, sys

doc = json.load(open(sys.argv[1]))
rows = {p["tokens"]: p for p in doc["prompts"]}
checks = [
    # (what, actual, expected) — each within +-3 %
    ("FLOP per token (GFLOP)", doc["flop_per_token"] / 1e9, 16.0),
    ("8k linear ms", rows[8000]["linear_ms"], 129.4),
    ("8k attention ms", rows[8000]["attention_ms"], 17.0),
    ("8k total ms", rows[8000]["total_ms"], 146.0),
    ("decode-only step ms", doc["decode_ms"], 4.8),
    ("8k linear / decode", rows[8000]["ratio_linear"], 27.0),
    ("scaling 4k -> 8k", rows[8000]["scaling_vs_previous"], 2.12),
    ("scaling 8k -> 16k", rows[16000]["scaling_vs_previous"], 2.23),
]
bad = 0
for what, actual, expected in checks:
    ok = abs(actual - expected) <= 0.03 * abs(expected)
    print(f"{'ok  ' if ok else 'FAIL'} {what:24s} {actual:10.3f}  (lesson {expected}, +-3%)")
    bad += not ok
# Keys scripts rely on (docs/reference/model.md).
for key in ("gpu", "model", "flop_per_token", "decode_ms", "prompts"):
    if key not in doc:
        print(f"FAIL missing key {key}")
        bad += 1
for key in ("tokens", "linear_ms", "attention_ms", "total_ms", "ratio_linear", "ratio_total",
            "scaling_vs_previous"):
    if key not in doc["prompts"][0]:
        print(f"FAIL missing prompt key {key}")
        bad += 1
if doc["gpu"] != "h100-sxm" or doc["model"] != "llama-3.1-8b":
    print("FAIL gpu/model names")
    bad += 1
if [p["tokens"] for p in doc["prompts"]] != [4000, 8000, 16000]:
    print("FAIL prompt order")
    bad += 1
if doc["prompts"][0]["scaling_vs_previous"] is not None:
    print("FAIL first row has a scaling ratio")
    bad += 1
# total = linear + attention when compute-bound, the ratio columns agree with the times
for p in doc["prompts"]:
    if p["bound"] == "compute" and abs(p["linear_ms"] + p["attention_ms"] - p["total_ms"]) > 1e-3:
        print(f"FAIL {p['tokens']}: linear + attention != total")
        bad += 1
    if abs(p["ratio_total"] - p["total_ms"] / doc["decode_ms"]) > 1e-6 * p["ratio_total"]:
        print(f"FAIL {p['tokens']}: ratio_total")
        bad += 1
sys.exit(1 if bad else 0)
EOF

# ---- the same command as a table ---------------------------------------------------
"$bin" model "${lesson_args[@]}" >"$scratch/lesson.txt"
for needle in "129.4" "17.0" "146.4" "4.78 ms" "27.1x" "2.12x" "2.23x" "16.0 GFLOP"; do
    if grep -qF -- "$needle" "$scratch/lesson.txt"; then
        echo "ok   table shows $needle"
    else
        fail_later "table lacks '$needle'"
    fi
done
rows=$(grep -cE '^ +(4000|8000|16000) ' "$scratch/lesson.txt" || true)
[ "$rows" = 3 ] && echo "ok   table has 3 prompt rows" || fail_later "table has $rows prompt rows, want 3"

# sizes in the k form give the same figures
"$bin" model --lesson-flops --prompt-tokens 4k,8k,16k --json >"$scratch/lesson_k.json"
if cmp -s "$scratch/lesson.json" "$scratch/lesson_k.json"; then
    echo "ok   4k,8k,16k == 4000,8000,16000 (and h100-sxm, llama-3.1-8b are the defaults)"
else
    fail_later "4k,8k,16k differs from 4000,8000,16000"
fi

# ---- a Hugging Face config.json gives what the catalog gives -----------------------
cat >"$scratch/config.json" <<'EOF'
{
  "_name_or_path": "meta-llama/Llama-3.1-8B",
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "tie_word_embeddings": false, "vocab_size": 128256
}
EOF
"$bin" model --json >"$scratch/catalog.json"
"$bin" model --json --model-config "$scratch/config.json" >"$scratch/hf.json"
python3 - "$scratch/catalog.json" "$scratch/hf.json" <<'EOF' \
    || fail_later "--model-config differs from the catalog"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["model"] == "Llama-3.1-8B", b["model"]
for key in ("flop_per_token", "weight_bytes", "kv_bytes_per_token", "decode_ms"):
    assert a[key] == b[key], key
assert a["prompts"] == b["prompts"]
print("ok   --model-config config.json == catalog llama-3.1-8b")
EOF

# ---- --list and --help -------------------------------------------------------------
"$bin" model --list >"$scratch/list.txt"
for needle in h100-sxm h200 a100-80g llama-3.1-8b llama-3.1-70b mistral-7b qwen2.5-7b; do
    grep -qF -- "$needle" "$scratch/list.txt" || fail_later "--list lacks $needle"
done
echo "ok   --list names the catalog"
"$bin" model --help >"$scratch/help.txt"
grep -qF -- "--prompt-tokens" "$scratch/help.txt" \
    && grep -qF -- "--lesson-flops" "$scratch/help.txt" \
    && echo "ok   --help lists the options" || fail_later "--help"

# ---- bad input: exit 2, one line on stderr, nothing on stdout ----------------------
expect_usage() {
    local rc=0
    "$bin" model "$@" >"$scratch/bad.out" 2>"$scratch/bad.err" || rc=$?
    local what="model $*"
    if [ "$rc" != 2 ]; then
        fail_later "$what: exit $rc, want 2"
    elif [ -s "$scratch/bad.out" ]; then
        fail_later "$what: wrote to stdout"
    elif ! grep -q '^stallscope model: ' "$scratch/bad.err"; then
        fail_later "$what: stderr lacks 'stallscope model: ...': $(cat "$scratch/bad.err")"
    elif [ "$(wc -l <"$scratch/bad.err")" != 1 ]; then
        fail_later "$what: stderr is not one line"
    else
        echo "ok   exit 2: $what -> $(cat "$scratch/bad.err")"
    fi
}
expect_usage --gpu h100
expect_usage --model gpt-5
expect_usage --prompt-tokens 8q
expect_usage --prompt-tokens 0
expect_usage --prompt-tokens -8000
expect_usage --prompt-tokens 4000,0
expect_usage --prompt-tokens 200k
expect_usage --model mistral-7b --prompt-tokens 40k
expect_usage --decode-batch 0
expect_usage --model-config "$scratch/missing.json"
expect_usage --no-such-option
# the unknown names come with the list of known ones
"$bin" model --gpu nope 2>"$scratch/bad.err" >/dev/null || true
grep -qF "h100-sxm" "$scratch/bad.err" && echo "ok   unknown GPU lists the known ones" \
    || fail_later "unknown GPU error lacks the known names"
"$bin" model --model nope 2>"$scratch/bad.err" >/dev/null || true
grep -qF "llama-3.1-8b" "$scratch/bad.err" && echo "ok   unknown model lists the known ones" \
    || fail_later "unknown model error lacks the known names"

failures_end model_lesson
