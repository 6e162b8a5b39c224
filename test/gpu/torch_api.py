#!/usr/bin/env python3
"""torch_api.py: every torch.cuda memory API a training stack calls, under
whichever allocator the environment selects - an unchanged script.

    python3 test/gpu/torch_api.py [--json FILE]                     # PyTorch's own
    XSEG_ALLOC_CONF= python3 test/gpu/torch_api.py [--json FILE]    # xseg (installed package)

Each check prints "ok" or "FAIL" and the script exits 1 on any failure, so
running it under PyTorch's own allocator checks the checks.  --json writes
the memory_stats() keys and a few figures, which run.sh compares between
the two allocators.  Needs one CUDA GPU; --only NAME[,NAME] runs some parts.
"""
import argparse
import json
import os
import pickle
import sys
import tempfile
import time

import torch

MiB = 1 << 20
failures = 0
results = {}


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    failures += not cond
    return cond


def round512(n):
    return max(512, (n + 511) // 512 * 512)


def part_stats():
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    s0 = torch.cuda.memory_stats()
    results["keys"] = sorted(s0)
    base = torch.cuda.memory_allocated()
    sizes = [1, 511, 512, 513, 4096, MiB, MiB + 1, 3 * MiB, 20 * MiB, 100 * MiB + 3]
    ts = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
    s = torch.cuda.memory_stats()
    rounded = sum(round512(n) for n in sizes)
    grown = torch.cuda.memory_allocated() - base
    check(s["requested_bytes.all.current"] - s0["requested_bytes.all.current"] == sum(sizes),
          "requested_bytes counts what was asked: %d" % sum(sizes))
    # Blocks are the request rounded to 512 bytes; a block may keep the rest
    # of a split it was cut from (torch: under 1 MiB in the large pool; xseg:
    # the rest of its last page, at most 1/64 of it).
    check(rounded <= grown <= rounded + sum(sizes) // 64 + 2 * MiB,
          "memory_allocated() grew by %d for %d rounded bytes" % (grown, rounded))
    results["allocated_over_rounded"] = grown - rounded
    check(torch.cuda.memory_reserved() >= torch.cuda.memory_allocated(), "reserved >= allocated")
    check(torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated(), "max_memory_allocated >= current")
    check(s["allocation.all.current"] - s0["allocation.all.current"] == len(sizes), "allocation count")
    check(s["segment.all.current"] >= 1 and s["num_device_alloc"] >= 1, "segments and device allocations counted")
    del ts
    check(torch.cuda.memory_allocated() == base, "memory_allocated() back to where it was")
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    check(torch.cuda.max_memory_allocated() == base < peak, "reset_peak_memory_stats()")
    torch.cuda.reset_accumulated_memory_stats()
    s = torch.cuda.memory_stats()
    check(s["allocated_bytes.all.allocated"] == 0 and s["num_device_alloc"] == 0, "reset_accumulated_memory_stats()")
    text = torch.cuda.memory_summary()
    check("Allocated memory" in text and "GPU reserved memory" in text, "memory_summary() prints its table")
    x = torch.empty(64 * MiB, dtype=torch.uint8, device=dev)
    del x
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    check(torch.cuda.memory_reserved() < before, "empty_cache() returns memory (%d -> %d)"
          % (before, torch.cuda.memory_reserved()))
    free, total = torch.cuda.mem_get_info()
    check(0 < free <= total, "mem_get_info()")
    p = torch.cuda.caching_allocator_alloc(MiB)
    check(p != 0, "caching_allocator_alloc()")
    torch.cuda.caching_allocator_delete(p)
    results["backend"] = torch.cuda.get_allocator_backend()


def part_oom():
    seen = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a))
    keep = torch.full((16 * MiB,), 3.0, device="cuda")
    ooms = torch.cuda.memory_stats()["num_ooms"]
    err = None
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        err = str(e)
    check(err is not None and "CUDA out of memory" in err, "a huge request raises torch.OutOfMemoryError")
    check(len(seen) == 1, "the out-of-memory observer was called (%d)" % len(seen))
    check(torch.cuda.memory_stats()["num_ooms"] == ooms + 1, "num_ooms counts it")
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(0.25)
    err = None
    try:
        torch.empty(int(total * 0.3), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        err = str(e)
    check(err is not None, "set_per_process_memory_fraction(0.25) caps: 30 % of the device raises")
    check(torch.cuda.get_per_process_memory_fraction() == 0.25, "get_per_process_memory_fraction()")
    torch.cuda.set_per_process_memory_fraction(1.0)
    y = torch.empty(int(total * 0.3), dtype=torch.uint8, device="cuda")
    check(y.data_ptr() != 0, "the cap lifted, 30 % is served")
    del y
    check(bool((keep == 3.0).all()), "live tensors kept their contents through the failures")
    results["oom_message"] = (err or "")[:400]


def part_streams():
    s = torch.cuda.Stream()
    x = torch.ones(8 * MiB, device="cuda")
    with torch.cuda.stream(s):
        y = x * 2
    x.record_stream(s)
    del x
    z = torch.zeros(8 * MiB, device="cuda")  # may not reuse x's memory before s is done
    torch.cuda.synchronize()
    check(float(y.sum()) == 16.0 * MiB and float(z.sum()) == 0, "record_stream: the side stream's work is intact")


def part_history():
    from torch.cuda import _memory_viz as mv

    torch.cuda.memory._record_memory_history(max_entries=100000)
    a = torch.randn(3 * MiB // 4, device="cuda")
    b = torch.empty(5000, device="cuda")
    del b
    snap = torch.cuda.memory._snapshot()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "snap.pickle")
        torch.cuda.memory._dump_snapshot(path)
        with open(path, "rb") as f:
            data = pickle.load(f)
    torch.cuda.memory._record_memory_history(enabled=None)
    check(len(data["segments"]) > 0, "the snapshot has segments (%d)" % len(data["segments"]))
    ok = all(sum(b["size"] for b in s["blocks"]) == s["total_size"] for s in data["segments"])
    check(ok, "every segment's blocks tile it")
    live = [b for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    framed = [b for b in live if b.get("frames")]
    check(len(framed) > 0, "live blocks carry their stack traces (%d of %d)" % (len(framed), len(live)))
    trace = data["device_traces"][torch.cuda.current_device()]
    check(any(t["action"] == "alloc" for t in trace) and any(t["action"].startswith("free") for t in trace),
          "the trace has allocations and frees (%d entries)" % len(trace))
    for name, fn in (("segsum", lambda: mv.segsum(data)), ("trace", lambda: mv.trace(data)),
                     ("segments", lambda: mv.segments(data, format_flamegraph=lambda s: s)),
                     ("memory", lambda: mv.memory(data, format_flamegraph=lambda s: s)),
                     ("trace_plot", lambda: mv.trace_plot(data)), ("segment_plot", lambda: mv.segment_plot(data))):
        try:
            out = fn()
            check(bool(out), "_memory_viz.%s renders it" % name)
        except Exception as e:  # noqa: BLE001
            check(False, "_memory_viz.%s: %r" % (name, e))
    del a, snap


def part_graphs():
    x = torch.randn(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = x * 2
        y = tmp + 1
        del tmp
    x.copy_(torch.arange(1 << 20, device="cuda", dtype=torch.float32))
    g.replay()
    torch.cuda.synchronize()
    check(torch.equal(y, x * 2 + 1), "a captured graph replays correctly")
    pools = {tuple(s["segment_pool_id"]) for s in torch.cuda.memory._snapshot()["segments"]}
    check(any(p != (0, 0) for p in pools), "the graph's memory is in a private pool (%s)" % sorted(pools))
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    check(torch.equal(y, x * 2 + 1), "replays stay correct")
    del g, y
    torch.cuda.empty_cache()
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        t = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
    check(pool.use_count() >= 1, "MemPool.use_count()")
    seg = pool.snapshot()
    check(any(b["state"] == "active_allocated" for s in seg for b in s["blocks"]), "MemPool.snapshot() shows its tensor")
    del t, pool


def part_compile():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = torch.compile(lambda x: model(x).square().mean(), mode="reduce-overhead")
    losses = []
    for i in range(6):
        x = torch.randn(64, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(i))
        loss = step(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    check(all(l == l for l in losses), "torch.compile(mode='reduce-overhead') trains: %s" % losses[-1])
    results["compile_losses"] = losses


def _child(q, done):
    t = q.get()
    t.add_(1)
    torch.cuda.synchronize()
    done.put(float(t.sum()))


def part_ipc():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_child, args=(q, done))
    p.start()
    t = torch.zeros(MiB, device="cuda")
    q.put(t)
    got = done.get(timeout=120)
    p.join(60)
    torch.cuda.synchronize()
    check(got == float(MiB) and float(t.sum()) == float(MiB),
          "a tensor sent to a child process is changed there and the parent sees it (%s)" % got)


PARTS = {"stats": part_stats, "oom": part_oom, "streams": part_streams, "history": part_history,
         "graphs": part_graphs, "compile": part_compile, "ipc": part_ipc}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default=",".join(PARTS))
    args = ap.parse_args()
    print("allocator:", torch.cuda.get_allocator_backend(), "torch", torch.__version__, flush=True)
    for name in args.only.split(","):
        t0 = time.time()
        try:
            PARTS[name]()
        except Exception as e:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            check(False, "%s raised %r" % (name, e))
        print("  (%s: %.1f s)" % (name, time.time() - t0), flush=True)
    if torch.cuda.get_allocator_backend() == "xseg":
        import xseg

        try:
            xseg.check_heap()
            check(True, "xseg's heap checks out")
        except xseg.XsegError as e:
            check(False, "xseg's heap: %s" % e)
    results["failures"] = failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    print("%d failures" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
