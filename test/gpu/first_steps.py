#!/usr/bin/env python3
"""first_steps.py: what growing from empty costs a real training script.

An ordinary GPT-2 training loop (transformers, built from its config: the
GPU machines have no network for weights; AdamW; a fixed synthetic batch)
that knows nothing of the allocator; run.sh runs it under each allocator
in fresh processes.  The CUDA libraries are warmed first by a one-layer
model of the same width, trained for one step on two of the sequences and
dropped, and the cache is emptied, so the timed part starts with the
allocator holding (nearly) nothing: setting the model up (weights to the
GPU, the optimizer) and then every step are timed, synchronised.  Step 0
grows to the forward and backward peak, and its optimizer step makes the
AdamW states; step 1 meets the states beside the activations; the later
steps repeat.

The last stdout line is JSON: the allocator, the set-up time, every step's
time (ms), the time until the host had queued each step (cpu_ms: where it
is close to the step's, the host, not the GPU, set the pace), the peaks
torch's statistics report, and under xseg its driver
work (calls, time in the driver, conversions, fence waits) in the set-up,
step 0, step 1 and the later steps.
"""
import argparse
import json
import os
import time

import torch
import transformers


def allocator_name():
    if os.environ.get("XSEG_ALLOC_CONF") is not None:
        return "xseg"
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return "expandable" if "expandable_segments:True" in conf else "native"


# xseg's counters of driver work (docs/metrics.md), read around each phase
# under xseg: where a slower phase's time goes.
XSEG_KEYS = ("num_grows", "num_conversions", "num_fence_waits", "num_device_alloc", "num_device_free", "num_map",
             "num_unmap", "num_set_access", "num_remaps", "time_create_ns", "time_release_ns", "time_map_ns",
             "time_unmap_ns", "time_set_access_ns", "time_paced_ns")


def xseg_counters():
    if allocator_name() != "xseg":
        return None
    import xseg.torch

    st = xseg.torch.xseg_stats()
    return {k: st[k] for k in XSEG_KEYS}  # a key renamed in docs/metrics.md fails here, not silently


def delta(a, b):
    if a is None or b is None:
        return None
    d = {k: b[k] - a[k] for k in XSEG_KEYS}
    d["driver_ms"] = sum(v for k, v in d.items() if k.startswith("time_") and k != "time_paced_ns") / 1e6
    return d


def step(model, opt, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out.loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    cfg = dict(n_embd=args.width, n_head=args.width // 64, vocab_size=50257, n_positions=args.seq)
    ids = torch.randint(0, 50257, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))

    # Warm the libraries (cuBLAS handles and workspaces, kernels), then give
    # everything back, so that what follows starts from an empty cache.
    warm = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, **cfg)).to(dev)
    wopt = torch.optim.AdamW(warm.parameters(), lr=1e-4)
    step(warm, wopt, ids[:2].to(dev))
    del warm, wopt
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    reserved0 = torch.cuda.memory_reserved()

    torch.cuda.synchronize()
    marks = [xseg_counters()]
    t0 = time.perf_counter()
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=args.layers, **cfg)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = ids.to(dev)
    torch.cuda.synchronize()
    setup_ms = (time.perf_counter() - t0) * 1e3
    marks.append(xseg_counters())
    steps_ms, cpu_ms, losses = [], [], []
    for _ in range(args.steps):
        t = time.perf_counter()
        loss = step(model, opt, x)
        cpu_ms.append((time.perf_counter() - t) * 1e3)  # until the host has queued the step
        torch.cuda.synchronize()
        steps_ms.append((time.perf_counter() - t) * 1e3)
        losses.append(float(loss.detach()))
        if len(marks) < 4:
            marks.append(xseg_counters())
    marks.append(xseg_counters())
    print(json.dumps({
        "allocator": allocator_name(),
        "setup_ms": setup_ms,
        "steps_ms": steps_ms,
        "cpu_ms": cpu_ms,
        "losses": losses,
        "reserved_before_mib": reserved0 / 2**20,
        "reserved_peak_mib": torch.cuda.max_memory_reserved() / 2**20,
        "allocated_peak_mib": torch.cuda.max_memory_allocated() / 2**20,
        "config": vars(args),
        # xseg only: driver work in the set-up, step 0, step 1, and the rest
        "xseg_phases": [delta(a, b) for a, b in zip(marks, marks[1:])] if marks[0] else None,
    }))


if __name__ == "__main__":
    main()
