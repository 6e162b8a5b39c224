#!/usr/bin/env python3
"""oom_backoff.py: the usual batch-size back-off, unchanged: try a batch,
catch torch.OutOfMemoryError, halve it, try again.  Nothing in it knows of
xseg; run.sh runs it as it is and with XSEG_ALLOC_CONF set.

A 6-layer MLP, 4096 wide, under a --cap-gib budget
(torch.cuda.set_per_process_memory_fraction), starting at batch 2^17.
Once a batch fits, 20 steps train; the last stdout line is JSON: the
allocator, the batches tried, the batch that fit, the losses and the memory
left allocated at the end (0 when every failed attempt freed what it took).
"""
import argparse
import json
import sys

import torch


def attempt(model, opt, batch, steps):
    losses = []
    for i in range(steps):
        g = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(batch, 4096, device="cuda", generator=g)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap-gib", type=float, default=6.0)
    args = ap.parse_args()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(args.cap_gib * 2**30 / total)
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    base = torch.cuda.memory_allocated()
    batch, tried, losses = 1 << 17, [], None
    while batch >= 1:
        tried.append(batch)
        try:
            losses = attempt(model, opt, batch, 20)
            break
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            batch //= 2
    torch.cuda.synchronize()
    print(json.dumps({
        "allocator": torch.cuda.get_allocator_backend(), "tried": tried, "batch": batch,
        "losses": [float.hex(x) for x in losses or []],
        "left_allocated": torch.cuda.memory_allocated() - base,
        "ooms": torch.cuda.memory_stats()["num_ooms"],
    }))
    return 0 if losses else 1


if __name__ == "__main__":
    sys.exit(main())
