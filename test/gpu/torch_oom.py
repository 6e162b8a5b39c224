#!/usr/bin/env python3
"""torch_oom.py: out of memory under xseg, as a PyTorch program sees it.

With libxseg_torch.so beside libxseg.so, a request over the cap must raise a
RuntimeError whose message starts "CUDA out of memory." and carries xseg's
diagnosis; the tensors made before must keep their contents; the allocator
must serve the next request that fits, and the cap must follow
torch.cuda.set_per_process_memory_fraction.  Exits 1 on any failure.

    XSEG_LIBRARY=build/libxseg.so PYTHONPATH=python python3 test/gpu/torch_oom.py
"""
import sys

import xseg.torch as xt

xt.enable()
import torch  # noqa: E402

failures = 0


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    failures += not cond


hooks = xt.hooks()
print("hooks:", hooks)
check(hooks.get("out_of_memory", "").startswith("raises"), "the raising entry points are installed")
check("memory_fraction" in hooks, "set_per_process_memory_fraction reaches xseg")

MiB = 1 << 20
total = torch.cuda.mem_get_info(0)[1]
keep = [torch.full((64 * MiB // 4,), float(i), device="cuda") for i in range(4)]
torch.cuda.set_per_process_memory_fraction(1024 * MiB / total, 0)
check(xt.memory_stats_as_nested_dict(0)["limit"] <= 1024 * MiB, "the cap is 1 GiB")

err = None
try:
    torch.empty(2048 * MiB, dtype=torch.uint8, device="cuda")
except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError too
    err = str(e)
check(err is not None, "2 GiB over a 1 GiB cap raises")
check(bool(err) and err.startswith("CUDA out of memory. xseg: out of memory on device 0"),
      "the message: %r" % (err or "")[:160])

# The failure in an operator's output, not only in torch.empty.
err = None
try:
    big = torch.ones(200 * MiB // 4, device="cuda")
    big.repeat(6)  # 1.2 GB more
except RuntimeError as e:
    err = str(e)
check(bool(err) and "CUDA out of memory" in err, "an operator's allocation raises too")
big = None

for i, t in enumerate(keep):
    check(bool((t == float(i)).all().item()), "tensor %d kept its contents" % i)
x = torch.ones(256 * MiB // 4, device="cuda")
check(float(x.sum().item()) == 256 * MiB // 4, "a request that fits is served after the failures")
del x, keep, t  # t: the loop above left the last tensor in it
torch.cuda.set_per_process_memory_fraction(1.0, 0)
y = torch.empty(2048 * MiB, dtype=torch.uint8, device="cuda")
check(y.data_ptr() != 0, "with the cap lifted, 2 GiB is served")
del y
torch.cuda.empty_cache()
check(xt.memory_stats_as_nested_dict(0)["held_bytes"]["current"] == 0, "empty_cache returned every page")
try:
    xt.check_heap()  # raises XsegError naming the first broken invariant
    heap_err = None
except Exception as e:
    heap_err = str(e)
check(heap_err is None, "the heap checks out (%s)" % heap_err)
print("%d failures" % failures)
sys.exit(1 if failures else 0)
