#!/usr/bin/env python3
"""resnet_shapes.py: torchvision ResNet-50 trained with input shapes that
change every step - batch in {16, 24, ..., 64}, resolution in {160, 192,
..., 288}, drawn from a seeded generator - an ordinary script that knows
nothing of the allocator; run.sh runs it under each.

The last stdout line is JSON: the allocator, the median step time over
steps 5..N (ms, synchronised), the mean, every step's time, the peak
memory PyTorch's statistics report (reserved) and the peak the driver saw
(NVML used memory polled every millisecond in a thread, minus the value
before the model).
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch
import torchvision


def nvml_peak_sampler():
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:  # noqa: BLE001
        return None
    state = {"peak": 0, "run": True, "base": pynvml.nvmlDeviceGetMemoryInfo(h).used}

    def loop():
        while state["run"]:
            state["peak"] = max(state["peak"], pynvml.nvmlDeviceGetMemoryInfo(h).used)
            time.sleep(0.001)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    sampler = nvml_peak_sampler()
    model = torchvision.models.resnet50(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    times = []
    for step in range(args.steps):
        b = 16 + 8 * int(torch.randint(0, 7, (1,), generator=g))
        r = 160 + 32 * int(torch.randint(0, 5, (1,), generator=g))
        x = torch.randn(b, 3, r, r, device="cuda")
        y = torch.randint(0, 1000, (b,), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    out = {
        "allocator": torch.cuda.get_allocator_backend()
        + ("-expandable" if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") else ""),
        "median_ms": statistics.median(times[5:]), "mean_ms": statistics.mean(times[5:]),
        "first5_ms": sum(times[:5]), "reserved_peak_mib": torch.cuda.max_memory_reserved() / 2**20,
        "allocated_peak_mib": torch.cuda.max_memory_allocated() / 2**20,
        # Every step, in order: the shapes are the same under every allocator
        # (one seed), so runs compare step by step (run.sh resnet does).
        "steps_ms": [round(t, 3) for t in times],
    }
    if sampler:
        sampler["run"] = False
        out["nvml_peak_mib"] = (sampler["peak"] - sampler["base"]) / 2**20
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
