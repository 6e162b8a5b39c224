#!/usr/bin/env python3
"""hf_finetune.py: an ordinary Hugging Face training script - nothing in it
knows of xseg.  run.sh runs it twice, once as it is and once with
XSEG_ALLOC_CONF set, and compares the losses bit for bit.

A GPT-2 (transformers, 6 layers, 512 wide; built from its config, as this
machine has no network to fetch weights) fine-tuned for --steps steps of
AdamW on a fixed synthetic corpus in deterministic mode, logging
torch.cuda.memory_summary() every --log-every steps to stderr.  The last
line of stdout is JSON: the allocator, every loss (as float hex), the peak
memory figures and the time per step.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import transformers  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--log-every", type=int, default=100)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    cfg = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=8192, n_positions=args.seq)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(1)
    # A corpus with structure to learn: token t+1 follows t, with noise.
    base = torch.randint(0, 8192, (64, 1), generator=gen)
    corpus = (base + torch.arange(args.seq)) % 8192
    losses, t0 = [], None
    for step in range(args.steps):
        if step == 10:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        idx = torch.randint(0, 64, (args.batch,), generator=gen)
        batch = corpus[idx].cuda()
        out = model(input_ids=batch, labels=batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
        if args.log_every and (step + 1) % args.log_every == 0:
            print("step %d loss %.4f\n%s" % (step + 1, losses[-1], torch.cuda.memory_summary()), file=sys.stderr)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / max(1, args.steps - 10)
    st = torch.cuda.memory_stats()
    print(json.dumps({
        "allocator": torch.cuda.get_allocator_backend(),
        "losses": [float.hex(x) for x in losses],
        "first_loss": losses[0], "last_loss": losses[-1],
        "peak_allocated_mib": st["allocated_bytes.all.peak"] / 2**20,
        "peak_reserved_mib": st["reserved_bytes.all.peak"] / 2**20,
        "ms_per_step": ms,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
