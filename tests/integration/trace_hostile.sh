#!/usr/bin/env bash
# Hostile trace files (issue 22, "Done when": the attack's categories, repeatable), each
# through `sim --trace` (no server, virtual time: the whole table takes seconds): the exit
# status and a phrase of the message, FILE:LINE where a line is to blame. Exit 2 is bad
# input (nothing run); exit 0 cases check what was planned. Every command is bounded
# (timeout 60); /dev/zero must be refused at its first byte, not read for a gigabyte.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || skip_or_fail "python3 is missing"
command -v timeout >/dev/null || skip_or_fail "timeout (coreutils) is missing"
rm -rf "$dir"; mkdir -p "$dir"
cd "$dir" # the messages name the files as given: short relative names

AZ="TIMESTAMP,ContextTokens,GeneratedTokens"
BG="Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
az_row() { echo "2024-05-10 00:00:0$1,$2,$3"; }                 # seconds (one digit), prompt, answer
bg_row() { echo "$1,ChatGPT,$2,$3,$(($2 + $3)),Conversation log"; } # seconds, prompt, answer
mc_row() { echo "{\"timestamp\": $1, \"input_length\": $2, \"output_length\": $3, \"hash_ids\": [1]}"; } # ms
pj_row() { echo "{\"t\": $1, \"prompt_tokens\": $2, \"max_tokens\": $3}"; } # seconds

# ---- the files ------------------------------------------------------------------------------
: >empty.csv
echo "$AZ" >header.csv
printf '\xef\xbb\xbf%s\n%s\n%s\n' "$AZ" "$(az_row 1 100 5)" "$(az_row 2 100 5)" >bom.csv
printf '%s\r\n%s\r\n%s\r\n' "$AZ" "$(az_row 1 100 5)" "$(az_row 2 100 5)" >crlf.csv
{ echo "TIMESTAMP,ContextTokens"; echo "2024-05-10 00:00:01,100"; } >nocolumn.csv
{ echo "$AZ"; az_row 1 100 5; echo "2024-05-10 00:00:02,100"; } >shortrow.csv
{ echo "Region,$AZ,Model"; echo "eu,$(az_row 1 100 5),gpt"; echo "us,$(az_row 2 100 5),gpt"; } >extra.csv
{ echo "$AZ"; az_row 1 many 5; } >nonnumeric.csv
{ echo "$AZ"; az_row 1 -5 5; } >negative.csv
{ echo "$AZ"; az_row 1 100 0; } >zero.csv
{ echo "$AZ"; az_row 1 nan 5; } >nan.csv
{ echo "$AZ"; az_row 1 1e309 5; } >inf.csv
{ pj_row 0.1 100 5; pj_row 0.2 1e309 5; } >inf.jsonl
{ pj_row 0.3 100 5; pj_row 0.1 100 5; pj_row 0.2 100 5; } >backwards.jsonl
{ pj_row 0.1 100 5; pj_row 0.1 100 5; pj_row 0.1 100 5; } >duplicate.jsonl
python3 -c "
import sys
sys.stdout.write('{\"t\": 0.1, \"prompt_tokens\": 100, \"max_tokens\": 5}\n')
sys.stdout.write('{\"t\": 0.2, \"prompt\": \"' + 'x' * (2 << 20) + '\", \"max_tokens\": 5}\n')" >huge.jsonl
printf '%s\n%s' "$(pj_row 0.1 100 5)" "$(pj_row 0.2 100 5)" >nonewline.jsonl
printf '%s\n2024-05-10 00:00:01,10\0,5\n' "$AZ" >nul.csv
printf '%s\n{"t": 0.2, "prompt": "\xff\xfe", "max_tokens": 5}\n' "$(pj_row 0.1 100 5)" >utf8.jsonl
printf '%s\n0.1,\xff\xfeGPT,100,5,105,Conversation log\n' "$BG" >utf8.csv
mkdir -p adir
echo "$AZ" >unreadable.csv && az_row 1 100 5 >>unreadable.csv && chmod 000 unreadable.csv
{ echo '{"t": 0.1, "prompt_tokens": 100, "max_tokens": 5'; pj_row 0.2 100 5; } >badfirst.jsonl
{ mc_row 100 100 5; pj_row 0.2 100 5; } >mixed.jsonl
{ echo "a,b,c"; echo "1,2,3"; } >unknown.csv
{ echo "$AZ"; az_row 1 100 5; echo "2024-13-10 00:00:02,100,5"; az_row 3 100 5; } >azure-bad.csv
{ echo "$BG"; bg_row 0.1 100 5; echo "0.2,ChatGPT,100"; bg_row 0.3 100 5; } >burstgpt-bad.csv
{ mc_row 100 100 5; mc_row 200 0 5; mc_row 300 100 5; } >mooncake-bad.jsonl
{ pj_row 0.1 100 5; echo '{"t": 0.2, "max_tokens": 5}'; pj_row 0.3 100 5; } >plain-bad.jsonl
{ echo "$BG"; bg_row 0.1 100 0; } >failedonly.csv
{ pj_row 10 100 5; pj_row 12 100 5; } >late.jsonl

# ---- the table: NAME | FILE | FLAGS | EXIT | PHRASE (grep -F, in stdout + stderr) ----------
cases="empty|empty.csv||2|empty.csv: the trace is empty
header only|header.csv||2|header.csv: no rows after its header (line 1)
BOM|bom.csv||0|trace bom.csv (azure): 2 rows read of 2 lines
CRLF|crlf.csv||0|trace crlf.csv (azure): 2 rows read of 2 lines
missing column|nocolumn.csv||2|nocolumn.csv:1: the header has no 'GeneratedTokens' column
missing field|shortrow.csv||2|shortrow.csv:3: 2 fields, the header names 3
extra columns|extra.csv||0|trace extra.csv (azure): 2 rows read of 2 lines
non-numeric length|nonnumeric.csv||2|nonnumeric.csv:2: ContextTokens: 'many' is not a token count
negative length|negative.csv||2|negative.csv:2: ContextTokens: -5 is out of range [1, 16777216]
zero length|zero.csv||2|zero.csv:2: GeneratedTokens: 0 is out of range [1, 16777216]
NaN length|nan.csv||2|nan.csv:2: ContextTokens: 'nan' is not a token count
1e309 length (CSV)|inf.csv||2|inf.csv:2: ContextTokens: '1e309' is not a token count
1e309 length (JSONL)|inf.jsonl||2|inf.jsonl:2: not JSON: real number overflow
times going backwards|backwards.jsonl||0|3 requests planned in 1 pass
duplicate times|duplicate.jsonl||0|3 requests planned in 1 pass
a huge line|huge.jsonl||2|huge.jsonl:2: a line of more than 1048576 bytes
no trailing newline|nonewline.jsonl||0|2 rows read of 2 lines
NUL bytes|nul.csv||2|nul.csv:2: a NUL byte (column 23): not a text file
invalid UTF-8 (JSONL)|utf8.jsonl||2|utf8.jsonl:2: not JSON: unable to decode byte 0xff
invalid UTF-8 (an ignored CSV column)|utf8.csv||0|trace utf8.csv (burstgpt): 1 rows read of 1 lines
/dev/zero|/dev/zero||2|/dev/zero:1: a NUL byte (column 1): not a text file
a directory|adir||2|adir is a directory, not a trace file
a missing file|nosuch.csv||2|cannot open nosuch.csv: No such file or directory
an unreadable file|unreadable.csv||2|cannot open unreadable.csv: Permission denied
JSONL, a malformed first line|badfirst.jsonl||2|badfirst.jsonl:1: not JSON: '}' expected near end of file (column 48) (read as jsonl, guessed from line 2)
JSONL, mixed keys|mixed.jsonl||2|mixed.jsonl:2: no \"timestamp\" (read as mooncake, guessed from line 1)
a format nothing tells|unknown.csv||2|unknown.csv:1: neither a JSON object nor an Azure or BurstGPT CSV header; the first lines tell no format: give --trace-format
Azure, one bad row|azure-bad.csv||2|azure-bad.csv:3: TIMESTAMP: '2024-13-10 00:00:02' is not a valid date and time
Azure, skipped|azure-bad.csv|--skip-bad-rows|0|skipped: 1 bad
BurstGPT, one bad row|burstgpt-bad.csv||2|burstgpt-bad.csv:3: 3 fields, the header names 4
BurstGPT, skipped|burstgpt-bad.csv|--skip-bad-rows|0|skipped: 1 bad
Mooncake, one bad row|mooncake-bad.jsonl||2|mooncake-bad.jsonl:2: \"input_length\": 0 is out of range [1, 16777216]
Mooncake, skipped|mooncake-bad.jsonl|--skip-bad-rows|0|skipped: 1 bad
plain JSONL, one bad row|plain-bad.jsonl||2|plain-bad.jsonl:2: neither \"prompt_tokens\" nor \"prompt\"
plain JSONL, skipped|plain-bad.jsonl|--skip-bad-rows|0|skipped: 1 bad
only failed requests|failedonly.csv||2|failedonly.csv: none of its 1 rows can be replayed (0 bad, 1 failed requests)
every row outside the window|late.jsonl|--to 5s|2|late.jsonl: all 2 rows are outside --from/--to (they span 10.000 to 12.000 s of trace time)
every row after --duration|late.jsonl|--duration 8s|2|late.jsonl: every row is at or after --duration (8.000 s; the first at 10.000 s of the run)"

n=0
while IFS='|' read -r name file flags want phrase; do
  n=$((n + 1))
  if [ "$file" = unreadable.csv ] && [ "$(id -u)" = 0 ]; then
    echo "skip: $name (root reads every file)"
    continue
  fi
  out="case$n.out"
  rc=0
  # shellcheck disable=SC2086 # flags: zero or more words
  timeout 60 "$bin" sim --trace "$file" $flags --no-inject --out "o$n" >"$out" 2>&1 || rc=$?
  phrase=${phrase//\\\"/\"}
  if [ "$rc" != "$want" ] || ! grep -qF -- "$phrase" "$out"; then
    fail_later "$name: exit $rc (want $want), want the phrase: $phrase"
    sed 's/^/    /' "$out" | head -5 >&2
    continue
  fi
  if [ "$want" = 2 ] && [ -e "o$n" ]; then
    fail_later "$name: bad input, but o$n was written"
    continue
  fi
  echo "ok: $name: exit $rc, $(grep -F -- "$phrase" "$out" | head -1 | cut -c1-150)"
done <<<"$cases"
chmod 600 unreadable.csv
[ "$FAILURES" = 0 ] || fail "$FAILURES of $n hostile traces"

# What the accepted ones planned: rows sorted by time, duplicates kept, each its own stream.
python3 - "$dir" <<'PY' || fail "the accepted traces' plans"
import csv, glob, os, sys
d = sys.argv[1]
def plans(n):
    rows = list(csv.DictReader(open(f"{d}/o{n}/traffic/requests.csv")))
    return sorted(int(r["t_plan_ns"]) for r in rows if r["kind"] == "bg"), len({r["user"] for r in rows})
for n, want in ((14, [100_000_000, 200_000_000, 300_000_000]), (15, [100_000_000] * 3)):
    got, streams = plans(n)
    if got != want or streams != 3:
        print(f"case {n}: planned at {got} on {streams} streams, want {want} on 3")
        sys.exit(1)
print("ok: backwards rows sorted, duplicate times kept, each a stream of its own")
PY
pass "$n hostile traces: each its exit status and its words"
