"""Artifacts against their spec, docs/reference/artifacts.md (ctest registers only *.sh):

    python3 check_artifacts.py SPEC.md [--axes A,B] NAME=PATH ...

NAME is what a table heading of SPEC names (tokens.csv, summary.json, hardware profile,
--save-result ...); PATH one file of it. A CSV's header row must be the table's columns in
order (<axes> stands for --axes), or without its trailing columns whose meaning starts
"optional:" (written together or not at all); a JSON file's keys, at the top and in every nested object
and array element, must be those of its table: every key present "always", no key the
table lacks, each nested object or array of objects described by a table of its own (or
one its type names: "(as `FILE` `PATH`)"). Every file of SPEC must be given at least once.
Exit 1 listing every difference, 0 naming the tables checked."""
import csv
import itertools
import json
import re
import sys

HEADING = re.compile(r"^#{3,4} `([^`]+)`(?: `([^`]+)`)?\s*$")
NAME = re.compile(r"^`([^`]+)`$")
REF = re.compile(r"\(as `([^`]+)`(?: `([^`]+)`)?\)")


def expand(name):
    """`p{50,99}_{a,b}` -> p50_a, p50_b, p99_a, p99_b."""
    parts = re.split(r"\{([^}]*)\}", name)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_spec(path):
    """{(file, path): {"kind": "csv"|"json", "rows": [...]}}; path "" for a file's own table."""
    tables, key, lines = {}, None, open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = HEADING.match(lines[i])
        i += 1
        if not m:
            continue
        key = (m.group(1), m.group(2) or "")
        while i < len(lines) and not lines[i].startswith("|"):
            if HEADING.match(lines[i]) or lines[i].startswith("## "):
                break
            i += 1
        if i >= len(lines) or not lines[i].startswith("|"):
            sys.exit(f"{path}: heading {key} has no table")
        head = cells(lines[i])
        i += 2  # the header and the |---| row
        if head[0] not in ("column", "key"):
            sys.exit(f"{path}: table {key}: first column is '{head[0]}', not column or key")
        rows = []
        while i < len(lines) and lines[i].startswith("|"):
            c = dict(zip(head, cells(lines[i])))
            n = NAME.match(c[head[0]])
            if not n:
                sys.exit(f"{path}: table {key}: '{c[head[0]]}' is not a `name`")
            ref = REF.search(c.get("type", ""))
            for name in expand(n.group(1)):
                rows.append({"name": name, "type": c.get("type", ""),
                             "required": c.get("present", "always") == "always",
                             "optional": c.get("meaning", "").startswith("optional:"),
                             "ref": (ref.group(1), ref.group(2) or "") if ref else None})
            i += 1
        if key in tables:
            sys.exit(f"{path}: table {key} given twice")
        tables[key] = {"kind": "csv" if head[0] == "column" else "json", "rows": rows}
    return tables


class Checker:
    def __init__(self, tables, axes):
        self.tables, self.axes, self.errors, self.used = tables, axes, [], set()

    def fail(self, where, what):
        self.errors.append(f"{where}: {what}")

    def csv(self, name, path):
        t = self.tables[(name, "")]
        want = []
        for r in t["rows"]:
            want += self.axes if r["name"] == "<axes>" else [r["name"]]
        with open(path, newline="", encoding="utf-8") as f:
            got = next(csv.reader(f), [])
        self.used.add((name, ""))
        n_optional = 0
        for r in reversed(t["rows"]):
            if not r["optional"]:
                break
            n_optional += 1
        if got != want and got != want[:len(want) - n_optional]:
            self.fail(path, f"header {','.join(got)}\n    spec   {','.join(want)}")

    def table_for(self, name, spath, child):
        """The table of child (a key of the object at spec path spath), as a spec path."""
        for p in ((child if not spath else f"{spath}.{child}"), (f"{spath}.*" if spath else "*")):
            if (name, p) in self.tables:
                return (name, p)
        return None

    def obj(self, where, name, spath, value):
        t = self.tables.get((name, spath))
        if t is None:
            self.fail(where, f"no table `{name}` `{spath}` in the spec")
            return
        self.used.add((name, spath))
        rows = {r["name"]: r for r in t["rows"]}
        got = set(value)
        for k in sorted({n for n, r in rows.items() if r["required"]} - got):
            self.fail(where, f"key '{k}' missing (the spec says always)")
        for k in sorted(got - set(rows)):
            self.fail(where, f"key '{k}' is not in the spec's table `{name}` `{spath}`")
        for k in sorted(got & set(rows)):
            r, v, at = rows[k], value[k], f"{where}.{k}"
            if v is None:
                if "null" not in r["type"]:
                    self.fail(at, "null, and the spec's type does not allow it")
                continue
            if "map" in r["type"]:
                continue
            child = k if not spath else f"{spath}.{k}"
            if isinstance(v, dict):
                target = r["ref"] or self.table_for(name, spath, k)
                if target is None and (name, child + ".*") in self.tables:
                    self.used.add((name, child))  # keys are data; each value has child.*
                    for kk, vv in v.items():
                        if not isinstance(vv, dict):
                            self.fail(f"{at}.{kk}", "not an object, as the spec's `*` says")
                        else:
                            self.obj(f"{at}.{kk}", name, child + ".*", vv)
                elif target is None:
                    self.fail(at, "an object the spec has no table for")
                else:
                    self.obj(at, target[0], target[1], v)
            elif isinstance(v, list):
                target = r["ref"] or ((name, child + "[]") if (name, child + "[]") in self.tables else None)
                for i, e in enumerate(v):
                    if isinstance(e, dict):
                        if target is None:
                            self.fail(at, "objects the spec has no table for")
                            break
                        self.obj(f"{at}[{i}]", target[0], target[1], e)

    def json(self, name, path):
        with open(path, encoding="utf-8") as f:
            self.obj(path, name, "", json.load(f))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    tables, axes = parse_spec(args.pop(0)), []
    if args and args[0] == "--axes":
        axes = args[1].split(",")
        args = args[2:]
    c = Checker(tables, axes)
    for a in args:
        name, _, path = a.partition("=")
        if (name, "") not in tables:
            sys.exit(f"{name}: no such file in the spec")
        (c.csv if tables[(name, "")]["kind"] == "csv" else c.json)(name, path)
    files = sorted({f for f, p in tables if p == ""})
    for f in files:
        if (f, "") not in c.used:
            c.fail(f, "the spec has it, no file of it was checked")
    for e in c.errors:
        print("FAIL:", e)
    unused = sorted(k for k in tables if k not in c.used)
    print(f"checked {len(c.used & set(tables))} of {len(tables)} tables ({len(files)} files); "
          f"not reached by these files: {', '.join(f'{f} {p}' for f, p in unused) or 'none'}")
    sys.exit(1 if c.errors else 0)


if __name__ == "__main__":
    main()
