#!/usr/bin/env python3
"""placement_bound.py: how much memory page granularity strands when blocks
are freed at random, for the large blocks of one round of a trace.

Model (docs/benchmarks.md, "Fragmentation"): every block is freed
independently with probability 1/2.  A page touched by n blocks then strands
page * (1 - 2^-n) minus half the data on it, in expectation; the data term
does not depend on placement.  Blocks are packed in arrival order, each
either sharing the page its predecessor ends in or starting at the next page
boundary.  Prints the expected stranded pages per block for:

  pack    always share
  align   always start at a page boundary
  rule    xseg's rule: share only when that saves a page
  best    the best sequence of choices (dynamic programming over the round,
          so it knows every later size)

    python3 benchmarks/placement_bound.py [TRACE] [--page-mib 2] [--min-mib 1]

TRACE defaults to benchmarks/traces/grow_then_split.trace; the round is the
allocations between the first 17 (the growing buffer of that trace's first
phase) and the first burst of frees.  Blocks of at most --min-mib go to the
small pool and are left out.
"""
import argparse
import os

MIB = 1 << 20


def first_round_sizes(path, skip=17):
    sizes, nalloc = [], 0
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            tok = line.split()
            if tok[0] == "a":
                nalloc += 1
                if nalloc > skip:
                    sizes.append(int(tok[2]))
            elif tok[0] == "f" and nalloc > skip and len(sizes) > 100:
                break
    return sizes


def round512(s):
    return (s + 511) // 512 * 512


def layout_cost(layout, page):
    """Sum over touched pages of 1 - 2^-n."""
    n = {}
    for start, size in layout:
        for p in range(start // page, (start + size - 1) // page + 1):
            n[p] = n.get(p, 0) + 1
    return sum(1 - 2.0 ** -k for k in n.values())


def place(sizes, page, choose):
    x, out = 0, []
    for s in sizes:
        if x % page and not choose(x, s, page):
            x = (x + page - 1) // page * page
        out.append((x, s))
        x += s
    return out


def share_saves_page(x, s, page):
    new_if_shared = (x + s - 1) // page - x // page
    new_if_aligned = (s + page - 1) // page
    return new_if_shared < new_if_aligned


def best_cost(sizes, page, q=64):
    """DP over (offset of the end within its page in 1/q pages, blocks on
    that page); offsets are rounded up, which can only overstate the cost."""
    cur = {(0, 0): 0.0}
    for s in sizes:
        nxt = {}
        for (off, nb), c in cur.items():
            for share in ((True, False) if off else (False,)):
                start = off * page // q if share else 0
                end = start + s
                pages = (end - 1) // page + 1
                if share:
                    c2 = c + (2.0 ** -nb - 2.0 ** -(nb + 1)) + (pages - 1) * 0.5
                else:
                    c2 = c + pages * 0.5
                eoff = -(-(end % page) * q // page) if end % page else 0
                if eoff == q:
                    eoff = 0
                enb = 0 if not eoff else (nb + 1 if (share and pages == 1) else 1)
                key = (eoff, min(enb, 3))
                if c2 < nxt.get(key, float("inf")):
                    nxt[key] = c2
        cur = nxt
    return min(cur.values())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", default=os.path.join(here, "traces", "grow_then_split.trace"))
    ap.add_argument("--page-mib", type=int, default=2)
    ap.add_argument("--min-mib", type=int, default=1)
    a = ap.parse_args()
    page = a.page_mib * MIB
    sizes = [round512(s) for s in first_round_sizes(a.trace) if s > a.min_mib * MIB]
    if not sizes:
        raise SystemExit("placement_bound.py: no large blocks in the first round of %s" % a.trace)
    half_data = sum(sizes) / page / 2
    print("%s: %d large blocks in the first round, page %d MiB" % (os.path.basename(a.trace), len(sizes), a.page_mib))
    print("expected stranded pages per block (frees independent, p = 1/2):")
    for name, choose in (("pack", lambda x, s, p: True), ("align", lambda x, s, p: False),
                         ("rule", share_saves_page)):
        c = layout_cost(place(sizes, page, choose), page)
        print("  %-6s %.3f" % (name, (c - half_data) / len(sizes)))
    print("  %-6s %.3f" % ("best", (best_cost(sizes, page) - half_data) / len(sizes)))


if __name__ == "__main__":
    main()
