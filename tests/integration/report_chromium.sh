#!/usr/bin/env bash
# The HTML report in a real browser (issue 6): headless Chromium loads OUT/report.html with
# no console error and no failed resource, and a screenshot of the page's top shows the
# timeline (its dots and its injection markers), not a blank area. Without Chromium: a
# FAILURE as root or with CI=true (`make test` installs it there: scripts/deps.sh test),
# skipped (exit 77, the reason printed) otherwise.
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"

chrome=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chrome" ] || skip_or_fail "chromium is not installed (apt-get install chromium)"

# browse URL LOG [extra flags...]: one headless Chromium, bounded, its log kept.
browse() {
  local url=$1 log=$2; shift 2
  local profile; profile=$(mktemp -d "$dir/profile.XXXXXX")
  local flags=(--headless --disable-gpu --disable-quic --no-first-run
               --disable-background-networking --disable-component-update --disable-sync
               --user-data-dir="$profile" --enable-logging=stderr --v=0)
  [ "$(id -u)" = 0 ] && flags+=(--no-sandbox)
  timeout -k 5 90 "$chrome" "${flags[@]}" "$@" "$url" 2>"$log" || {
    echo "chromium failed (rc $?); its log:" >&2; tail -20 "$log" >&2; return 1; }
}
# console_errors LOG: the page's console errors and failed loads, one per line.
console_errors() { grep -E 'CONSOLE|Uncaught|Failed to load resource|net::ERR_' "$1" || true; }

# 0. The check can fail: a page that throws is caught.
cat >"$dir/control.html" <<'HTML'
<!DOCTYPE html><html><body><script>throw new Error("stallscope-control-error");</script></body></html>
HTML
browse "file://$dir/control.html" "$dir/control.log" --dump-dom >"$dir/control.dom"
console_errors "$dir/control.log" | grep -q "stallscope-control-error" ||
  fail "a page that throws shows no console error: the check is blind (log: $dir/control.log)"
pass "control: a throwing page is caught"

# 1. The lesson's report loads clean.
"$bin" sim --preset lesson --out "$dir/lesson" >/dev/null
browse "file://$dir/lesson/report.html" "$dir/load.log" --dump-dom >"$dir/report.dom"
errors=$(console_errors "$dir/load.log")
[ -z "$errors" ] || fail "console errors loading report.html: $errors"
grep -q '<figure id="fig-timeline">' "$dir/report.dom" || fail "the DOM lacks the timeline"
[ "$(grep -o 'stroke:rgb(60%,0%,60%)' "$dir/report.dom" | wc -l)" -ge 4 ] || fail "DOM markers"
pass "report.html loads with no console error"

# 2. A screenshot of the top of the page: the timeline is drawn.
browse "file://$dir/lesson/report.html" "$dir/shot.log" --window-size=1200,1200 \
  --hide-scrollbars --screenshot="$dir/shot.png" >/dev/null
[ -s "$dir/shot.png" ] || fail "no screenshot"
python3 - "$dir/shot.png" <<'PY' || fail "the timeline screenshot is blank or lacks its data"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6), f"unexpected PNG format {depth}/{ctype}"
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
rows, prev, i = [], bytearray(stride), 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
def near(px, rgb, tol=40):
    return all(abs(px[k] - rgb[k]) <= tol for k in range(3))
# A marker: a faint line (35 % purple on white) under a solid purple head at the top.
nonwhite = orange = purple = faint = 0
for line in rows:
    for x in range(0, stride, bpp):
        px = line[x:x + 3]
        if px[0] < 235 or px[1] < 235 or px[2] < 235: nonwhite += 1
        if near(px, (217, 84, 26)): orange += 1
        if near(px, (153, 0, 153)): purple += 1
        if near(px, (219, 166, 219), 20): faint += 1
total = w * h
print(f"screenshot {w}x{h}: {100 * nonwhite / total:.1f} % non-white, "
      f"{orange} interference-dot pixels, {purple} marker-head and {faint} marker-line pixels")
assert nonwhite > 0.03 * total, "blank"
assert orange > 300, "no interference gaps drawn"
assert purple > 40 and faint > 300, "no injection markers drawn"
PY
pass "screenshot: the timeline shows its gaps and markers"
rm -rf "$dir"/profile.*
echo "report_chromium: all checks passed"
