#!/usr/bin/env python3
"""torch_passes.py: what growing and shrinking cost through PyTorch.

    python3 test/gpu/torch_passes.py [--json FILE] [--settle S] [--busy S] TRACE...   # PyTorch's own
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 test/gpu/torch_passes.py TRACE...
    XSEG_ALLOC_CONF= python3 test/gpu/torch_passes.py TRACE...                   # xseg

Each trace is replayed as torch.empty / drop on the event's stream twice:
first from an empty allocator (torch.cuda.empty_cache() before it gives
every cached byte back), then again with the cache as the first pass left
it.  --settle S waits S seconds after that empty_cache: the driver clears
memory given back before it hands it out again, and creates made while it
still does wait (one H100: the same 1,016 creates of a first pass took
27-83 ms in back-to-back runs).  Prints microseconds per event for each
pass (synchronised at the end), and, under xseg, the driver calls each
pass made (xseg's counters).  The JSON
rows also hold cpu_ref_us_1 and cpu_ref_us_2: a fixed piece of Python work
timed around each pass, to tell a slow pass from a slow phase of the machine.

--repeat N replays the whole list N times in the one process, the traces in
an order rotated by one each time, so that each trace has N first passes
from empty (each after empty_cache and --settle): with nothing live,
empty_cache is a new start for xseg (it places and calls the driver as a
fresh process does; test_steady, a_new_start_places_as_a_fresh_process)
and leaves PyTorch's own allocators nothing cached.  Rows carry "repeat"
(0-based); benchmarks/cold_summary.py reads them.
"""
import argparse
import json
import os
import time

import torch

from torch_replay import parse_trace, xseg_driver_counts  # noqa: E402 (same folder)


def counters():
    if torch.cuda.get_allocator_backend() != "xseg":
        # PyTorch's own allocators count their device allocations (cudaMalloc,
        # or cuMemCreate for expandable segments) and frees.
        s = torch.cuda.memory_stats()
        return {k: s[k] for k in ("num_device_alloc", "num_device_free") if k in s}
    import xseg.torch as xt

    return xseg_driver_counts(xt.xseg_stats(0), ("num_conversions", "num_grows"))


def cpu_ref():
    """Seconds a fixed piece of pure-Python work takes now (the fastest of
    three): leased machines run in phases of seconds at different speeds
    (this took 0.64-3.5 ms in one H100 lease), so a pass's time is read
    beside what this took around it (cpu_ref_us_1, cpu_ref_us_2)."""
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        x = 0
        for i in range(20000):
            x += i & 7
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best


def replay(events, streams):
    live = {}
    empty, u8 = torch.empty, torch.uint8
    for op, ident, size, sn in events:
        if op:
            del live[ident]
        elif sn:
            with torch.cuda.stream(streams[sn]):
                live[ident] = empty(size, dtype=u8, device="cuda")
        else:
            live[ident] = empty(size, dtype=u8, device="cuda")
    live.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after emptying the cache before each first pass, so that the driver has "
                         "cleared the memory the previous trace gave back (creates that need it wait otherwise)")
    ap.add_argument("--busy", type=float, default=0.0,
                    help="keep the GPU busy for S seconds from just before each pass, on a stream of its own "
                         "that the pass does not wait for, as a training step's kernels run while it allocates "
                         "(whether driver calls cost the same beside them)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="replay the list N times in this process, its order rotated by one each time")
    ap.add_argument("--label", default=None,
                    help="the allocator's name in the rows (default: torch's backend name, or expandable); "
                         "two builds of xseg told apart in one set of files")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1, not %d" % a.repeat)
    torch.cuda.init()
    name = torch.cuda.get_allocator_backend()
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        name = "expandable"
    if a.label:
        name = a.label
    rows = []
    parsed = {path: parse_trace(path)[0] for path in a.traces}
    order = [(rep, a.traces[(i + rep) % len(a.traces)]) for rep in range(a.repeat) for i in range(len(a.traces))]
    for rep, path in order:
        events = parsed[path]
        nstreams = 1 + max((e[3] for e in events), default=0)
        streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(nstreams - 1)]
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # after empty_cache: the peak is this trace's alone
        if a.settle > 0:
            time.sleep(a.settle)
        row = {"allocator": name, "trace": os.path.basename(path).rsplit(".", 1)[0], "events": len(events),
               "busy_s": a.busy, "repeat": rep}
        busy = torch.cuda.Stream() if a.busy > 0 else None
        for k in (1, 2):
            c0 = counters()
            torch.cuda.synchronize()
            ref = cpu_ref()
            if busy is not None:
                with torch.cuda.stream(busy):
                    torch.cuda._sleep(int(a.busy * 2e9))  # cycles: about S seconds at 2 GHz
            t0 = time.perf_counter()
            replay(events, streams)
            if busy is None:
                torch.cuda.synchronize()
            else:
                for s in streams:
                    s.synchronize()  # the replay's own streams: not the busy one
            dt = time.perf_counter() - t0
            c1 = counters()
            row["us_per_event_%d" % k] = dt * 1e6 / len(events)
            row["cpu_ref_us_%d" % k] = (ref + cpu_ref()) / 2 * 1e6
            if c0:
                row["driver_%d" % k] = {x: c1[x] - c0[x] for x in c0}
        row["reserved_peak_mib"] = torch.cuda.max_memory_reserved() / 2**20
        rows.append(row)
        kinds = ("num_device_alloc", "num_device_free", "num_map", "num_unmap", "num_set_access")
        calls = [sum(row.get("driver_%d" % k, {}).get(x, 0) for x in kinds) for k in (1, 2)]
        print("%-11s %-20s %8d events  from empty %7.2f us/event  warm %7.2f us/event%s" % (
            name, row["trace"], len(events), row["us_per_event_1"], row["us_per_event_2"],
            "  (driver calls from empty %d, warm %d)" % tuple(calls) if "driver_1" in row else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
