#!/usr/bin/env python3
"""ideal_pages.py: the memory a trace needs from an allocator whose page
moves cost nothing, to tell what page granularity itself costs a trace
from what xseg's page moves cost it (docs/benchmarks.md, "What pages
alone cost").

Model: each pool (one per stream and class, blocks of at most --small-mib
in the small class, as PyTorch and xseg keep them) has an address space of
its own with no end.  A block stays where it is placed until it is freed.
A page is held while a live block touches it, and only then: a wholly
free page is given back at once and costs nothing to map again anywhere,
so free address space is never short and the memory needed at a moment
is the number of pages live blocks touch.  Sizes are rounded up to 512
bytes; the peak is of the sizes asked for, as xseg-bench frag counts it.  Each request is placed, among every free range of its pool that
can hold it (between two live blocks, before the first, after the last),
at the range's start, at its first page boundary, or against its end:
where it touches the fewest pages that no live block touches yet; among
those, where it shares the fewest pages with live blocks (a shared page
stays held until both blocks are freed), then in the smallest range.
That is greedy, knows each size only when it is asked for and no
lifetime, like every online allocator; it is not a lower bound for every
placement (one that knew when blocks will be freed could need less).

Prints, per trace, the peak live bytes, the most pages held at once in
that model, that as a factor of the peak ("the ideal"), and the same with
every block started on a page boundary (no page shared: "aligned").

    python3 benchmarks/ideal_pages.py [TRACE...] [--page-mib 2] [--small-mib 1]

TRACE: a file, or a name in benchmarks/traces (default: every trace
there).  Exit status 0; 2 if a trace cannot be read.
"""
import argparse
import bisect
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "gpu"))
import torch_replay  # noqa: E402  (parse_trace: the trace reader torch_model.py uses too)

MIB = 1 << 20


class Pool:
    """Live blocks of one pool, by address, and the pages they touch."""

    def __init__(self, page, aligned):
        self.page, self.aligned = page, aligned
        self.starts, self.ends = [], []  # sorted by start; blocks never overlap
        self.touch = {}  # page index -> live blocks touching it

    def _touched(self, p):
        return self.touch.get(p, 0) > 0

    def _cost(self, x, s):
        """(pages new, pages shared) if [x, x+s) were placed."""
        p0, p1 = x // self.page, (x + s - 1) // self.page
        shared = self._touched(p0) + (p1 != p0 and self._touched(p1))
        return p1 - p0 + 1 - shared, shared

    def place(self, s):
        page, best = self.page, None
        n = len(self.starts)
        for i in range(n + 1):
            g0 = self.ends[i - 1] if i else 0
            g1 = self.starts[i] if i < n else None
            if g1 is not None and g1 - g0 < s:
                continue
            a0 = -(-g0 // page) * page
            spots = [a0] if self.aligned else [g0, a0]
            if g1 is not None and not self.aligned:
                spots.append(g1 - s)
            size = g1 - g0 if g1 is not None else float("inf")
            for x in spots:
                if x < g0 or (g1 is not None and x + s > g1):
                    continue
                new, shared = self._cost(x, s)
                key = (new, shared, size, x)
                if best is None or key < best:
                    best = key
        x = best[3]
        j = bisect.bisect_left(self.starts, x)
        self.starts.insert(j, x)
        self.ends.insert(j, x + s)
        for p in range(x // page, (x + s - 1) // page + 1):
            self.touch[p] = self.touch.get(p, 0) + 1
        return x, best[0]

    def free(self, x):
        j = bisect.bisect_left(self.starts, x)
        e = self.ends[j]
        del self.starts[j], self.ends[j]
        gone = 0
        for p in range(x // self.page, (e - 1) // self.page + 1):
            c = self.touch[p] - 1
            if c:
                self.touch[p] = c
            else:
                del self.touch[p]
                gone += 1
        return gone


def replay(path, page, small, aligned):
    """(peak live bytes, most pages held at once) of one trace; a malformed
    trace is a SystemExit naming its line (torch_replay.parse_trace)."""
    events, peak = torch_replay.parse_trace(path)
    pools, where = {}, {}
    held = most = 0
    for op, bid, size, stream in events:
        if op == 0:
            s = -(-size // 512) * 512
            key = (stream, s <= small)
            pool = pools.get(key)
            if pool is None:
                pool = pools[key] = Pool(page, aligned)
            x, new = pool.place(s)
            where[bid] = (pool, x)
            held += new
            most = max(most, held)
        else:
            pool, x = where.pop(bid)
            held -= pool.free(x)
    return peak, most


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--page-mib", type=int, default=2)
    ap.add_argument("--small-mib", type=int, default=1)
    a = ap.parse_args()
    if a.page_mib < 1 or a.small_mib < 0:
        ap.error("--page-mib must be at least 1 and --small-mib at least 0")
    names = a.traces or sorted(glob.glob(os.path.join(here, "traces", "*.trace")))
    page, small = a.page_mib * MIB, a.small_mib * MIB
    print("%-24s %10s %12s %8s %8s" % ("trace", "peak MiB", "ideal pages", "ideal", "aligned"))
    for name in names:
        path = name if os.path.exists(name) else os.path.join(here, "traces", name + ".trace")
        try:
            peak, most = replay(path, page, small, False)
            _, most_aligned = replay(path, page, small, True)
        except OSError as e:
            print("ideal_pages.py: %s: %s" % (name, e), file=sys.stderr)
            return 2
        except SystemExit as e:
            print("ideal_pages.py: %s" % e, file=sys.stderr)
            return 2
        trace = os.path.basename(path).rsplit(".", 1)[0]
        print("%-24s %10.1f %12d %8.4f %8.4f" % (trace, peak / MIB, most, most * page / peak,
                                                 most_aligned * page / peak))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
