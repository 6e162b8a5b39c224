#!/usr/bin/env python3
"""Check the C tree's layering and function sizes (docs/design.md, "Layers").

1. vmm/ is a leaf under pool/: no file under vmm/ includes a header that
   lives in pool/ (by name, as the build's include path would find it, or by
   a path into pool/).
2. No function of the library, the benchmarks, the tests or the PyTorch
   binding is longer than MAX_LINES, except the red-black tree's delete
   (pool/tree.c: xs_tree_remove), whose cases read best in one piece.

Exits 1 and names each offence; prints a one-line summary otherwise.
"""
import os
import re
import sys

MAX_LINES = 80
EXEMPT = {("pool/tree.c", "xs_tree_remove")}
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# A function definition starts at column 0 with a name followed by '(' and
# ends at the first '}' in column 0 (the style of every file here).
FUNC_START = re.compile(r"^(?!typedef|struct|enum|union|static const|const|extern|#)[A-Za-z_][^;=]*?\b([A-Za-z_]\w*)\s*\([^;]*$")


def sources(folder, exts):
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for f in sorted(files):
            if f.endswith(exts):
                yield os.path.join(dirpath, f)


def rel(path):
    return os.path.relpath(path, ROOT)


def check_includes():
    pool_headers = {os.path.basename(p) for p in sources("pool", (".h",))}
    bad = []
    for path in sources("vmm", (".c", ".h")):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                name = m.group(1)
                if "pool/" in name or (os.path.basename(name) in pool_headers and
                                       not os.path.exists(os.path.join(os.path.dirname(path), name))):
                    bad.append("%s:%d: vmm/ includes pool/'s header \"%s\"" % (rel(path), n, name))
    return bad


def functions(path):
    """(name, first line, length) of each function definition in path."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, start, name = [], None, None
    for i, line in enumerate(lines):
        if start is None:
            m = FUNC_START.match(line)
            if m and (line.rstrip().endswith("{") or (i + 1 < len(lines) and "{" in "".join(lines[i:i + 4]))):
                start, name = i, m.group(1)
        elif line.startswith("}"):
            out.append((name, start + 1, i - start + 1))
            start = None
        elif FUNC_START.match(line) and not line.startswith((" ", "\t")) and line.rstrip().endswith(";"):
            start = None  # a prototype spread over lines
    return out


def check_lengths():
    bad = []
    for folder in ("vmm", "pool", "benchmarks", "test", "python/native"):
        for path in sources(folder, (".c", ".cc", ".h")):
            for name, line, length in functions(path):
                if length > MAX_LINES and (rel(path), name) not in EXEMPT:
                    bad.append("%s:%d: %s is %d lines (at most %d)" % (rel(path), line, name, length, MAX_LINES))
    return bad


def main():
    bad = check_includes() + check_lengths()
    for b in bad:
        print(b)
    if bad:
        print("check_layers: %d problem(s)" % len(bad))
        return 1
    print("check_layers: vmm/ includes nothing from pool/; no function over %d lines" % MAX_LINES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
