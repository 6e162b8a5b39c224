#!/usr/bin/env python3
"""torch_train.py: a small transformer under one CUDA allocator, for comparing allocators.

    python3 torch_train.py --allocator native|expandable|xseg [--arch gpt2|llama|vit]
                           [--mode train|infer] [--steps N]

The model has random weights and is built from a transformers config: with
--arch gpt2 (the default) GPT2LMHeadModel (6 layers, 512 wide, 8 heads,
vocabulary 8192, 1024 positions; --layers, --width, --heads and --vocab
change it); with --arch llama LlamaForCausalLM of the same dimensions (MLP
8/3 as wide, rounded to 64; --kv-heads for grouped-query attention; in infer
mode the prefill computes the logits of the last position only, as
generate() does); with --arch vit ViTForImageClassification (16-pixel
patches, 224-pixel images, --vocab classes; train mode only, where --lengths
gives image sizes: sizes other than 224 interpolate the position embeddings,
whose backward has no deterministic CUDA kernel, so they need --warn-only).
Everything is seeded
and torch.use_deterministic_algorithms(True) is on, so two runs that differ
only in the allocator must produce bit-identical losses (train) or
generated tokens (infer).  Batch size and sequence length change every step
following a fixed seeded schedule, which gives the allocator a mix of sizes.

  train: AdamW, batch in {4, 8, 16}, sequence in {128, 256, 512, 1024}.
  infer: torch.no_grad(); per step, a prompt of 64..992 tokens (batch 1..16)
         is prefilled and 32 tokens are decoded greedily, one at a time,
         with past_key_values (use_cache=True); no model.generate().

Allocators:
  native      PyTorch's default caching allocator (PYTORCH_CUDA_ALLOC_CONF unset)
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  xseg        XSEG_ALLOC_CONF set before torch is imported, which installs xseg
              (the installed package's autoload); --xseg-conf (or the
              environment's XSEG_ALLOC_CONF) is its value.

Memory is measured from outside the allocator: a background thread polls
NVML's used memory (pynvml.nvmlDeviceGetMemoryInfo(handle).used) and
torch.cuda.mem_get_info() every millisecond; both are reported as the
increase over the value measured after CUDA initialisation and before the
model is built.  Step times are taken with torch.cuda.synchronize() on both
sides of each step; the median leaves out the first 3 (warm-up) steps.

Prints exactly one JSON line on stdout, at the end; everything else goes to
stderr.
"""

import os
import sys

# ---- environment that must be set before torch is imported ----------------


def _argv_value(flag, default):
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return default


_ALLOCATOR = _argv_value("--allocator", "native")

# cuBLAS needs a fixed workspace configuration to be deterministic.
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
# The PyTorch allocator's configuration must be in place before torch
# initialises CUDA; clear any inherited setting so each allocator runs as named.
for _name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
    os.environ.pop(_name, None)
if _ALLOCATOR == "expandable":
    # PYTORCH_ALLOC_CONF is the newer, device-generic name; older releases
    # read only PYTORCH_CUDA_ALLOC_CONF.  The same value in both is unambiguous.
    for _name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        os.environ[_name] = "expandable_segments:True"
# xseg is selected as a user selects it: XSEG_ALLOC_CONF alone, read when
# torch is imported (the installed package's autoload).
if _ALLOCATOR == "xseg":
    os.environ["XSEG_ALLOC_CONF"] = _argv_value("--xseg-conf", os.environ.get("XSEG_ALLOC_CONF", ""))
else:
    os.environ.pop("XSEG_ALLOC_CONF", None)

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402

MiB = 1 << 20

TRAIN_BATCHES = (4, 8, 16)
TRAIN_SEQS = (128, 256, 512, 1024)
INFER_BATCHES = (1, 4, 8, 16)
INFER_PROMPTS = (64, 128, 256, 384, 512, 768, 992)
VIT_BATCHES = (16, 32, 48, 64)
VIT_SIZES = (224,)
WARMUP_STEPS = 3


_ON_GPU = True  # False for --device cpu


def sync():
    """Wait for the GPU to finish everything queued (nothing to wait for on the CPU)."""
    if _ON_GPU:
        torch.cuda.synchronize()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocator", choices=("native", "expandable", "xseg"), default="native")
    p.add_argument("--arch", choices=("gpt2", "llama", "vit"), default="gpt2")
    p.add_argument("--mode", choices=("train", "infer"), default="train")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--new-tokens", type=int, default=32, help="tokens decoded per prompt in infer mode")
    p.add_argument("--attn", default="eager",
                   help="transformers attention implementation (eager is deterministic in backward)")
    p.add_argument("--xseg-conf", default=None,
                   help="XSEG_ALLOC_CONF for the xseg run (default: the environment's)")
    p.add_argument("--poll-ms", type=float, default=1.0, help="memory polling interval")
    p.add_argument("--layers", type=int, default=6, help="transformer layers (default 6)")
    p.add_argument("--width", type=int, default=512, help="hidden size (default 512)")
    p.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    p.add_argument("--vocab", type=int, default=8192,
                   help="vocabulary size (default 8192; GPT-2's is 50257), or classes for --arch vit")
    p.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads for --arch llama (default: --heads); must divide --heads")
    p.add_argument("--summary", action="store_true", help="print xseg's summary to stderr at the end")
    p.add_argument("--batches", default=None,
                   help="comma-separated batch sizes to draw from (default: 4,8,16 train; 1,4,8,16 infer)")
    p.add_argument("--lengths", default=None,
                   help="comma-separated sequence (train) or prompt (infer) lengths to draw from")
    p.add_argument("--warn-only", action="store_true",
                   help="use_deterministic_algorithms(True, warn_only=True): warn on a nondeterministic op "
                        "instead of failing (results may then differ between runs)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a logic check of this script without a GPU (no memory figures)")
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.layers < 1 or args.heads < 1 or args.vocab < 2 or args.width < 1 or args.width % args.heads:
        p.error("--layers, --heads >= 1, --vocab >= 2, and --width a positive multiple of --heads")
    if args.kv_heads is not None and (args.arch != "llama" or args.kv_heads < 1 or args.heads % args.kv_heads):
        p.error("--kv-heads is for --arch llama and must divide --heads")
    if args.arch == "vit" and args.mode != "train":
        p.error("--arch vit runs in train mode only")
    try:
        args.batches = [int(x) for x in args.batches.split(",")] if args.batches else None
        args.lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else None
    except ValueError:
        p.error("--batches and --lengths take comma-separated integers")
    if args.arch == "vit":
        args.batches = args.batches or list(VIT_BATCHES)
        args.lengths = args.lengths or list(VIT_SIZES)
        if any(n < 16 or n % 16 for n in args.lengths):
            p.error("--arch vit takes image sizes that are multiples of 16 (the patch) in --lengths")
    return args


# ---- memory measurement ----------------------------------------------------


def nvml_handle(device_index):
    """An NVML handle for the CUDA device, or (None, reason)."""
    try:
        import pynvml
    except ImportError as e:
        return None, None, "pynvml not importable: %s" % e
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVML errors are pynvml.NVMLError
        return None, None, "nvmlInit failed: %s" % e
    # Match by UUID, which is independent of CUDA_VISIBLE_DEVICES and
    # CUDA_DEVICE_ORDER; fall back to the visible-devices list, then index 0.
    want = None
    try:
        want = str(torch.cuda.get_device_properties(device_index).uuid).lower()
    except Exception:
        pass
    if want:
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                u = pynvml.nvmlDeviceGetUUID(h)
                if isinstance(u, bytes):
                    u = u.decode()
                u = u.lower()
                for prefix in ("gpu-", "mig-"):
                    if u.startswith(prefix):
                        u = u[len(prefix):]
                if u == want:
                    return pynvml, h, "matched by uuid"
        except Exception:
            pass
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    items = [v.strip() for v in vis.split(",") if v.strip()]
    try:
        if device_index < len(items) and items[device_index].isdigit():
            return pynvml, pynvml.nvmlDeviceGetHandleByIndex(int(items[device_index])), "CUDA_VISIBLE_DEVICES"
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(device_index), "index"
    except Exception as e:
        return None, None, "no NVML handle: %s" % e


class MemorySampler(threading.Thread):
    """Polls NVML used memory and cudaMemGetInfo's free memory; keeps extremes."""

    def __init__(self, pynvml, handle, device_index, interval_s):
        super().__init__(name="mem-sampler", daemon=True)
        self.pynvml = pynvml
        self.handle = handle
        self.device_index = device_index
        self.interval_s = interval_s
        self.stop_event = threading.Event()
        self.max_used = 0
        self.min_free = None
        self.nvml_samples = 0
        self.meminfo_samples = 0
        self.error = None

    def sample(self):
        if self.handle is not None:
            used = self.pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
            if used > self.max_used:
                self.max_used = used
            self.nvml_samples += 1
        free, _total = torch.cuda.mem_get_info(self.device_index)
        if self.min_free is None or free < self.min_free:
            self.min_free = free
        self.meminfo_samples += 1

    def run(self):
        try:
            while not self.stop_event.is_set():
                self.sample()
                time.sleep(self.interval_s)
        except Exception as e:  # never kill the run for a measurement
            self.error = repr(e)

    def stop(self):
        self.stop_event.set()
        self.join(timeout=10)
        try:
            self.sample()  # one last sample after the run
        except Exception:
            pass


# ---- the workloads -----------------------------------------------------------


def make_schedule(mode, steps, seed, new_tokens, n_positions, batches=None, lengths=None):
    """The (batch, length) of every step, drawn from a seeded generator."""
    rng = random.Random(seed)
    if n_positions is None:  # image sizes: nothing to fit
        pass
    elif mode == "train":
        batches = batches or TRAIN_BATCHES
        lengths = [n for n in (lengths or TRAIN_SEQS) if n <= n_positions]
    else:
        batches = batches or INFER_BATCHES
        lengths = [n for n in (lengths or INFER_PROMPTS) if n + new_tokens <= n_positions]
    if not lengths:
        raise ValueError("no usable length: at most %d positions" % n_positions)
    return [(rng.choice(batches), rng.choice(lengths)) for _ in range(steps)]


def build_model(args, transformers):
    """The model, its config, the attention implementation it runs, and the
    positions a sequence may use (None for images)."""
    if args.arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=args.vocab,
            n_positions=1024,
            n_embd=args.width,
            n_layer=args.layers,
            n_head=args.heads,
            bos_token_id=args.vocab - 1,
            eos_token_id=args.vocab - 1,
            attn_implementation=args.attn,
        )
        cls, positions = transformers.GPT2LMHeadModel, config.n_positions
    elif args.arch == "llama":
        config = transformers.LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.width,
            intermediate_size=max(64, round(args.width * 8 / 3 / 64) * 64),
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads or args.heads,
            max_position_embeddings=1024,
            bos_token_id=args.vocab - 1,
            eos_token_id=args.vocab - 1,
            tie_word_embeddings=False,
            attn_implementation=args.attn,
        )
        cls, positions = transformers.LlamaForCausalLM, config.max_position_embeddings
    else:
        config = transformers.ViTConfig(
            image_size=224,
            patch_size=16,
            hidden_size=args.width,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            intermediate_size=4 * args.width,
            num_labels=args.vocab,
            attn_implementation=args.attn,
        )
        cls, positions = transformers.ViTForImageClassification, None
    torch.manual_seed(args.seed)
    model = cls(config)
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != args.attn and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(args.attn)
        impl = getattr(model.config, "_attn_implementation", None)
    return model, config, impl, positions


def train_inputs(args, config, gen, batch, length, device):
    """One training step's inputs: token ids that are also the labels, or
    images of length x length pixels and a class each."""
    if args.arch == "vit":
        pixels = torch.randn((batch, 3, length, length), generator=gen).to(device)
        labels = torch.randint(0, config.num_labels, (batch,), generator=gen).to(device)
        return {"pixel_values": pixels, "labels": labels,
                "interpolate_pos_encoding": length != config.image_size}
    x = torch.randint(0, config.vocab_size, (batch, length), generator=gen, dtype=torch.long).to(device)
    return {"input_ids": x, "labels": x}


def token_checksum(tokens):
    """Position-weighted sum of token ids, exact in Python ints."""
    flat = tokens.reshape(-1).tolist()
    return sum((i + 1) * int(t) for i, t in enumerate(flat)) % (1 << 61)


_XSEG_COUNTERS = ("allocation", "num_device_alloc", "num_device_free", "num_map", "num_unmap",
                  "num_conversions", "num_fence_waits", "num_alloc_retries", "time_create_ns",
                  "time_map_ns", "time_unmap_ns", "time_set_access_ns", "time_release_ns")


def xseg_counters(args):
    """xseg's cumulative counters (None unless the allocator is xseg)."""
    if args.allocator != "xseg":
        return None
    import xseg
    s = xseg.stats(0)
    out = {}
    for k in _XSEG_COUNTERS:
        v = s.get(k)
        out[k] = v["all"]["allocated"] if isinstance(v, dict) else v
    return out


STEP_COUNTERS = []  # per step: deltas of xseg's counters across the step


def note_step(args, before):
    after = xseg_counters(args)
    if after is not None and before is not None:
        STEP_COUNTERS.append({k: after[k] - before[k] for k in after})


def run_train(model, schedule, args, device, config):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=True)
    model.train()
    gen = torch.Generator(device="cpu")
    losses, times = [], []
    for step, (batch, seq) in enumerate(schedule):
        gen.manual_seed(args.seed * 1000003 + step)
        x = train_inputs(args, config, gen, batch, seq, device)
        sync()
        before = xseg_counters(args)
        t0 = time.perf_counter()
        out = model(**x)
        loss = out.loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t1 = time.perf_counter()
        losses.append(float(loss.detach().item()))
        times.append((t1 - t0) * 1000.0)
        del out, loss, x
        note_step(args, before)
        log("train step %d batch %d length %d loss %.6f %.1f ms" % (step, batch, seq, losses[-1], times[-1]))
    return {"losses": losses}, times, opt


def run_infer(model, schedule, args, device, config):
    vocab = config.vocab_size
    # A llama prefill computes the logits of the last position only, as
    # generate() does; the GPT-2 traces were recorded with all of them.
    prefill = {"logits_to_keep": 1} if args.arch == "llama" else {}
    model.eval()
    gen = torch.Generator(device="cpu")
    checksums, times = [], []
    with torch.no_grad():
        for step, (batch, prompt_len) in enumerate(schedule):
            gen.manual_seed(args.seed * 1000003 + step)
            p_cpu = torch.randint(0, vocab, (batch, prompt_len), generator=gen, dtype=torch.long)
            prompt = p_cpu.to(device)
            sync()
            before = xseg_counters(args)
            t0 = time.perf_counter()
            out = model(input_ids=prompt, use_cache=True, **prefill)
            past = out.past_key_values
            nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            generated = [nxt]
            del out
            for _ in range(args.new_tokens - 1):
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                generated.append(nxt)
                del out
            tokens = torch.cat(generated, dim=1)
            sync()
            t1 = time.perf_counter()
            checksums.append(token_checksum(tokens.cpu()))
            times.append((t1 - t0) * 1000.0)
            del past, nxt, generated, tokens, prompt
            note_step(args, before)
            log("infer step %d batch %d prompt %d checksum %d %.1f ms"
                % (step, batch, prompt_len, checksums[-1], times[-1]))
    return {"checksums": checksums}, times, None


# ---- allocator statistics ------------------------------------------------------


def xseg_report(device_index, errors):
    import xseg

    rep = {"library": xseg.library_path(), "version": xseg.version()}
    try:
        s = xseg.stats(device_index)
        rep["allocated_bytes_peak"] = s["allocated_bytes"]["all"]["peak"]
        rep["reserved_bytes_peak"] = s["reserved_bytes"]["all"]["peak"]
        rep["allocated_bytes_current"] = s["allocated_bytes"]["all"]["current"]
        rep["num_ooms"] = s.get("num_ooms")
        rep["num_alloc_retries"] = s.get("num_alloc_retries")
        for key in ("mapped_bytes", "held_bytes", "reserved_address_bytes", "handles_live", "handles_cached"):
            if isinstance(s.get(key), dict):
                rep[key + "_peak"] = s[key].get("peak")
        for key in ("num_device_alloc", "num_device_free", "num_map", "num_unmap", "num_set_access",
                    "time_create_ns", "time_release_ns", "time_map_ns", "time_unmap_ns",
                    "time_set_access_ns", "remapped_bytes", "num_remaps", "num_conversions",
                    "external_fragmentation", "utilization", "rounding_waste_bytes", "mode", "granularity"):
            if key in s:
                rep[key] = s[key]
    except Exception as e:
        errors.append("xseg.stats: %r" % (e,))
    try:
        rep["check_heap"] = bool(xseg.check_heap())
        rep["check_heap_error"] = None
    except Exception as e:
        rep["check_heap"] = False
        rep["check_heap_error"] = str(e)
    return rep


def torch_allocator_report(device_index):
    rep = {}
    try:
        st = torch.cuda.memory_stats(device_index)
        rep["allocated_bytes_peak"] = st.get("allocated_bytes.all.peak")
        rep["reserved_bytes_peak"] = st.get("reserved_bytes.all.peak")
        rep["num_ooms"] = st.get("num_ooms")
        rep["num_alloc_retries"] = st.get("num_alloc_retries")
        rep["num_device_alloc"] = st.get("num_device_alloc")
        rep["num_device_free"] = st.get("num_device_free")
    except Exception as e:
        rep["error"] = repr(e)
    try:
        segs = torch.cuda.memory_snapshot()
        rep["segments"] = len(segs)
        rep["expandable_segments_in_use"] = any(bool(s.get("is_expandable")) for s in segs)
    except Exception as e:
        rep["snapshot_error"] = repr(e)
    return rep


# ---- main ----------------------------------------------------------------------


def main():
    args = parse_args()
    result = {"allocator": args.allocator, "arch": args.arch, "mode": args.mode, "steps": args.steps, "seed": args.seed}
    errors = []
    wall0 = time.perf_counter()

    backend = torch.cuda.get_allocator_backend()
    if backend != ("xseg" if args.allocator == "xseg" else "native"):
        raise SystemExit("torch_train.py: asked for %s, torch runs %s" % (args.allocator, backend))
    if args.allocator == "xseg":
        result["xseg_conf"] = os.environ.get("XSEG_ALLOC_CONF", "")

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("torch_train.py: CUDA is not available")

    import transformers  # after enable(): nothing of transformers may touch CUDA first

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=args.warn_only)
    torch.backends.cudnn.benchmark = False  # (TF32 for matmul is off by default)
    sys.setswitchinterval(0.0005)  # let the sampler thread in often

    device_index = 0
    used0 = free0 = total = None
    sampler = None
    if cuda:
        torch.cuda.set_device(device_index)
        device = torch.device("cuda", device_index)
        torch.cuda.mem_get_info(device_index)  # creates the context, so the baseline includes it
        pynvml, handle, how = nvml_handle(device_index)
        result["nvml"] = how
        torch.cuda.synchronize()
        used0 = pynvml.nvmlDeviceGetMemoryInfo(handle).used if handle is not None else None
        free0, total = torch.cuda.mem_get_info(device_index)
        sampler = MemorySampler(pynvml, handle, device_index, args.poll_ms / 1000.0)
        sampler.start()
    else:
        global _ON_GPU
        _ON_GPU = False
        device = torch.device("cpu")

    model, config, impl, positions = build_model(args, transformers)
    model.to(device)
    schedule = make_schedule(args.mode, args.steps, args.seed, args.new_tokens, positions,
                             args.batches, args.lengths)
    if args.mode == "train":
        values, times, keep = run_train(model, schedule, args, device, config)
    else:
        values, times, keep = run_infer(model, schedule, args, device, config)
    sync()
    if sampler is not None:
        sampler.stop()

    result.update(values)
    result["schedule"] = schedule
    result["step_ms"] = [round(t, 3) for t in times]
    measured = times[WARMUP_STEPS:] if len(times) > WARMUP_STEPS else times
    result["median_step_ms"] = statistics.median(measured)
    result["mean_step_ms"] = statistics.fmean(measured)
    result["total_step_ms"] = sum(times)

    result["baseline_driver_used_mib"] = used0 / MiB if used0 is not None else None
    if used0 is not None and sampler is not None and sampler.nvml_samples:
        peak = max(sampler.max_used - used0, 0)
        result["peak_driver_bytes"] = peak
        result["peak_driver_mib"] = peak / MiB
    else:
        result["peak_driver_bytes"] = None
        result["peak_driver_mib"] = None
    if sampler is not None and sampler.min_free is not None:
        peak = max(free0 - sampler.min_free, 0)
        result["peak_meminfo_bytes"] = peak
        result["peak_meminfo_mib"] = peak / MiB
    else:
        result["peak_meminfo_bytes"] = None
        result["peak_meminfo_mib"] = None
    result["nvml_samples"] = sampler.nvml_samples if sampler else 0
    result["meminfo_samples"] = sampler.meminfo_samples if sampler else 0
    result["sampler_error"] = sampler.error if sampler else None
    result["device_total_mib"] = total / MiB if total else None

    if args.allocator == "xseg":
        import xseg

        result["xseg"] = xseg_report(device_index, errors)
        result["xseg"]["steps"] = STEP_COUNTERS
        steady = STEP_COUNTERS[3:]
        if steady:
            # What the steps after warm-up cost in allocations and driver work.
            result["xseg"]["steady"] = {k: sum(c[k] for c in steady) / len(steady) for k in steady[0]}
            log("xseg per steady step: " + ", ".join("%s %.1f" % kv for kv in result["xseg"]["steady"].items()))
        if args.summary:
            log(xseg.summary(device_index))
    elif cuda:
        result["torch_allocator"] = torch_allocator_report(device_index)

    # Free everything the run made and check the heap once more.
    del model, keep
    import gc

    gc.collect()
    sync()
    if args.allocator == "xseg":
        import xseg

        try:
            result["xseg"]["check_heap_after_free"] = bool(xseg.check_heap())
            result["xseg"]["allocated_bytes_after_free"] = xseg.stats(device_index)["allocated_bytes"]["all"]["current"]
        except Exception as e:
            result["xseg"]["check_heap_after_free"] = False
            result["xseg"]["check_heap_after_free_error"] = str(e)

    result["attn_implementation"] = impl
    result["device_name"] = torch.cuda.get_device_name(device_index) if cuda else "cpu"
    result["torch_version"] = torch.__version__
    result["transformers_version"] = getattr(transformers, "__version__", None)
    result["cuda_version"] = torch.version.cuda
    result["deterministic"] = torch.are_deterministic_algorithms_enabled()
    result["deterministic_warn_only"] = args.warn_only
    result["errors"] = errors
    result["wall_s"] = time.perf_counter() - wall0
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException as e:
        traceback.print_exc()
        print(json.dumps({"allocator": _ALLOCATOR, "mode": _argv_value("--mode", "train"),
                          "error": "%s: %s" % (type(e).__name__, e)}), flush=True)
        sys.exit(1)
