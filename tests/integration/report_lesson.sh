#!/usr/bin/env bash
# The report of a run (issue 6): sim writes OUT/report.html and OUT/plots/ by default,
# --no-report skips them, `report DIR` rebuilds the same page from the artifacts, every
# plot has its size and its data, and the timeline carries one marker per injection; `report
# DIR` on a directory of runs (out/ after the README's tour) names each with its report line
# and rebuilds nothing (issue 28, point 2).
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

# png_check FILE W H: a PNG of that size whose pixels are not all one color.
png_check() {
  python3 - "$@" <<'PY' || fail "png $1"
import struct, sys, zlib
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        ihdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
assert ihdr[0] == w and ihdr[1] == h, f"size {ihdr[0]}x{ihdr[1]}, expected {w}x{h}"
raw = zlib.decompress(idat)
assert len(set(raw[1:2000])) > 1 or len(set(raw)) > 8, "blank image"
PY
}
# markers SVG: the injection markers (dashed purple strokes) in an SVG file.
markers() { grep -o 'stroke:rgb(60%,0%,60%)' "$1" | wc -l; }

# 1. The lesson: report by default.
"$bin" sim --preset lesson --out "$dir/lesson" >"$dir/lesson.txt"
grep -q "report:    $dir/lesson/report.html" "$dir/lesson.txt" || fail "sim does not name its report"
[ -s "$dir/lesson/report.html" ] || fail "no report.html"
for p in timeline percentiles ccdf steps; do
  [ -s "$dir/lesson/plots/$p.png" ] && [ -s "$dir/lesson/plots/$p.svg" ] || fail "missing plot $p"
done
pass "report.html and 4 plots (PNG + SVG)"
png_check "$dir/lesson/plots/timeline.png" 960 570
png_check "$dir/lesson/plots/percentiles.png" 960 440
png_check "$dir/lesson/plots/ccdf.png" 960 480
png_check "$dir/lesson/plots/steps.png" 960 520
pass "PNG sizes and non-blank pixels"
n_inj=$(json "$dir/lesson/interference/summary.json" "len(j['injections'])")
[ "$(markers "$dir/lesson/plots/timeline.svg")" = "$n_inj" ] || fail "timeline markers != $n_inj injections"
[ "$n_inj" = 4 ] || fail "lesson has $n_inj injections"
pass "timeline.svg: 4 markers for 4 injections"
# The same markers inline in the HTML, and nothing fetched from anywhere.
python3 - "$dir/lesson/report.html" <<'PY' || fail "report.html structure"
import re, sys
doc = open(sys.argv[1]).read()
fig = doc[doc.index('<figure id="fig-timeline">'):]
fig = fig[:fig.index('</figure>')]
assert fig.count('stroke:rgb(60%,0%,60%)') == 4, "inline timeline markers"
assert '<script' not in doc and not re.search(r'(src|href)="https?:', doc), "not self-contained"
assert not re.search(r'id="glyph', doc), "unprefixed ids"
for link in ("baseline/tokens.csv", "interference/requests.csv", "interference/steps.csv",
             "comparison.json", "plots/timeline.png"):
    assert f'href="{link}"' in doc, link
assert "4/4 injections each stalled 32/32 users" in doc, "verdict"
assert "Measured beside the cost model" in doc and "this run is itself" in doc, "prediction"
PY
pass "report.html: inline markers, self-contained, links, verdict"

# 2. report DIR rebuilds the same page from the files.
cp "$dir/lesson/report.html" "$dir/first.html"
"$bin" report "$dir/lesson" >"$dir/report.txt"
grep -q "report: $dir/lesson/report.html" "$dir/report.txt" || fail "report does not name its page"
cmp -s "$dir/first.html" "$dir/lesson/report.html" || fail "report DIR wrote a different page"
pass "report DIR rebuilds the identical page"

# 3. --no-report, then report DIR writes it.
"$bin" sim --preset lesson --duration 12s --out "$dir/quiet" --no-report >/dev/null
[ ! -e "$dir/quiet/report.html" ] && [ ! -e "$dir/quiet/plots" ] || fail "--no-report wrote a report"
"$bin" report "$dir/quiet" >/dev/null
[ -s "$dir/quiet/report.html" ] || fail "report DIR after --no-report"
# report --no-report recomputes the summaries and leaves the page alone.
cp "$dir/quiet/report.html" "$dir/quiet.html"
touch -d '2001-01-01' "$dir/quiet/report.html" "$dir/quiet/interference/summary.json"
"$bin" report "$dir/quiet" --no-report >"$dir/quiet.txt"
cmp -s "$dir/quiet.html" "$dir/quiet/report.html" || fail "report --no-report changed the page"
[ "$(stat -c %Y "$dir/quiet/report.html")" = "$(date -d '2001-01-01' +%s)" ] ||
  fail "report --no-report rewrote report.html"
[ "$(stat -c %Y "$dir/quiet/interference/summary.json")" != "$(date -d '2001-01-01' +%s)" ] ||
  fail "report --no-report did not recompute summary.json"
grep -q "stalled" "$dir/quiet.txt" && ! grep -q "report:" "$dir/quiet.txt" ||
  fail "report --no-report: no table, or it names a page"
pass "--no-report, then report DIR; report --no-report recomputes the summaries only"

# 4. Every 1 s: 40 injections, 40 markers.
"$bin" sim --preset lesson-1s --out "$dir/every1s" --json >/dev/null
n_inj=$(json "$dir/every1s/interference/summary.json" "len(j['injections'])")
[ "$(markers "$dir/every1s/plots/timeline.svg")" = "$n_inj" ] || fail "lesson-1s markers != $n_inj"
pass "lesson-1s: $n_inj markers for $n_inj injections"

# 5. A single run directory (no baseline) reports on itself.
"$bin" report "$dir/quiet/interference" >/dev/null
[ -s "$dir/quiet/interference/report.html" ] || fail "report on a run directory"
grep -q 'href="tokens.csv"' "$dir/quiet/interference/report.html" || fail "run-directory links"
pass "report on one run directory"

# 6. Bad input: a directory without a log.
mkdir -p "$dir/empty"
set +e
"$bin" report "$dir/empty" 2>"$dir/empty.err"; rc=$?
set -e
[ $rc = 2 ] && grep -q "no token log" "$dir/empty.err" || fail "report on an empty dir: rc $rc"
pass "report on an empty directory: exit 2"

# 7. A directory of runs and sweeps, none its own: each named, nothing rebuilt (issue 28).
P=$dir/parent
"$bin" sim --users 4 --duration 2s --no-report --out "$P/a" >/dev/null
"$bin" sweep --prompt-tokens 1k,2k --users 4 --duration 2s --no-report --out "$P/s" >/dev/null 2>&1
mkdir -p "$P/notes"
stamps() { find "$P" -type f -printf '%p %T@\n' | sort | md5sum; }
before=$(stamps)
"$bin" report "$P" >"$dir/index.out" 2>"$dir/index.err" ||
  fail "report on a directory of runs: exit $?: $(cat "$dir/index.err")"
grep -q "holds no run of its own but 2 run or sweep directories" "$dir/index.out" &&
  grep -q "stallscope report $P/a  *# baseline + interference" "$dir/index.out" &&
  grep -q "stallscope report $P/s  *# sweep, 2 points" "$dir/index.out" ||
  fail "the index: $(cat "$dir/index.out")"
! grep -q notes "$dir/index.out" || fail "the index names a directory without a run"
[ ! -e "$P/a/report.html" ] && [ "$before" = "$(stamps)" ] ||
  fail "report on a directory of runs rebuilt something"
"$bin" report "$P" --json >"$dir/index.json"
check "report --json: the runs by directory" \
  '[r["dir"].rsplit("/", 1)[1] for r in a["runs"]] == ["a", "s"] and a["runs"][1]["holds"] == "sweep, 2 points"' \
  "$dir/index.json"
set +e
"$bin" report "$P" --fail-if 'stalls>0' >/dev/null 2>"$dir/index-gate.err"; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--fail-if judges one run" "$dir/index-gate.err" ||
  fail "--fail-if on a directory of runs: exit $rc, $(cat "$dir/index-gate.err")"
pass "report on a directory of runs: each named with its report line, nothing rebuilt; --fail-if: exit 2"
echo "report_lesson: all checks passed"
