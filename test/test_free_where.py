#!/usr/bin/env python3
"""benchmarks/free_where.py against xseg-bench on the host backend: the
recorded Llama generation (263 MiB) under a filler, from its min budget
down, must fail with an out-of-memory message the script reads, and the
row must add up (what no move can reach is part of what is free, fewer
pages were left than asked); a frag file with no rows must exit 1.

    python3 test/test_free_where.py PATH/TO/xseg-bench
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, summary

BENCH = sys.argv[1] if len(sys.argv) > 1 else "build/benchmarks/xseg-bench"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "free_where.py")
MIB = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

def size(text):
    n, unit = text.split()
    return float(n) * MIB[unit]


env = dict(os.environ)
env.pop("XSEG_ALLOC_CONF", None)
with tempfile.TemporaryDirectory() as tmp:
    frag = os.path.join(tmp, "frag.json")
    p = subprocess.run([BENCH, "--backend", "host", "--only", "xseg", "--filler", "81559", "--json", frag, "frag",
                        "torch_llama_infer"], env=env, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "frag: exit status %d: %s" % (p.returncode, p.stderr[-300:]))
    p = subprocess.run([sys.executable, SCRIPT, BENCH, frag, "--markdown"], env=env, capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0, "free_where.py: exit status %d: %s" % (p.returncode, p.stderr[-300:]))
    rows = [l for l in p.stdout.splitlines() if l.startswith("| torch_llama_infer |")]
    check(len(rows) == 1, "free_where.py: one row for the trace, got:\n" + p.stdout)
    if rows:
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        m = re.match(r"filler (1\.\d{4})$", cells[1])
        check(m is not None and 1.0 <= float(m.group(1)) <= json.load(open(frag))["frag"][0]["xseg"],
              "the failing budget is a factor at most the min budget: " + cells[1])
        try:
            free, shared, pinned = size(cells[2]), size(cells[3]), size(cells[4])
            left, asked = (int(x) for x in cells[5].split(" / "))
            check(shared + pinned <= free, "shared + pinned within the free bytes: " + rows[0])
            check(left < asked, "fewer pages left than asked: " + rows[0])
        except (ValueError, KeyError, IndexError) as e:
            check(False, "a row of figures (%s): %s" % (e, rows[0]))
    empty = os.path.join(tmp, "empty.json")
    with open(empty, "w") as f:
        json.dump({"frag": []}, f)
    p = subprocess.run([sys.executable, SCRIPT, BENCH, empty], env=env, capture_output=True, text=True, timeout=60)
    check(p.returncode == 1 and "holds no frag rows" in p.stderr, "no rows: exit 1 and a reason: " + p.stderr)
sys.exit(summary("test_free_where"))
