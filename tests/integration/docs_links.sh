#!/usr/bin/env bash
# Every relative Markdown link in README.md and docs/ resolves: to a file or folder of the
# tree, and a '#anchor' to a heading of the page it names (the anchor a renderer gives the
# heading: lower case, spaces as '-', other punctuation dropped, '-1', '-2' ... for repeats).
# Links inside code (fenced blocks, `spans`) and to other sites are not links to check.
# First the checker is shown to catch a missing file and a missing anchor.
# usage: docs_links.sh STALLSCOPE_BINARY SCRATCH_DIR   (the binary is not used)
set -euo pipefail
dir=$2
. "$(dirname "$0")/lib.bash"
rm -rf "$dir"; mkdir -p "$dir"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}

cat >"$dir/check_links.py" <<'PY'
import os, re, sys

root = sys.argv[1]
FENCE = re.compile(r'^\s*(```|~~~)')
LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')

def prose_lines(path):
    """The lines outside fenced code, with inline code spans blanked."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield n, re.sub(r'(`+)(?:(?!\1).)+\1', '', line)

def slug(text):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)  # a link's text
    text = text.replace('`', '').strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')

anchors = {}
def anchors_of(path):
    if path not in anchors:
        seen, found = {}, set()
        fenced = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
                if m:
                    s = slug(m.group(1))
                    k = seen.get(s, 0)
                    seen[s] = k + 1
                    found.add(s if k == 0 else f"{s}-{k}")
        anchors[path] = found
    return anchors[path]

pages = [os.path.join(root, "README.md")]
for d, _, files in os.walk(os.path.join(root, "docs")):
    pages += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
problems, links = [], 0
for page in pages:
    for n, line in prose_lines(page):
        for target in LINK.findall(line):
            if re.match(r'^[a-z][a-z0-9+.-]*:', target):  # http:, https:, mailto: ...
                continue
            links += 1
            path, _, anchor = target.partition('#')
            where = f"{os.path.relpath(page, root)}:{n}"
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                problems.append(f"{where}: {target}: no such file")
            elif anchor and os.path.isfile(dest) and dest.endswith(".md") \
                    and anchor not in anchors_of(dest):
                problems.append(f"{where}: {target}: no heading '#{anchor}' in "
                                f"{os.path.relpath(dest, root)}")
for p in problems:
    print(p)
print(f"{len(pages)} pages, {links} relative links, {len(problems)} broken", file=sys.stderr)
sys.exit(1 if problems else 0)
PY

# The checker catches what it should: a page with one good link of each kind, a missing
# file, a missing anchor, and links in code that are not links.
mkdir -p "$dir/tree/docs/guide"
cat >"$dir/tree/README.md" <<'MD'
# Top

[good](docs/guide/a.md#a-heading-with-code) [folder](docs/guide/) [self](#top)
[missing file](docs/guide/nope.md) [missing anchor](docs/guide/a.md#nowhere)
`[in code](nope.md)`
```
[in a block](nope.md)
```
MD
printf '# A page\n\n## A heading, with `code`\n\n## A heading, with `code`\n\n[twice](#a-heading-with-code-1) [out](https://example.com/x)\n' \
  >"$dir/tree/docs/guide/a.md"
rc=0; python3 "$dir/check_links.py" "$dir/tree" >"$dir/self.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$dir/self.out"; fail "the checker exited $rc on a tree with two broken links, want 1"; }
grep -q 'nope.md: no such file' "$dir/self.out" || { cat "$dir/self.out"; fail "a missing file was not caught"; }
grep -q "no heading '#nowhere'" "$dir/self.out" || { cat "$dir/self.out"; fail "a missing anchor was not caught"; }
[ "$(grep -c 'README.md:' "$dir/self.out")" = 2 ] || { cat "$dir/self.out"; fail "want exactly the two broken links"; }
pass "the checker catches a missing file and a missing anchor, and nothing else"

python3 "$dir/check_links.py" "$src" >"$dir/links.out" 2>"$dir/links.err" ||
  { cat "$dir/links.out" "$dir/links.err"; fail "broken links in README.md or docs/"; }
pass "README.md and docs/: $(cat "$dir/links.err")"
