#!/usr/bin/env python3
"""torch_replay.py: min-budget overhead of allocation traces replayed through
PyTorch, with PyTorch's own allocators or with xseg as a pluggable allocator.

Each `a` event of a trace (benchmarks/traces/README.md) becomes
torch.empty(bytes, dtype=torch.uint8, device="cuda") on the event's stream
(stream 0 is the current stream, every other number a torch.cuda.Stream of
its own) and each `f` drops that tensor.  A replay runs under a budget: the
allocator may hold at most that many bytes of device memory, set through its
own cap, so the figure counts the memory the allocator holds and not what the
driver keeps beside it:

  native      PyTorch's caching allocator     torch.cuda.set_per_process_memory_fraction
  expandable  the same, expandable_segments   torch.cuda.set_per_process_memory_fraction
  xseg        xseg_torch_alloc / _free        the same call, which reaches
                                              xseg_set_memory_fraction through
                                              the hook xseg.torch.enable() sets
                                              (or that function directly, in a
                                              PyTorch without the hook setter)

The smallest budget (to 1 MiB) in which the whole trace replays, and in 16
budgets spread over the next 0.5 % of the peak too (a replay can fit in one
budget by luck and fail in those just above it), divided by the trace's peak
live bytes, is its min-budget overhead.  A replay fails when
an allocation raises (PyTorch's OutOfMemoryError) or returns no memory.  The
trace is then replayed once more in that budget and the peak memory the
allocator held is read back (PyTorch: max_memory_reserved; xseg: held_bytes,
mapped and cached handles); where it is above the budget the cap was not kept
to the byte, and the overhead is computed from what was held (marked).

With --budget filler the budget is set as a user meets it instead: no
allocator cap, and a raw driver allocation (cuMemAlloc, outside every
allocator) holds all of the device's free memory but the budget for the
replay's length, as xseg-bench frag does on the GPU.  The figure is then the
budget: what the allocator needed besides what the driver and the process
keep anyway.

The allocator is chosen once per process (PyTorch cannot swap it after CUDA
is initialised), so one run measures one allocator:

    python3 test/gpu/torch_replay.py --allocator xseg [--budget cap|filler] --json out.json T1.trace T2.trace

With --at SPEC nothing is bisected: each trace is replayed --repeat times
(3) under one budget, a factor of its peak, and the seconds each replay
took are printed, whole (setting the budget, a filler's allocation and its
release included) and for its events alone (from the first to the end of
the last one's stream work), and under xseg its driver calls of each kind
(count and time) in the events, apart from the teardown's (the budget goal
of docs/benchmarks.md: xseg at 1.02 against PyTorch's expandable segments
at the smallest budget they survive).
SPEC is a factor for every trace, or NAME:FACTOR pairs separated by commas,
with *:FACTOR for the traces not named.
"""
import argparse
import gzip
import json
import os
import sys
import time

MIB = 1 << 20
STABLE_TRIES = 16  # benchmarks/frag.c, FRAG_STABLE_TRIES
STABLE_DIV = 200   # FRAG_STABLE_DIV


def parse_trace(path):
    """Events as (op, id, size, stream) tuples and the peak live bytes
    (a file, or a gzip-compressed one ending in .gz)."""
    events, live, cur, peak = [], {}, 0, 0
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for lineno, line in enumerate(f, 1):
            tok = line.split()
            if not tok or tok[0].startswith("#"):
                continue
            try:
                if tok[0] == "a":
                    ident, size = int(tok[1]), int(tok[2])
                    stream = int(tok[3]) if len(tok) > 3 else 0
                    if size <= 0 or ident in live:
                        raise ValueError("bad size or id live twice")
                    live[ident] = size
                    cur += size
                    peak = max(peak, cur)
                    events.append((0, ident, size, stream))
                elif tok[0] == "f":
                    ident = int(tok[1])
                    stream = int(tok[2]) if len(tok) > 2 else 0
                    cur -= live.pop(ident)
                    events.append((1, ident, 0, stream))
                else:
                    raise ValueError("unknown event %r" % tok[0])
            except (ValueError, IndexError, KeyError) as e:
                raise SystemExit("torch_replay.py: %s:%d: malformed event (%s): %s"
                                 % (path, lineno, e, line.strip()))
    return events, peak


class Filler:
    """A raw driver allocation (cuMemAlloc through libcuda, on the context
    PyTorch made current) that leaves a given number of bytes free."""

    def __init__(self):
        import ctypes
        self.ct = ctypes
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.ptr = ctypes.c_uint64(0)

    def leave(self, torch, nbytes):
        free = torch.cuda.mem_get_info(0)[0]
        if free <= nbytes:
            return
        r = self.cu.cuMemAlloc_v2(self.ct.byref(self.ptr), self.ct.c_size_t(free - nbytes))
        if r != 0:
            raise SystemExit("torch_replay.py: cuMemAlloc of a %d MiB filler failed (CUresult %d)"
                             % ((free - nbytes) // MIB, r))

    def release(self):
        if self.ptr.value:
            self.cu.cuMemFree_v2(self.ptr)
            self.ptr.value = 0


class Replayer:
    def __init__(self, allocator, budget="cap"):
        self.allocator = allocator
        self.filler = None
        # Selected as a user would, before torch is imported: xseg by
        # XSEG_ALLOC_CONF alone (the package's autoload), PyTorch's own
        # allocators by PYTORCH_CUDA_ALLOC_CONF.
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if allocator == "expandable":
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if allocator == "xseg":
            os.environ.setdefault("XSEG_ALLOC_CONF", "")
        else:
            os.environ.pop("XSEG_ALLOC_CONF", None)
        import torch
        self.torch = torch
        torch.cuda.init()
        if torch.cuda.get_allocator_backend() != ("xseg" if allocator == "xseg" else "native"):
            raise SystemExit("torch_replay.py: asked for %s, torch runs %s"
                             % (allocator, torch.cuda.get_allocator_backend()))
        self.xs = None
        if allocator == "xseg":
            import xseg.torch
            self.xs = xseg.torch
        self.total = torch.cuda.mem_get_info(0)[1]
        self.streams = {0: torch.cuda.current_stream()}
        if budget == "filler":
            self.filler = Filler()

    def stream(self, n):
        s = self.streams.get(n)
        if s is None:
            s = self.streams[n] = self.torch.cuda.Stream()
        return s

    def set_budget(self, nbytes):
        if self.filler is not None:
            self.filler.leave(self.torch, nbytes)
            return
        self.torch.cuda.set_per_process_memory_fraction(min(1.0, (nbytes + 0.5) / self.total), 0)

    def empty(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def reset_peak(self):
        self.torch.cuda.reset_peak_memory_stats(0)

    def peak_reserved(self):
        if self.xs is not None:  # all physical handles held, mapped or cached
            return self.xs.xseg_stats(0)["held_bytes"]["peak"]
        return self.torch.cuda.max_memory_reserved(0)

    def replay(self, events, budget):
        """True if every allocation succeeded under `budget` bytes.  Sets
        self.events_s: the seconds from the first event to the end of the
        last one's stream work (what --at reports beside the whole replay,
        which also sets the budget and frees and empties afterwards)."""
        torch = self.torch
        self.empty()
        self.set_budget(budget)
        self.reset_peak()
        live = {}
        ok = True
        empty = torch.empty
        u8 = torch.uint8
        t0 = time.perf_counter()
        self.events_s = None
        self.events_driver = None
        try:
            for op, ident, size, sn in events:
                if op:
                    del live[ident]
                    continue
                # No local name may hold a tensor: it would outlive its
                # free event and so raise the trace's peak.
                try:
                    if sn:
                        with torch.cuda.stream(self.stream(sn)):
                            live[ident] = empty(size, dtype=u8, device="cuda")
                    else:
                        live[ident] = empty(size, dtype=u8, device="cuda")
                except (torch.cuda.OutOfMemoryError, RuntimeError):
                    ok = False
                    break
            torch.cuda.synchronize()
            self.events_s = time.perf_counter() - t0
            self.events_driver = driver_counts(self)  # before the teardown's unmaps and releases
        finally:
            live.clear()
            self.empty()
            if self.filler is not None:
                self.filler.release()
        return ok

    def min_budget(self, events, peak, step=MIB, stable=True):
        """Smallest budget (a multiple of `step`) that replays: (budget, trials,
        peak bytes the allocator held in a replay under that budget).  With
        stable false, bisection's first fit (no check of the budgets above)."""
        trials = 0
        lo = (peak // step) * step            # below the peak nothing can succeed
        hi = None
        factor = 1.02
        while hi is None:
            b = -(-int(peak * factor) // step) * step
            trials += 1
            if self.replay(events, b):
                hi = b
            elif factor >= 4:
                return None, trials, None   # not even in 4x the peak
            else:
                lo = b
                factor = min(4.0, 1 + (factor - 1) * 2)
        while hi - lo > step:
            mid = (lo + hi) // 2 // step * step
            if mid <= lo:
                break
            trials += 1
            if self.replay(events, mid):
                hi = mid
            else:
                lo = mid
        # A replay's path depends on its budget, so it can fit at the edge
        # bisection found and fail just above it: the figure is where
        # STABLE_TRIES budgets spread over the next 1/STABLE_DIV of the peak
        # fit too, as xseg-bench frag counts it (benchmarks/frag.c).
        stride = max(step, -(-(peak // STABLE_DIV // STABLE_TRIES) // step) * step)
        k = 1
        while stable and k <= STABLE_TRIES:
            trials += 1
            if self.replay(events, hi + k * stride):
                k += 1
                continue
            hi += k * stride
            while True:
                hi += step
                if hi > 4 * peak:
                    return None, trials, None
                trials += 1
                if self.replay(events, hi):
                    break
            k = 1
        # Did the allocator keep to the cap?  Replay once more and look.
        self.replay(events, hi)
        return hi, trials + 1, self.peak_reserved()


def factors(spec):
    """--at's SPEC as {name: factor} with "*" for the rest; SystemExit on a bad one."""
    out = {}
    for part in spec.split(","):
        name, _, f = part.rpartition(":")
        try:
            out[name or "*"] = float(f)
        except ValueError:
            raise SystemExit("torch_replay.py: --at %s: %r is not a factor (NAME:FACTOR or FACTOR)" % (spec, f))
        if not 1.0 <= out[name or "*"] <= 4.0:
            raise SystemExit("torch_replay.py: --at %s: factor %s is outside [1, 4]" % (spec, f))
    return out


DRIVER_CALLS = ("num_device_alloc", "num_device_free", "num_map", "num_unmap", "num_set_access")
DRIVER_TIMES = ("time_create_ns", "time_release_ns", "time_map_ns", "time_unmap_ns", "time_set_access_ns")


def xseg_driver_counts(st, extra=()):
    """From xseg's statistics `st` (xseg.torch.xseg_stats): its driver calls,
    the counters named in `extra`, and the time in the driver (driver_ns)."""
    out = {k: st[k] for k in DRIVER_CALLS + DRIVER_TIMES + tuple(extra)}
    out["driver_ns"] = sum(st[k] for k in DRIVER_TIMES)
    return out


def driver_counts(r):
    """xseg's driver work and refused calls so far ({} under PyTorch's own allocators)."""
    if r.xs is None:
        return {}
    return xseg_driver_counts(r.xs.xseg_stats(0), ("num_create_refused", "num_map_refused", "num_create_waits",
                                                    "time_paced_ns", "num_looks", "time_look_ns"))


def counts_since(before, now):
    """The driver counters of `now` less those of `before` (driver_counts snapshots)."""
    return {k: v - before.get(k, 0) for k, v in now.items()}


def driver_split(c):
    """Each kind of driver call in `c` (xseg_driver_counts): how many, and its milliseconds."""
    return ", ".join("%d %s %.1f" % (c[n], name, c[t] / 1e6) for n, t, name in zip(
        DRIVER_CALLS, DRIVER_TIMES, ("create", "release", "map", "unmap", "set access")))


def timed_at(a):
    """Replay each trace --repeat times under its factor of the peak; print and
    return the seconds of each replay and whether it succeeded."""
    fs = factors(a.at)
    r = Replayer(a.allocator, a.budget)
    print("%s, budget: %s; seconds per replay" % (a.allocator, a.budget))
    results = []
    for path in a.traces:
        name = os.path.basename(path).rsplit(".", 1)[0]
        f = fs.get(name, fs.get("*"))
        if f is None:
            raise SystemExit("torch_replay.py: --at names no factor for %s (add *:FACTOR)" % name)
        events, peak = parse_trace(path)
        budget = -(-int(peak * f) // MIB) * MIB
        runs, calls, ev_calls, evs = [], [], [], []
        for _ in range(a.repeat):
            before = driver_counts(r)
            t0 = time.time()
            ok = r.replay(events, budget)
            runs.append((round(time.time() - t0, 3), ok))
            evs.append(round(r.events_s, 4) if r.events_s is not None else None)
            calls.append(counts_since(before, driver_counts(r)))
            ev_calls.append(counts_since(before, r.events_driver or {}))
        # Under xseg: the driver's time and the calls it refused, per replay;
        # the events' share (the rest is the teardown's unmaps and releases).
        extra = "".join("  [driver %.0f ms, in the events %s, refused: %d creates, %d maps; %d creates waited,"
                        " %.0f ms paced; %d looks, %.0f ms]" % (
            c["driver_ns"] / 1e6, "%.0f ms (%s)" % (e["driver_ns"] / 1e6, driver_split(e)) if e else "-",
            c["num_create_refused"], c["num_map_refused"], c["num_create_waits"], c["time_paced_ns"] / 1e6,
            c["num_looks"], c["time_look_ns"] / 1e6)
            for c, e in zip(calls, ev_calls) if c)
        print("%-22s at %.4f (%6d MiB): %s; events alone %s%s" % (
            name, f, budget // MIB, " ".join("%.3f%s" % (t, "" if ok else " (failed)") for t, ok in runs),
            " ".join("%.4f" % e if e is not None else "-" for e in evs), extra), flush=True)
        results.append({"trace": name, "factor": f, "budget_bytes": budget, "seconds": [t for t, _ in runs],
                        "events_seconds": evs, "ok": [ok for _, ok in runs], "driver": calls,
                        "events_driver": ev_calls})
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"allocator": a.allocator, "budget": a.budget, "results": results}, fh, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allocator", choices=("native", "expandable", "xseg"), required=True)
    ap.add_argument("--budget", choices=("cap", "filler"), default="cap",
                    help="the allocator's own cap (default), or a raw allocation leaving the budget free")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--at", help="replay under this factor of the peak instead of bisecting (see above)")
    ap.add_argument("--repeat", type=int, default=3, help="replays per trace with --at")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    if a.at:
        return timed_at(a)
    r = Replayer(a.allocator, a.budget)
    props = r.torch.cuda.get_device_properties(0)
    print("%s on %s (%d MiB), torch %s, budget: %s" % (a.allocator, props.name, r.total // MIB, r.torch.__version__,
                                                       "the allocator's cap" if a.budget == "cap" else
                                                       "free memory a raw allocation leaves"))
    print("%-22s %8s %10s %10s %8s %7s %s" % ("trace", "events", "peak MiB", "budget MiB", "overhead",
                                            "trials", "seconds"))
    results = []
    for path in a.traces:
        name = os.path.basename(path).rsplit(".", 1)[0]
        events, peak = parse_trace(path)
        t0 = time.time()
        budget, trials, held = r.min_budget(events, peak)
        dt = time.time() - t0
        # Under a filler the budget is physical: nothing can be held beyond it.
        capped = budget is not None and (a.budget == "filler" or held <= budget)
        # Where the cap was overrun, what the allocator held is the figure.
        over = max(budget, held) / peak if budget else None
        note = "" if capped or not budget else "  (cap overrun: held %d MiB; overhead from that)" % (held // MIB)
        print("%-22s %8d %10.1f %10s %8s %7d %6.1f%s" % (
            name, len(events), peak / MIB, "%d" % (budget // MIB) if budget else "-",
            "%.4f" % over if over else "> 4", trials, dt, note), flush=True)
        results.append({"trace": name, "events": len(events), "peak_live_bytes": peak,
                        "min_budget_bytes": budget, "held_peak_bytes": held, "overhead": over,
                        "trials": trials,
                        "cap_enforced": capped, "seconds": round(dt, 2)})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"allocator": a.allocator, "budget": a.budget, "gpu": props.name, "total_bytes": r.total,
                       "torch": r.torch.__version__, "results": results}, f, indent=1)
    return 0 if all(x["overhead"] for x in results) else 1


if __name__ == "__main__":
    sys.exit(main())
