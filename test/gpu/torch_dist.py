"""Training on several GPUs through torch.distributed, as a user runs it.

    torchrun --nproc_per_node=2 test/gpu/torch_dist.py --mode ddp|fsdp [--steps N] [--allreduce-mib M]

The allocator is chosen the way a user chooses it: XSEG_ALLOC_CONF set in
the environment selects xseg (the package's autoload at `import torch`),
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True selects expandable
segments, neither PyTorch's default.  Nothing in this script names xseg.

A small transformer language model (6 layers, width 512) trains for N steps
with the sequence length changing every step, in deterministic mode, under
DistributedDataParallel (--mode ddp) or FSDP2 (--mode fsdp: fully_shard on
every layer and the root, so parameters are gathered and freed layer by
layer).  Then, unless --allreduce-mib 0, an all_reduce of M MiB on tensors
from the same allocator is timed (NCCL's path for that memory: the harness
compares its bandwidth with PyTorch's allocator).

Rank 0 prints one JSON line: the allocator, mode, world size, the loss of
every step (averaged over ranks, as float.hex for an exact comparison),
the median step time, and per rank the peak GPU memory the process held
(NVML, sampled every 2 ms: everything the process holds, context and NCCL
buffers included) and torch.cuda.max_memory_reserved().
"""
import argparse
import json
import os
import statistics
import threading
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402


def allocator_name():
    if os.environ.get("XSEG_ALLOC_CONF") is not None:
        return "xseg"
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        return "expandable"
    return "native"


class NvmlPeak:
    """The most GPU memory this process held, sampled in a thread."""

    def __init__(self, device):
        self.peak, self.run, self.how = 0, True, "none"
        try:
            import pynvml

            pynvml.nvmlInit()
            bus = torch.cuda.get_device_properties(device)
            try:
                pci = "%08X:%02X:%02X.0" % (bus.pci_domain_id, bus.pci_bus_id, bus.pci_device_id)
                self.h = pynvml.nvmlDeviceGetHandleByPciBusId(pci)
            except Exception:  # noqa: BLE001 - older torch: no PCI ids
                self.h = pynvml.nvmlDeviceGetHandleByIndex(device)
            self.nvml = pynvml
        except Exception:  # noqa: BLE001
            return
        self.how = "nvml process"
        threading.Thread(target=self.loop, daemon=True).start()

    def sample(self):
        pid = os.getpid()
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.h):
            if p.pid == pid and p.usedGpuMemory:
                return p.usedGpuMemory
        self.how = "nvml device"  # no per-process figure (containers): the whole device
        return self.nvml.nvmlDeviceGetMemoryInfo(self.h).used

    def loop(self):
        while self.run:
            try:
                self.peak = max(self.peak, self.sample())
            except Exception:  # noqa: BLE001
                return
            time.sleep(0.002)


class LM(nn.Module):
    def __init__(self, vocab=8192, width=512, layers=6, heads=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        n = tokens.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), diagonal=1)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def wrap(model, mode, device):
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device])
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def train(args, rank, device):
    torch.manual_seed(1234)  # the same initial weights on every rank
    model = wrap(LM().to(device), args.mode, device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device="cpu").manual_seed(99 + rank)  # each rank its own data
    losses, times = [], []
    for step in range(args.steps):
        seq = 128 * (1 + (step * 5) % 8)  # 128..1024, changing every step
        tokens = torch.randint(0, 8192, (args.batch, seq + 1), generator=gen).to(device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append((mean / dist.get_world_size()).item())
    del model, opt
    return losses, times


def allreduce_bandwidth(mib, device, reps=20):
    """Bus bandwidth (GB/s) of an all_reduce of `mib` MiB of float32 tensors
    from the allocator in use, median of `reps` after 5 warm-ups."""
    x = torch.ones(mib << 18, device=device)
    n = dist.get_world_size()
    times = []
    for i in range(reps + 5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    ok = bool(torch.all(x == float(n) ** (reps + 5)).item()) if n > 1 else True
    t = statistics.median(times)
    return 2 * (n - 1) / n * x.numel() * 4 / t / 1e9, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("ddp", "fsdp"), default="ddp")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--allreduce-mib", type=int, default=256)
    args = ap.parse_args()

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    # Deterministic mode, strict: a nondeterministic kernel raises instead
    # of making losses differ for reasons that are not the allocator's.
    # The fused attention kernels' backward passes are not deterministic:
    # attention runs on the math kernels.
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    for fused in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(torch.backends.cuda, fused):
            getattr(torch.backends.cuda, fused)(False)
    sampler = NvmlPeak(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    losses, times = train(args, rank, local)
    bw, bw_ok = allreduce_bandwidth(args.allreduce_mib, local) if args.allreduce_mib else (0.0, True)
    sampler.run = False
    mine = {"rank": rank, "nvml_peak_mib": sampler.peak / 2**20, "nvml": sampler.how,
            "max_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
            "max_allocated_mib": torch.cuda.max_memory_allocated() / 2**20}
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if rank == 0:
        print(json.dumps({
            "allocator": allocator_name(), "mode": args.mode, "world": dist.get_world_size(),
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(local),
            "losses": [float(v).hex() for v in losses],
            "step_ms_median": 1e3 * statistics.median(times[3:] or times),
            "allreduce_mib": args.allreduce_mib, "allreduce_busbw_gbps": bw, "allreduce_correct": bw_ok,
            "ranks": every}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
