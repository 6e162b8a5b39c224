#!/usr/bin/env python3
"""cold_summary.py: first passes from empty, many of them, under two allocators.

    python3 benchmarks/cold_summary.py [--base native] [--new xseg] [--fast F] [--warm] FILE...

Each FILE is the JSON of one `test/gpu/torch_passes.py --repeat N` process,
named ...-R.json where R is its round: in each round one process ran under
each allocator, one after the other (test/gpu/run.sh cold).  Per trace this
prints, for the first passes from empty (us_per_event_1):

  n        first passes of each allocator;
  median   microseconds per event of each allocator, over all its passes;
  pooled   the new allocator's median over the base's;
  paired   the median over rounds of (the new's median in that round over
           the base's in the same round): a round's two processes ran
           seconds apart, so a slow phase of a shared machine falls on both;
  cpu      as pooled, each pass divided first by the CPU reference timed
           around it (cpu_ref_us_1), which follows the machine's speed;
  fast     as pooled, over the passes of the machine's fast phases only:
           those whose CPU reference is within FAST (1.2) times the least
           of all passes in the files (a leased machine runs in phases of
           seconds, one about 1.8 times slower than the other; a pass that
           straddles two is left out); with how many passes of each;
  calls    the new allocator's driver calls from empty (least-most over its
           passes): under xseg each pass after the process's first follows a
           new start and should make the first's calls, so a spread here
           means a repeat was not from empty.

--warm reads the second passes instead (us_per_event_2, cpu_ref_us_2,
driver_2), each run with the cache its first pass left.

Exit status 2 names the file and what is wrong when an input is unreadable,
names no round, or lacks a field; 1 when the two allocators share no trace.
"""
import argparse
import json
import re
import statistics
import sys

CALLS = ("num_device_alloc", "num_device_free", "num_map", "num_unmap", "num_set_access")


def fail(msg):
    print("cold_summary.py: " + msg, file=sys.stderr)
    sys.exit(2)


def load(paths, which=1):
    """{allocator: {trace: {round: [row, ...]}}} from the files, each row
    checked for the fields of pass `which` (1 from empty, 2 warm)."""
    out = {}
    for path in paths:
        m = re.search(r"-(\d+)\.json$", path)
        if not m:
            fail("%s: the name gives no round (expected ...-R.json)" % path)
        rnd = int(m.group(1))
        try:
            with open(path) as f:
                rows = json.load(f)
        except (OSError, ValueError) as e:
            fail("%s: %s" % (path, e))
        if not isinstance(rows, list):
            fail("%s: expected a list of rows" % path)
        for i, r in enumerate(rows):
            ref = "cpu_ref_us_%d" % which
            for k in ("allocator", "trace", "us_per_event_%d" % which, ref):
                if not isinstance(r, dict) or k not in r:
                    fail("%s: row %d has no %s" % (path, i, k))
            if r[ref] <= 0:
                fail("%s: row %d: %s is %r" % (path, i, ref, r[ref]))
            out.setdefault(r["allocator"], {}).setdefault(r["trace"], {}).setdefault(rnd, []).append(r)
    return out


def calls(r, which=1):
    d = r.get("driver_%d" % which)
    return sum(d.get(k, 0) for k in CALLS) if d else None


def summarize(data, base, new, fast=1.2, which=1):
    """One dict per trace that both allocators replayed, in name order."""
    if base not in data or new not in data:
        return []
    ref, use = "cpu_ref_us_%d" % which, "us_per_event_%d" % which
    least = min(r[ref] for t in data.values() for rounds in t.values() for rows in rounds.values()
                for r in rows)

    def med(rows, f):
        return statistics.median(f(r) for r in rows)

    def us(r):
        return r[use]

    def rel(r):
        return r[use] / r[ref]

    out = []
    for trace in sorted(set(data[base]) & set(data[new])):
        b, n = data[base][trace], data[new][trace]
        bs = [r for rows in b.values() for r in rows]
        ns = [r for rows in n.values() for r in rows]
        paired = [med(n[k], us) / med(b[k], us) for k in sorted(set(b) & set(n))]
        c = [x for x in (calls(r, which) for r in ns) if x is not None]
        bf = [r for r in bs if r[ref] <= least * fast]
        nf = [r for r in ns if r[ref] <= least * fast]
        out.append({
            "trace": trace, "n_base": len(bs), "n_new": len(ns),
            "base_us": med(bs, us), "new_us": med(ns, us),
            "pooled": med(ns, us) / med(bs, us),
            "paired": statistics.median(paired) if paired else None, "rounds": len(paired),
            "cpu": med(ns, rel) / med(bs, rel),
            "calls": (min(c), max(c)) if c else None,
            "fast": med(nf, us) / med(bf, us) if bf and nf else None, "n_fast": (len(bf), len(nf)),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="native", help="the allocator the ratios divide by (default native)")
    ap.add_argument("--new", default="xseg", help="the allocator measured against it (default xseg)")
    ap.add_argument("--fast", type=float, default=1.2,
                    help="a pass is of a fast phase when its CPU reference is within this factor of the least")
    ap.add_argument("--warm", action="store_true", help="the second, warm passes instead of the first")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    which = 2 if a.warm else 1
    if a.fast < 1:
        ap.error("--fast must be at least 1, not %g" % a.fast)
    rows = summarize(load(a.files, which), a.base, a.new, a.fast, which)
    if not rows:
        print("cold_summary.py: no trace was replayed under both %s and %s" % (a.base, a.new), file=sys.stderr)
        return 1
    print("%-22s %7s %9s %9s | %6s %6s %6s %6s %7s | %s" % (
        "trace", "n", a.base + " us", a.new + " us", "pooled", "paired", "cpu", "fast", "n fast",
        a.new + (" calls warm" if a.warm else " calls from empty")))
    for r in rows:
        paired = "%5.2fx" % r["paired"] if r["paired"] is not None else "     -"
        fast = "%5.2fx" % r["fast"] if r["fast"] is not None else "     -"
        calls_s = "%d-%d" % r["calls"] if r["calls"] else "-"
        print("%-22s %3d/%-3d %9.3f %9.3f | %5.2fx %s %5.2fx %s %3d/%-3d | %s (%d rounds)" % (
            r["trace"], r["n_base"], r["n_new"], r["base_us"], r["new_us"], r["pooled"], paired, r["cpu"], fast,
            r["n_fast"][0], r["n_fast"][1], calls_s, r["rounds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
