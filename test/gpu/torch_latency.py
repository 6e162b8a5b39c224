#!/usr/bin/env python3
"""torch_latency.py: what a cached allocation costs through PyTorch.

    python3 test/gpu/torch_latency.py                  # PyTorch's own allocator
    XSEG_ALLOC_CONF= python3 test/gpu/torch_latency.py # xseg, selected at import torch

For each size, `torch.empty(n, device="cuda")` and dropping the tensor, in
a loop after a warm-up (the block is cached after the first pair): the
median over 15 batches of 20,000 pairs, in ns per pair.  Python's own cost
is most of that and varies between processes, so the same pairs are also
timed in C++ through torch's allocator interface (CUDAAllocator::allocate
and the DataPtr's deleter, what at::empty calls; xseg._torch._alloc_pair_ns,
which measures whichever allocator is current).  One JSON line; run.sh runs
the two allocators alternately in fresh processes.
"""
import json
import statistics
import sys
import time

import torch

SIZES = [512, 4096, 1 << 20, 20 << 20, 1 << 30]


def pairs_ns(n, reps):
    dev = torch.device("cuda")
    empty = torch.empty
    u8 = torch.uint8
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        empty(n, dtype=u8, device=dev)
    return (time.perf_counter_ns() - t0) / reps


def main():
    from xseg import _torch  # the timer only: it does not install anything

    out = {"allocator": torch.cuda.get_allocator_backend(), "torch": torch.__version__}
    torch.empty(1, device="cuda")
    for n in SIZES:
        pairs_ns(n, 2000)  # warm: the block is cached, the code paths hot
        out["py_%d" % n] = statistics.median(pairs_ns(n, 20000) for _ in range(15))
        out["c10_%d" % n] = statistics.median(_torch._alloc_pair_ns(n, 200000) for _ in range(15))
    torch.cuda.synchronize()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
