#!/usr/bin/env python3
"""include_cycles.py ROOT: no file-level include cycle inside any folder of ROOT.

A unit is a source and its header of the same name (x.c with x.h; a header alone is a unit
too). Unit A uses unit B of the same folder when a file of A includes B's header, written
as "folder/b.h" (the project's include style, from src/). Inside a folder the uses must
run one way: two units that reach each other (analysis.c including attribution.h while
attribution.c includes analysis.h) are a cycle. Layers between folders are the build's
check (CMakeLists.txt, ss_<layer>_check); this one is for the files of one folder.

Prints each folder's units and uses; exits 1 naming every cycle, 0 when there is none."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_uses(root, folder, files):
    rel = os.path.relpath(folder, root)
    units = {os.path.splitext(f)[0] for f in files}
    uses = {u: set() for u in units}
    for f in files:
        unit = os.path.splitext(f)[0]
        with open(os.path.join(folder, f), errors="replace") as fh:
            for path in INCLUDE.findall(fh.read()):
                if os.path.dirname(path) != rel:
                    continue
                other = os.path.splitext(os.path.basename(path))[0]
                if other in units and other != unit:
                    uses[unit].add(other)
    return rel, uses


def cycles(uses):
    """The strongly connected components of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(u):
        index[u] = low[u] = len(index)
        stack.append(u)
        on.add(u)
        for v in sorted(uses[u]):
            if v not in index:
                visit(v)
                low[u] = min(low[u], low[v])
            elif v in on:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            comp = []
            while True:
                v = stack.pop()
                on.discard(v)
                comp.append(v)
                if v == u:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for u in sorted(uses):
        if u not in index:
            visit(u)
    return out


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: include_cycles.py ROOT (a source tree, e.g. src)", file=sys.stderr)
        return 2
    root = sys.argv[1]
    found = 0
    for folder, _, names in sorted(os.walk(root)):
        files = sorted(n for n in names if n.endswith((".c", ".h")))
        if not files:
            continue
        rel, uses = folder_uses(root, folder, files)
        n_uses = sum(len(v) for v in uses.values())
        comps = cycles(uses)
        print(f"{rel}: {len(uses)} units, {n_uses} uses, {len(comps)} cycles")
        for comp in comps:
            found += 1
            ties = [f"{u} -> {v}" for u in comp for v in sorted(uses[u]) if v in comp]
            print(f"  cycle in {rel}/: {', '.join(comp)} ({'; '.join(ties)})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
