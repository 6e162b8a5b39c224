#!/usr/bin/env python3
"""torch_model.py: PyTorch's CUDA caching allocator, in both of its modes,
replaying an xseg trace on the host - what it would hold, how many driver
allocations it would make, and the smallest cap it would replay in.

The two anchors xseg is measured against (docs/benchmarks.md) are PyTorch's
default allocator and its expandable segments
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).  Their figures come
from the GPU; this model gives the same figures on any machine, so that a
change to xseg can be judged against them without a GPU, and so that what
makes one of them hold less than xseg can be found by taking the model
apart.  It follows the policy of c10/cuda/CUDACachingAllocator.cpp (torch
2.x) as its documentation and source describe it; nothing of it is copied.

Both modes (one pool per stream and class: requests of at most 1 MiB are
"small", the rest "large"; sizes rounded up to 512 bytes):
  * a request takes the best fit among its pool's free blocks: the smallest
    free block at least as large, the lowest address among equal sizes,
    and is placed at that block's start; the rest of the block stays free
    when it is large enough (below);
  * a freed block merges with free neighbours of its segment;
  * with no free block that fits, memory is added; under a cap
    (torch.cuda.set_per_process_memory_fraction) the addition is refused
    when what is held plus the allocation size (2 MiB for small requests,
    20 MiB below 10 MiB, else the request rounded to 2 MiB) would pass the
    cap; then every free cached block is given back and the addition is
    tried once more; a second refusal is an out-of-memory error.
Default mode: an addition is one cudaMalloc of the allocation size, a
segment of its own; a block is split when the rest is at least 512 bytes
(small) or more than 1 MiB (large); giving back frees whole segments that
hold nothing.
Expandable segments: each pool has one segment, a reservation mapped in
pages of 2 MiB (small) or 20 MiB (large) on demand; a block is split when
the rest is at least 512 bytes; in the best fit, a free block that borders
unmapped pages counts as big as it could grow (so requests that fit
elsewhere leave the growth frontier alone); an addition maps the pages
that the lowest-address unmapped range needs, fused with the free block
just before it; giving back unmaps every page that lies wholly inside a
free block.

    python3 benchmarks/torch_model.py TRACE... [--mode default|expandable|both]
            [--passes N] [--budget cap|filler [--first-fit] [--keeps-mib M]]
            [--json FILE]

Without --budget: each trace replayed --passes times (default 2) in one
allocator, uncapped; prints the held peak (what torch.cuda.max_memory_reserved
reports), its ratio to the live peak, and the driver allocations (cudaMalloc
calls, or pages mapped).  With --budget: the stable min budget, found as
test/gpu/torch_replay.py finds it on the GPU (bisected to 1 MiB, and the
16 budgets spread over the next 0.5 % of the peak must replay too; with
--first-fit, bisection's answer alone), one replay per try.  "cap" is
PyTorch's own cap; the figure is what was held where that passes the cap
(marked *: the cap is checked against the allocation size and pages are
rounded up).  "filler" is the device's free memory, as a raw allocation
leaves it: the allocator has the budget less what the driver keeps
(--keeps-mib, 4 as measured on an H100 and an H200).  A TRACE is a file
(plain or .gz) or a name in benchmarks/traces.

What the model leaves out: cross-stream frees wait for no event (a block
freed on another stream is reusable at once), and a create the driver
refuses for its own reasons is not modelled.
"""
import argparse
import bisect
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "gpu"))
# The GPU's replay: its trace parser and its min-budget bisection, so both
# sides are read and bisected alike (it imports no torch at module level).
import torch_replay  # noqa: E402

MIB = 1 << 20
SMALL_SIZE = 1 * MIB          # largest "small" request
SMALL_BUFFER = 2 * MIB        # small allocation size, small page
LARGE_BUFFER = 20 * MIB       # allocation size of 1-10 MiB requests, large page
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB
MIN_BLOCK = 512


class OutOfMemory(Exception):
    pass


def load(path):
    """The trace's events, (op, id, bytes, stream) with op 0 an allocation
    and 1 a free, and its peak live bytes (torch_replay.parse_trace: a
    malformed line is a SystemExit naming it)."""
    return torch_replay.parse_trace(path)


def round_size(n):
    return MIN_BLOCK if n < MIN_BLOCK else -(-n // MIN_BLOCK) * MIN_BLOCK


def allocation_size(n):
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-n // ROUND_LARGE) * ROUND_LARGE


class Block:
    __slots__ = ("addr", "size", "used", "mapped", "prev", "next")

    def __init__(self, addr, size, used=False, mapped=True):
        self.addr, self.size, self.used, self.mapped = addr, size, used, mapped
        self.prev = self.next = None


class Pool:
    """The blocks of one (stream, class): free mapped blocks ordered by
    (size, address), unmapped ones by address (expandable only)."""

    def __init__(self, small, base):
        self.small = small
        self.base = base        # where this pool's addresses start
        self.free = []          # (size, addr) of free mapped blocks
        self.by_addr = {}       # addr -> Block, free mapped blocks
        self.unmapped = []      # addresses of unmapped blocks
        self.unmapped_at = {}   # addr -> Block

    def add_free(self, b):
        bisect.insort(self.free, (b.size, b.addr))
        self.by_addr[b.addr] = b

    def drop_free(self, b):
        i = bisect.bisect_left(self.free, (b.size, b.addr))
        assert self.free[i] == (b.size, b.addr)
        del self.free[i]
        del self.by_addr[b.addr]

    def add_unmapped(self, b):
        bisect.insort(self.unmapped, b.addr)
        self.unmapped_at[b.addr] = b

    def drop_unmapped(self, b):
        i = bisect.bisect_left(self.unmapped, b.addr)
        assert self.unmapped[i] == b.addr
        del self.unmapped[i]
        del self.unmapped_at[b.addr]


def link(a, b):
    if a:
        a.next = b
    if b:
        b.prev = a


class Allocator:
    """One device's allocator in either mode; held is what it holds."""

    SEGMENT_SPAN = LARGE_BUFFER << 20  # address space between pools or segments (whole pages)

    def __init__(self, expandable, cap=None, filler=False):
        self.expandable = expandable
        self.cap = cap          # bytes, or None: uncapped
        self.filler = filler    # the cap is the device's free memory, not PyTorch's fraction
        self.pools = {}
        self.next_base = self.SEGMENT_SPAN
        self.held = 0
        self.held_peak = 0
        self.driver_allocs = 0  # cudaMalloc calls, or pages mapped

    def pool(self, stream, small):
        key = (stream, small)
        p = self.pools.get(key)
        if p is None:
            p = self.pools[key] = Pool(small, self.next_base)
            self.next_base += self.SEGMENT_SPAN
            if self.expandable:
                p.add_unmapped(Block(p.base, self.SEGMENT_SPAN, mapped=False))
        return p

    def page(self, p):
        return SMALL_BUFFER if p.small else LARGE_BUFFER

    # ---- best fit ------------------------------------------------------------------

    def grow_room(self, b):
        n = b.next
        return b.size + (n.size if n is not None and not n.mapped and not n.used else 0)

    def best_fit(self, p, size):
        i = bisect.bisect_left(p.free, (size, -1))
        if i == len(p.free):
            return None
        if self.expandable:
            # A block that borders unmapped pages counts as big as it could
            # grow: walk up while the next one up would be smaller so.
            while i + 1 < len(p.free):
                here = self.grow_room(p.by_addr[p.free[i][1]])
                there = self.grow_room(p.by_addr[p.free[i + 1][1]])
                if there >= here:
                    break
                i += 1
        b = p.by_addr[p.free[i][1]]
        p.drop_free(b)
        return b

    def split(self, p, b, size):
        rest = b.size - size
        if rest >= MIN_BLOCK if (p.small or self.expandable) else rest > SMALL_SIZE:
            r = Block(b.addr + size, rest)
            link(r, b.next)
            link(b, r)
            b.size = size
            p.add_free(r)

    # ---- adding memory ---------------------------------------------------------------

    def may_add(self, p, n):
        """May memory be added for a request of n bytes?  Under PyTorch's cap
        the check is its own: what is held plus the allocation size.  Under
        a filler the driver refuses what it does not have: the allocation
        size (cudaMalloc), or the pages the addition would map."""
        if self.cap is None:
            return True
        if not self.filler or not self.expandable:
            return self.held + allocation_size(n) <= self.cap
        return self.held + self.pages_needed(p, n) <= self.cap

    def expansion(self, p, size):
        """Where an addition of size bytes starts (find_expandable_block)."""
        for a in p.unmapped:
            c = p.unmapped_at[a]
            if c.prev is not None and not c.prev.used and c.prev.mapped:
                c = c.prev
            run, x = 0, c
            while run < size and x is not None and not x.used:
                run += x.size
                x = x.next
            if run >= size:
                return c
        raise AssertionError("a pool's reservation ran out")

    def pages_needed(self, p, size):
        pg, covered, need = self.page(p), 0, 0
        x = self.expansion(p, size)
        while covered < size:
            if x.mapped:
                covered += x.size
            else:
                n = -(-min(size - covered, x.size) // pg) * pg
                need += n
                covered += n
            x = x.next
        return need

    def add_default(self, p, size):
        n = allocation_size(size)
        b = Block(self.next_base, n)
        self.next_base += self.SEGMENT_SPAN
        self.held += n
        self.driver_allocs += 1
        return b

    def map_range(self, p, u, n):
        """Map the first n bytes (rounded up to pages) of unmapped block u;
        the mapped part joins a free mapped block before it, if any."""
        pg = self.page(p)
        n = -(-n // pg) * pg
        assert u.addr % pg == 0 and n <= u.size
        p.drop_unmapped(u)
        if n < u.size:
            rest = Block(u.addr + n, u.size - n, mapped=False)
            link(rest, u.next)
            link(u, rest)
            u.size = n
            p.add_unmapped(rest)
        u.mapped = True
        self.held += n
        self.driver_allocs += n // pg
        prev, nxt = u.prev, u.next
        if prev is not None and prev.mapped and not prev.used:
            if p.by_addr.get(prev.addr) is prev:  # not the candidate being built
                p.drop_free(prev)
            prev.size += u.size
            link(prev, u.next)
            u = prev
        if nxt is not None and nxt.mapped and not nxt.used:
            p.drop_free(nxt)
            u.size += nxt.size
            link(u, nxt.next)
        return u

    def add_expandable(self, p, size):
        # The lowest-address unmapped block, with a free block before it,
        # whose free run holds the request.
        c = self.expansion(p, size)
        if not c.mapped:
            c = self.map_range(p, c, min(c.size, size))
        while c.size < size:
            c = self.map_range(p, c.next, min(size - c.size, c.next.size))
        if p.by_addr.get(c.addr) is c:
            p.drop_free(c)
        return c

    # ---- giving memory back ------------------------------------------------------------

    def give_back(self):
        for p in self.pools.values():
            if self.expandable:
                self.unmap_free(p)
            else:
                for size, a in list(p.free):
                    b = p.by_addr[a]
                    if b.prev is None and b.next is None:
                        p.drop_free(b)
                        self.held -= b.size

    def unmap_free(self, p):
        pg = self.page(p)
        for size, a in list(p.free):
            b = p.by_addr[a]
            lo = -(-b.addr // pg) * pg
            hi = (b.addr + b.size) // pg * pg
            if hi <= lo:
                continue
            p.drop_free(b)
            parts = []
            if lo > b.addr:
                parts.append(Block(b.addr, lo - b.addr))
            u = Block(lo, hi - lo, mapped=False)
            parts.append(u)
            if b.addr + b.size > hi:
                parts.append(Block(hi, b.addr + b.size - hi))
            before, after = b.prev, b.next
            for x in parts:
                link(before, x)
                before = x
            link(before, after)
            self.held -= hi - lo
            for x in parts:
                if x.mapped:
                    p.add_free(x)
            # join unmapped neighbours
            if u.prev is not None and not u.prev.mapped and not u.prev.used:
                v = u.prev
                p.drop_unmapped(v)
                v.size += u.size
                link(v, u.next)
                u = v
            if u.next is not None and not u.next.mapped and not u.next.used:
                v = u.next
                p.drop_unmapped(v)
                u.size += v.size
                link(u, v.next)
            p.add_unmapped(u)

    # ---- the entry points ------------------------------------------------------------------

    def malloc(self, n, stream):
        size = round_size(n)
        p = self.pool(stream, size <= SMALL_SIZE)
        b = self.best_fit(p, size)
        if b is None:
            if not self.may_add(p, size):
                self.give_back()
                if not self.may_add(p, size):
                    raise OutOfMemory(size)
            b = self.add_expandable(p, size) if self.expandable else self.add_default(p, size)
            self.held_peak = max(self.held_peak, self.held)
        self.split(p, b, size)
        b.used = True
        return (p, b)

    def free(self, handle):
        p, b = handle
        b.used = False
        for nb in (b.next, b.prev):
            if nb is None or nb.used or nb.mapped != b.mapped:
                continue
            p.drop_free(nb)
            if nb is b.next:
                b.size += nb.size
                link(b, nb.next)
            else:
                nb.size += b.size
                link(nb, b.next)
                b = nb
        p.add_free(b)


def replay(events, expandable, passes=1, cap=None, filler=False):
    """Replay events `passes` times; returns (held peak, live peak,
    driver allocations), or raises OutOfMemory."""
    a = Allocator(expandable, cap, filler)
    live, nlive, live_peak = {}, 0, 0
    for _ in range(passes):
        for op, i, n, stream in events:
            if op == 0:
                live[i] = (a.malloc(n, stream), n)
                nlive += n
                live_peak = max(live_peak, nlive)
            elif i in live:
                h, n = live.pop(i)
                a.free(h)
                nlive -= n
        for i in list(live):
            h, n = live.pop(i)
            a.free(h)
            nlive -= n
    return a.held_peak, live_peak, a.driver_allocs


class ModelReplayer(torch_replay.Replayer):
    """torch_replay's Replayer with the model in place of PyTorch: its
    min_budget bisects the model as it bisects the GPU."""

    def __init__(self, expandable, filler=False, keeps=0):
        self.expandable, self.filler, self.keeps, self.held = expandable, filler, keeps, 0

    def replay(self, events, budget):
        try:
            self.held = replay(events, self.expandable, 1, budget - self.keeps, self.filler)[0]
            return True
        except OutOfMemory:
            return False

    def peak_reserved(self):
        return self.held


def min_budget(events, expandable, peak, filler=False, keeps=0, stable=True):
    """The min budget found as test/gpu/torch_replay.py finds it (stable:
    16 budgets over the next 0.5 % of the peak must replay too; else
    bisection's first fit), to 1 MiB; under a filler the allocator has the
    budget less `keeps`.  Returns (budget, held peak at it), or (None, None)
    past 4x the peak."""
    budget, _, held = ModelReplayer(expandable, filler, keeps).min_budget(events, peak, stable=stable)
    return budget, held


def trace_path(name):
    if os.path.exists(name):
        return name
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces", name + ".trace")
    if os.path.exists(here):
        return here
    sys.exit("torch_model.py: no trace '%s' (a file, or a name in benchmarks/traces)" % name)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--mode", choices=("default", "expandable", "both"), default="both")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--budget", choices=("cap", "filler"))
    ap.add_argument("--first-fit", action="store_true",
                    help="--budget: the smallest budget bisection finds, without the stability check")
    ap.add_argument("--keeps-mib", type=int, default=4,
                    help="--budget filler: MiB of the budget the driver keeps (default 4, as measured on an H100/H200)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error("--passes must be at least 1")
    modes = ("default", "expandable") if args.mode == "both" else (args.mode,)
    rows = []
    for name in args.traces:
        path = trace_path(name)
        try:
            events, _ = load(path)
        except OSError as e:
            sys.exit("torch_model.py: %s: %s" % (path, e))
        trace = os.path.basename(path).split(".")[0]
        for mode in modes:
            held, peak, calls = replay(events, mode == "expandable", args.passes)
            row = {"trace": trace, "mode": mode, "peak_live": peak, "held_peak": held, "driver_allocs": calls}
            line = "%-22s %-10s held %8.0f MiB  %.4f of the live peak  %6d %s" % (
                trace, mode, held / MIB, held / peak if peak else 0, calls,
                "pages mapped" if mode == "expandable" else "cudaMallocs")
            if args.budget:
                filler = args.budget == "filler"
                b, held_at = min_budget(events, mode == "expandable", peak, filler,
                                        args.keeps_mib * MIB if filler else 0, stable=not args.first_fit)
                if b is None:
                    line += "  | min %s: none up to 4x the peak" % args.budget
                else:
                    # Under a cap PyTorch may hold a little more than the
                    # cap; the figure is then what it held (as on the GPU).
                    fig = max(b, held_at) if not filler else b
                    row.update(budget=args.budget, min_budget=b, held_at_min=held_at, factor=fig / peak)
                    line += "  | min %s %.0f MiB, held %.0f MiB: %.4f%s" % (
                        args.budget, b / MIB, held_at / MIB, fig / peak, " *" if fig > b else "")
            print(line, flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": "torch_model.py", "passes": args.passes, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
