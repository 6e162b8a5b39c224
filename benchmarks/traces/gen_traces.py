#!/usr/bin/env python3
"""Synthetic allocation traces for xseg's trace-replay benchmark.

Writes one `<family>.trace` per workload family into this folder (or --out),
and with --check verifies traces and prints a summary table.

Trace format (one event a line, see README.md):
    a <id> <bytes> [stream]     allocate <bytes> bytes under integer <id>
    f <id> [stream]             free the live allocation <id>
    # ...                       comment
The stream field is omitted for the default stream (0); a free repeats the
stream its allocation was made on.

Standard library only. Every family draws from its own random.Random(seed)
with a fixed seed, so two runs write byte-identical files.

    python3 benchmarks/traces/gen_traces.py                 # write all traces
    python3 benchmarks/traces/gen_traces.py --only training # write one family
    python3 benchmarks/traces/gen_traces.py --check         # check *.trace here
    python3 benchmarks/traces/gen_traces.py --check a.trace b.trace
    python3 benchmarks/traces/gen_traces.py --import run.trace NAME --param "model: ..."

--import takes a trace that xseg recorded (trace_file) and writes it here as
NAME.trace with the same header as the generated ones (the recorded traces
and how they were made: README.md).
"""

import argparse
import glob
import math
import os
import random
import sys
import time

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

HERE = os.path.dirname(os.path.abspath(__file__))

# Limits the replay benchmark expects of a trace (checked as warnings).
MIN_EVENTS, MAX_EVENTS = 2000, 100000
MIN_PEAK, MAX_PEAK = 128 * MiB, 64 * GiB
MAX_FILE_BYTES = 2 * 1000 * 1000


# ---------------------------------------------------------------------------
# Trace builder
# ---------------------------------------------------------------------------

class Trace:
    """Accumulates events, tracks live bytes, and writes the file."""

    def __init__(self, family, seed, params):
        self.family = family
        self.seed = seed
        self.params = params            # list of (key, value), kept in order
        self.lines = []
        self.live = {}                  # id -> (bytes, stream)
        self.next_id = 1
        self.live_bytes = 0
        self.peak = 0
        self.n_alloc = 0
        self.n_free = 0

    def alloc(self, nbytes, stream=0):
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ValueError("%s: non-positive allocation %d" % (self.family, nbytes))
        i = self.next_id
        self.next_id += 1
        self.live[i] = (nbytes, stream)
        self.live_bytes += nbytes
        if self.live_bytes > self.peak:
            self.peak = self.live_bytes
        self.n_alloc += 1
        if stream:
            self.lines.append("a %d %d %d" % (i, nbytes, stream))
        else:
            self.lines.append("a %d %d" % (i, nbytes))
        return i

    def free(self, i):
        nbytes, stream = self.live.pop(i)   # KeyError = generator bug
        self.live_bytes -= nbytes
        self.n_free += 1
        if stream:
            self.lines.append("f %d %d" % (i, stream))
        else:
            self.lines.append("f %d" % i)

    def free_all(self, ids):
        for i in ids:
            self.free(i)

    def events(self):
        return self.n_alloc + self.n_free

    def write(self, path):
        hdr = [
            "# xseg allocation trace",
            "# format: 'a <id> <bytes> [stream]' allocates, 'f <id> [stream]' frees;"
            " no stream field = stream 0",
            "# family: %s" % self.family,
            "# seed: %d" % self.seed,
        ] + ["# param %s: %s" % kv for kv in self.params] + [
            "# events: %d (allocs %d, frees %d)" % (self.events(), self.n_alloc, self.n_free),
            "# peak_live_bytes: %d (%.3f GiB)" % (self.peak, self.peak / GiB),
            "# live_at_end: %d blocks, %d bytes" % (len(self.live), self.live_bytes),
        ]
        with open(path, "w", newline="\n") as fh:
            fh.write("\n".join(hdr + self.lines))
            fh.write("\n")


class LiveSet:
    """Live ids with O(1) insert and O(1) removal of a uniformly random one."""

    def __init__(self):
        self.ids = []
        self.pos = {}

    def __len__(self):
        return len(self.ids)

    def add(self, i):
        self.pos[i] = len(self.ids)
        self.ids.append(i)

    def remove(self, i):
        p = self.pos.pop(i)
        last = self.ids.pop()
        if last != i:
            self.ids[p] = last
            self.pos[last] = p

    def pop_random(self, rng):
        i = self.ids[rng.randrange(len(self.ids))]
        self.remove(i)
        return i


def log_uniform(rng, lo, hi):
    """A float drawn log-uniformly from [lo, hi]."""
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def elems(nbytes, esize):
    """Round a byte count to a whole number (>= 1) of esize-byte elements."""
    return max(1, int(round(nbytes / esize))) * esize


def round_up(x, m):
    return -(-x // m) * m


def poisson(rng, lam):
    """Poisson variate (Knuth's method; lam is small here)."""
    limit = math.exp(-lam)
    k, p = 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


# ---------------------------------------------------------------------------
# logrand: log-uniform sizes, random allocate/free around a live-byte target
# ---------------------------------------------------------------------------

def gen_logrand(path):
    seed = 1001
    rng = random.Random(seed)
    steps = 40000
    lo, hi = 1 * KiB, 256 * MiB
    target = 3 * GiB            # live bytes the random walk is pulled toward
    cap = 5 * GiB               # hard ceiling: never allocate past it
    esizes = (1, 2, 2, 4, 4, 4, 8)
    tr = Trace("logrand", seed, [
        ("steps", steps), ("size", "log-uniform[1KiB,256MiB], rounded to whole 1/2/4/8-byte elements"),
        ("target_live", "3GiB"), ("cap_live", "5GiB"),
        ("p_alloc", "0.5+0.25*(1-live/target) clamped to [0.25,0.75]"),
        ("end", "free all"),
    ])
    live = LiveSet()
    for _ in range(steps):
        size = elems(log_uniform(rng, lo, hi), rng.choice(esizes))
        p_alloc = 0.5 + 0.25 * (1.0 - tr.live_bytes / target)
        p_alloc = min(0.75, max(0.25, p_alloc))
        do_alloc = (len(live) == 0 or
                    (rng.random() < p_alloc and tr.live_bytes + size <= cap))
        if do_alloc:
            live.add(tr.alloc(size))
        else:
            tr.free(live.pop_random(rng))
    while len(live):
        tr.free(live.pop_random(rng))
    tr.write(path)
    return tr


# ---------------------------------------------------------------------------
# rmm_uniform: RMM's random_allocations benchmark, uniform sizes
# ---------------------------------------------------------------------------

def gen_rmm_uniform(path):
    seed = 2002
    rng = random.Random(seed)
    num_allocations = 12000
    max_size = 256 * MiB
    max_usage = 8192 * MiB
    alloc_percent = 73
    tr = Trace("rmm_uniform", seed, [
        ("num_allocations", num_allocations), ("size", "uniform[1B,256MiB]"),
        ("max_usage", "8192MiB"), ("p_alloc", "0.73"),
        ("steps", "2*num_allocations"), ("end", "free all"),
    ])
    live = LiveSet()
    count = 0
    for _ in range(2 * num_allocations):
        size = rng.randint(1, max_size)
        do_alloc = True
        if len(live) > 0:
            chance = rng.randrange(100)
            do_alloc = (chance < alloc_percent and count < num_allocations and
                        tr.live_bytes + size < max_usage)
        if do_alloc:
            live.add(tr.alloc(size))
            count += 1
        elif len(live):
            tr.free(live.pop_random(rng))
    while len(live):
        tr.free(live.pop_random(rng))
    tr.write(path)
    return tr


# ---------------------------------------------------------------------------
# llm_serving: LLM inference with growing per-request KV caches
# ---------------------------------------------------------------------------

def gen_llm_serving(path):
    seed = 3003
    rng = random.Random(seed)
    # Model: 32 layers, hidden 4096, 32 query heads, 8 KV heads of 128, FFN
    # 14336, vocabulary 128256, bf16 (a Llama-3-8B-like configuration).
    layers, hidden, kv_heads, head_dim = 32, 4096, 8, 128
    q_dim = 4096
    ffn, vocab, bf16, f32 = 14336, 128256, 2, 4
    kv_per_token = layers * 2 * kv_heads * head_dim * bf16     # 131072 B
    steps = 2600
    period = 900                  # steps per load cycle
    peak_rate = 0.12              # arrivals per step at the top of a cycle
    max_seqs = 48                 # running requests at most
    max_prefill_tokens = 8192     # prompt tokens per prefill step at most
    kv_budget = 10 * GiB          # admission: sum of KV capacities at most
    gran = 16                     # KV capacity is a multiple of 16 tokens
    growth = 1.5
    tr = Trace("llm_serving", seed, [
        ("model", "L32-h4096-kv8x128-ffn14336-V128256-bf16"),
        ("kv_bytes_per_token", kv_per_token), ("steps", steps),
        ("arrivals", "Poisson, rate %.2f*(0.1+0.9*(1-cos(2pi*t/%d))/2)" % (peak_rate, period)),
        ("prompt", "log-uniform[16,4096] tokens"), ("gen", "log-uniform[8,2048] tokens"),
        ("kv_capacity", "roundup(prompt+32,16) tokens, grows x1.5 (rounded up to 16 tokens)"
         " by alloc-new+free-old"),
        ("max_seqs", max_seqs), ("max_prefill_tokens", max_prefill_tokens),
        ("kv_budget", "10GiB of KV capacity for admission (growth may exceed it)"), ("end", "running requests freed; persistent buffers live"),
    ])

    # Persistent buffers (model weights are loaded outside the traced pool).
    tr.alloc(8192 * (head_dim // 2) * f32)          # rotary cos table
    tr.alloc(8192 * (head_dim // 2) * f32)          # rotary sin table
    tr.alloc(max_seqs * vocab * f32)                # sampling scratch (penalties)
    tr.alloc(max_seqs * 8)                          # per-slot seeds (int64)

    waiting = []                  # (prompt, gen)
    running = []                  # dicts, admission order
    kv_reserved = 0

    def kv_cap(tokens):
        return round_up(tokens, gran)

    def layer_transients(T, prefill):
        """One decoder layer's activations for T tokens, freed in the step."""
        h = tr.alloc(T * hidden * bf16)                     # hidden state
        x = tr.alloc(T * hidden * bf16)                     # rmsnorm out
        qkv = tr.alloc(T * (q_dim + 2 * kv_heads * head_dim) * bf16)
        tr.free(x)
        att = tr.alloc(T * q_dim * bf16)
        if prefill:
            lse = tr.alloc(T * 32 * f32)                    # softmax stats
            tr.free(lse)
        tr.free(qkv)
        o = tr.alloc(T * hidden * bf16)
        tr.free(att)
        if prefill:                                          # full MLP tensors
            gu = tr.alloc(T * 2 * ffn * bf16)
            act = tr.alloc(T * ffn * bf16)
            tr.free(gu)
            down = tr.alloc(T * hidden * bf16)
            tr.free(act)
            tr.free(down)
        else:                                                # fused MLP
            gu = tr.alloc(T * 2 * ffn * bf16)
            tr.free(gu)
        tr.free(o)
        return h

    def sample(n, h):
        logits = tr.alloc(n * vocab * f32)
        tr.free(h)
        ids = tr.alloc(n * 8)
        tr.free(logits)
        tr.free(ids)

    for t in range(steps):
        rate = peak_rate * (0.1 + 0.9 * (1.0 - math.cos(2.0 * math.pi * t / period)) / 2.0)
        for _ in range(poisson(rng, rate)):
            prompt = int(log_uniform(rng, 16, 4096))
            gen = int(log_uniform(rng, 8, 2048))
            waiting.append((prompt, gen))

        admitted = []
        tokens = 0
        while waiting and len(running) + len(admitted) < max_seqs:
            prompt, gen = waiting[0]
            cap = kv_cap(prompt + 32)
            if tokens + prompt > max_prefill_tokens:
                break
            if kv_reserved + cap * kv_per_token > kv_budget:
                break
            waiting.pop(0)
            kv_reserved += cap * kv_per_token
            tokens += prompt
            admitted.append({"prompt": prompt, "gen": gen, "cap": cap, "len": prompt,
                             "kv": None})

        if admitted:
            # Prefill step: KV blocks for the new requests, then one pass
            # over all prompt tokens; logits only for each last token.
            for r in admitted:
                r["kv"] = tr.alloc(r["cap"] * kv_per_token)
            h = layer_transients(tokens, prefill=True)
            sample(len(admitted), h)
            for r in admitted:
                r["gen"] -= 1
            running.extend(admitted)
        elif running:
            # Decode step: every running request appends one token.
            for r in running:
                r["len"] += 1
                if r["len"] > r["cap"]:
                    new_cap = kv_cap(int(math.ceil(r["cap"] * growth)))
                    new = tr.alloc(new_cap * kv_per_token)
                    tr.free(r["kv"])
                    kv_reserved += (new_cap - r["cap"]) * kv_per_token
                    r["kv"], r["cap"] = new, new_cap
            h = layer_transients(len(running), prefill=False)
            sample(len(running), h)
            for r in running:
                r["gen"] -= 1

        still = []
        for r in running:
            if r["gen"] <= 0:
                tr.free(r["kv"])
                kv_reserved -= r["cap"] * kv_per_token
            else:
                still.append(r)
        running = still

    for r in running:                 # shutdown: abort what is still running
        tr.free(r["kv"])
    tr.write(path)
    return tr


# ---------------------------------------------------------------------------
# grow_then_split: large growing blocks, then many small ones, then large again
# ---------------------------------------------------------------------------

def gen_grow_then_split(path):
    seed = 4004
    rng = random.Random(seed)
    rounds = 6
    row = 6144 * 2                # bf16 rows of 6144 columns
    grow_steps = 17               # 64 MiB .. 1 GiB, x2^(1/4) each step
    split_total = 4 * GiB         # bytes of small blocks allocated per round
    n_large = 3                   # large blocks asked for after the split
    keep_frac = 0.1               # small blocks that survive into the next round
    tr = Trace("grow_then_split", seed, [
        ("rounds", rounds),
        ("phase1", "17 blocks 64MiB..1GiB (x2^(1/4), rows of 6144 bf16), each allocated"
         " before the previous is freed"),
        ("phase2", "small blocks to 4GiB: 50% log-uniform[512B,1MiB], 40% [1,16]MiB,"
         " 10% [16,128]MiB; free a random half"),
        ("phase3", "3 blocks log-uniform[384MiB,1GiB]"),
        ("carry", "10% of small blocks live into the next round"),
        ("end", "free all"),
    ])
    survivors = []
    for _ in range(rounds):
        # Phase 1: a buffer that grows by reallocation.
        prev = None
        for k in range(grow_steps):
            target = 64 * MiB * 2 ** (k / 4.0)
            rows = int(target / row) + rng.randrange(-8, 9)
            cur = tr.alloc(rows * row)
            if prev is not None:
                tr.free(prev)
            prev = cur
        tr.free(prev)

        # Phase 2: many smaller blocks of mixed sizes; free a random half.
        small = []
        total = 0
        while total < split_total:
            u = rng.random()
            if u < 0.5:
                size = elems(log_uniform(rng, 512, 1 * MiB), rng.choice((2, 4)))
            elif u < 0.9:
                size = elems(log_uniform(rng, 1 * MiB, 16 * MiB), rng.choice((2, 4)))
            else:
                size = elems(log_uniform(rng, 16 * MiB, 128 * MiB), rng.choice((2, 4)))
            small.append(tr.alloc(size))
            total += size
        rng.shuffle(small)
        half = len(small) // 2
        for i in small[:half]:
            tr.free(i)
        small = small[half:]

        # Phase 3: large blocks again.
        large = []
        for _ in range(n_large):
            rows = int(log_uniform(rng, 384 * MiB, 1 * GiB) / row)
            large.append(tr.alloc(rows * row))

        # Round end: old survivors go, some of this round's small blocks stay.
        rng.shuffle(small)
        keep = int(len(small) * keep_frac)
        tr.free_all(survivors)
        tr.free_all(large)
        tr.free_all(small[keep:])
        survivors = small[:keep]
    tr.free_all(survivors)
    tr.write(path)
    return tr


# ---------------------------------------------------------------------------
# training / mixed_streams: transformer training steps with varying shapes
# ---------------------------------------------------------------------------

class TrainConfig:
    def __init__(self, layers, hidden, heads, ffn, vocab, max_tokens, steps,
                 fsdp_world=0):
        self.L = layers
        self.h = hidden
        self.nh = heads
        self.f = ffn
        self.V = vocab
        self.max_tokens = max_tokens
        self.steps = steps
        self.world = fsdp_world       # 0: plain data parallel replica

    def layer_params(self):
        h, f = self.h, self.f
        return [("ln1.w", h), ("ln1.b", h), ("qkv.w", 3 * h * h), ("qkv.b", 3 * h),
                ("proj.w", h * h), ("proj.b", h), ("ln2.w", h), ("ln2.b", h),
                ("fc1.w", f * h), ("fc1.b", f), ("fc2.w", h * f), ("fc2.b", h)]

    def top_params(self):
        # token embedding, tied with the LM head; final layer norm
        return [("emb.w", self.V * self.h), ("lnf.w", self.h), ("lnf.b", self.h)]


def run_training(tr, rng, cfg):
    """A transformer trained under bf16 autocast, fp32 master weights and AdamW.

    Plain mode (world == 0): every parameter is a separate fp32 tensor with an
    fp32 gradient and two AdamW moments, all allocated up front and never
    freed; autocast makes bf16 copies of the weights in the forward pass that
    live until that layer's backward.

    FSDP mode (world > 0): the persistent state is a 1/world shard per unit
    (one unit per layer, one for embedding + final norm); stream 1 carries
    the parameter all-gathers (prefetched one unit ahead, freed after use),
    the gradient reduce-scatters and the prefetch of the next batch.
    """
    L, h, nh, f, V = cfg.L, cfg.h, cfg.nh, cfg.f, cfg.V
    bf16, f32, i64 = 2, 4, 8
    fsdp = cfg.world > 0
    W = cfg.world
    comm = 1 if fsdp else 0          # stream of comm and data prefetch

    layer_p = cfg.layer_params()
    top_p = cfg.top_params()
    unit_numel = [sum(n for _, n in layer_p)] * L + [sum(n for _, n in top_p)]

    # --- persistent state ---------------------------------------------------
    if not fsdp:
        all_p = [n for _ in range(L) for _, n in layer_p] + [n for _, n in top_p]
        for n in all_p:
            tr.alloc(n * f32)             # parameter
        for n in all_p:
            tr.alloc(n * f32)             # .grad (kept: zero_grad(set_to_none=False))
        for n in all_p:
            tr.alloc(n * f32)             # exp_avg
            tr.alloc(n * f32)             # exp_avg_sq
        for _ in all_p:
            tr.alloc(f32)                 # step (fused AdamW keeps it on device)
        n_grad_tensors = len(all_p)
    else:
        for n in unit_numel:
            shard = -(-n // W)
            tr.alloc(shard * f32)         # sharded fp32 parameters
            tr.alloc(shard * f32)         # sharded fp32 gradient
            tr.alloc(shard * f32)         # exp_avg shard
            tr.alloc(shard * f32)         # exp_avg_sq shard
            tr.alloc(f32)                 # step
        n_grad_tensors = len(unit_numel)

    shapes = [(b, s) for b in (4, 8, 12, 16, 24, 32) for s in (128, 256, 384, 512, 768, 1024, 1536, 2048)
              if b * s <= cfg.max_tokens and b * s >= 1024]

    # --- FSDP helpers ---------------------------------------------------------
    gathered = {}                         # unit -> id of the unsharded bf16 params
    pending_rs = []                       # reduce-scatter buffers awaiting completion

    def gather(u):
        if not fsdp or u < 0 or u > L or u in gathered:
            return
        shard = -(-unit_numel[u] // W)
        src = tr.alloc(shard * bf16, comm)          # bf16 cast of the local shard
        gathered[u] = tr.alloc(shard * W * bf16, comm)
        tr.free(src)

    def release(u):
        if fsdp:
            tr.free(gathered.pop(u))

    def reduce_scatter(u, grad_ids):
        """Unit u's unsharded bf16 grads -> reduce-scatter -> fp32 shard grad."""
        shard = -(-unit_numel[u] // W)
        rs_in = tr.alloc(shard * W * bf16, comm)
        tr.free_all(grad_ids)
        rs_out = tr.alloc(shard * bf16, comm)
        while pending_rs:                           # the previous one completed
            tr.free(pending_rs.pop(0))
        pending_rs.extend([rs_in, rs_out])

    def finish_reduce_scatter():
        while pending_rs:
            tr.free(pending_rs.pop(0))

    # --- weights as used in forward / backward ------------------------------
    def weight_fwd(numel):
        """bf16 copy made by autocast (plain mode); kept for backward."""
        if fsdp:
            return []                                   # a view of the gathered unit
        return [tr.alloc(numel * bf16)]

    def weight_grad(numel, unit_grads):
        """Gradient of one weight from the backward pass."""
        if fsdp:
            unit_grads.append(tr.alloc(numel * bf16))   # kept until the unit's reduce-scatter
        else:
            g16 = tr.alloc(numel * bf16)                # matmul output
            g32 = tr.alloc(numel * f32)                 # cast back to fp32, then
            tr.free(g16)                                # accumulated into .grad
            tr.free(g32)

    # --- one step ---------------------------------------------------------------
    next_batch = next_shape = None
    for step in range(cfg.steps):
        if next_batch is not None:
            (B, S), batch = next_shape, next_batch
        else:
            B, S = rng.choice(shapes)
            batch = (tr.alloc(B * S * i64, comm), tr.alloc(B * S * i64, comm))
        T = B * S
        next_batch = next_shape = None
        if fsdp and step + 1 < cfg.steps:
            # prefetch the next batch (input ids, labels) on the side stream
            next_shape = rng.choice(shapes)
            n = next_shape[0] * next_shape[1]
            next_batch = (tr.alloc(n * i64, comm), tr.alloc(n * i64, comm))

        # forward ----------------------------------------------------------------
        gather(L)                                       # embedding unit
        gather(0)
        x = tr.alloc(T * h * f32)                       # embedding output (fp32)
        saved = []                                      # per layer: dict of ids
        for l in range(L):
            gather(l + 1)                               # prefetch next unit
            s = {"x_in": x}
            o32 = tr.alloc(T * h * f32)                 # layernorm 1 output
            s["ln1_stats"] = [tr.alloc(T * f32), tr.alloc(T * f32)]   # mean, rstd
            s["x16a"] = tr.alloc(T * h * bf16)          # autocast to bf16
            tr.free(o32)
            s["w_qkv"] = weight_fwd(3 * h * h) + weight_fwd(3 * h)
            s["qkv"] = tr.alloc(T * 3 * h * bf16)
            s["attn"] = tr.alloc(T * h * bf16)          # flash attention output
            s["lse"] = tr.alloc(B * nh * S * f32)       # log-sum-exp
            s["rng"] = tr.alloc(2 * i64)                # dropout seed/offset
            s["w_proj"] = weight_fwd(h * h) + weight_fwd(h)
            p = tr.alloc(T * h * bf16)
            s["mask1"] = tr.alloc(T * h)                # dropout mask (bool)
            d = tr.alloc(T * h * bf16)
            tr.free(p)
            x1 = tr.alloc(T * h * f32)                  # residual add
            tr.free(d)
            s["x_mid"] = x1
            o32 = tr.alloc(T * h * f32)                 # layernorm 2 output
            s["ln2_stats"] = [tr.alloc(T * f32), tr.alloc(T * f32)]
            s["x16b"] = tr.alloc(T * h * bf16)
            tr.free(o32)
            s["w_fc1"] = weight_fwd(f * h) + weight_fwd(f)
            s["fc1"] = tr.alloc(T * f * bf16)
            s["gelu"] = tr.alloc(T * f * bf16)
            s["w_fc2"] = weight_fwd(h * f) + weight_fwd(h)
            p = tr.alloc(T * h * bf16)
            s["mask2"] = tr.alloc(T * h)
            d = tr.alloc(T * h * bf16)
            tr.free(p)
            x = tr.alloc(T * h * f32)
            tr.free(d)
            saved.append(s)
            if fsdp:
                release(l)
        # head: final norm, tied LM head, cross entropy in fp32
        o32 = tr.alloc(T * h * f32)
        lnf_stats = [tr.alloc(T * f32), tr.alloc(T * f32)]
        xf16 = tr.alloc(T * h * bf16)
        tr.free(o32)
        w_head = weight_fwd(V * h)
        logits16 = tr.alloc(T * V * bf16)
        logits32 = tr.alloc(T * V * f32)
        tr.free(logits16)
        logsm = tr.alloc(T * V * f32)
        tr.free(logits32)
        nll = tr.alloc(T * f32)                         # per-token loss
        loss = tr.alloc(f32)
        total_w = tr.alloc(f32)
        tr.free(nll)

        # backward ---------------------------------------------------------------
        unit_grads = []
        g_loss = tr.alloc(f32)
        g_logsm = tr.alloc(T * V * f32)
        tr.free(g_loss)
        g32 = tr.alloc(T * V * f32)                     # log_softmax backward
        tr.free(g_logsm)
        tr.free(logsm)
        g16 = tr.alloc(T * V * bf16)                    # cast backward
        tr.free(g32)
        gx16 = tr.alloc(T * h * bf16)                   # LM head: grad input
        weight_grad(V * h, unit_grads)                  # LM head: grad weight
        tr.free(g16)
        tr.free_all(w_head)
        tr.free(xf16)
        gx = tr.alloc(T * h * f32)
        tr.free(gx16)
        g = tr.alloc(T * h * f32)                       # final norm backward
        weight_grad(h, unit_grads)
        weight_grad(h, unit_grads)
        tr.free(gx)
        tr.free_all(lnf_stats)
        tr.free(x)                                      # last residual
        tr.free_all([loss, total_w])
        head_grads = unit_grads
        unit_grads = []

        for l in range(L - 1, -1, -1):
            s = saved[l]
            gather(l)
            gather(l - 1)                               # prefetch
            # second half: x = x_mid + drop(fc2(gelu(fc1(ln2(x_mid)))))
            gd = tr.alloc(T * h * bf16)                 # dropout backward
            tr.free(s["mask2"])
            gg = tr.alloc(T * f * bf16)                 # fc2 grad input
            weight_grad(h * f, unit_grads)
            weight_grad(h, unit_grads)
            tr.free(gd)
            tr.free_all(s["w_fc2"])
            gf = tr.alloc(T * f * bf16)                 # gelu backward
            tr.free(gg)
            tr.free(s["gelu"])
            gx16 = tr.alloc(T * h * bf16)               # fc1 grad input
            weight_grad(f * h, unit_grads)
            weight_grad(f, unit_grads)
            tr.free(gf)
            tr.free(s["fc1"])
            tr.free_all(s["w_fc1"])
            tr.free(s["x16b"])
            gx = tr.alloc(T * h * f32)                  # cast backward
            tr.free(gx16)
            gln = tr.alloc(T * h * f32)                 # layernorm 2 backward
            weight_grad(h, unit_grads)
            weight_grad(h, unit_grads)
            tr.free(gx)
            tr.free_all(s["ln2_stats"])
            tr.free(s["x_mid"])
            gs = tr.alloc(T * h * f32)                  # residual: sum of grads
            tr.free(g)
            tr.free(gln)
            g = gs
            # first half: x_mid = x_in + drop(proj(attn(qkv(ln1(x_in)))))
            gd = tr.alloc(T * h * bf16)
            tr.free(s["mask1"])
            ga = tr.alloc(T * h * bf16)                 # proj grad input
            weight_grad(h * h, unit_grads)
            weight_grad(h, unit_grads)
            tr.free(gd)
            tr.free_all(s["w_proj"])
            delta = tr.alloc(B * nh * S * f32)          # flash-attention backward
            gqkv = tr.alloc(T * 3 * h * bf16)
            tr.free(delta)
            tr.free(ga)
            tr.free_all([s["attn"], s["lse"], s["rng"], s["qkv"]])
            gx16 = tr.alloc(T * h * bf16)               # qkv grad input
            weight_grad(3 * h * h, unit_grads)
            weight_grad(3 * h, unit_grads)
            tr.free(gqkv)
            tr.free_all(s["w_qkv"])
            tr.free(s["x16a"])
            gx = tr.alloc(T * h * f32)
            tr.free(gx16)
            gln = tr.alloc(T * h * f32)                 # layernorm 1 backward
            weight_grad(h, unit_grads)
            weight_grad(h, unit_grads)
            tr.free(gx)
            tr.free_all(s["ln1_stats"])
            tr.free(s["x_in"])
            gs = tr.alloc(T * h * f32)
            tr.free(g)
            tr.free(gln)
            g = gs
            if fsdp:
                reduce_scatter(l, unit_grads)
                release(l)
            unit_grads = []
        # embedding backward: dense fp32 gradient of the table, accumulated
        # into the tied weight's gradient
        ge = tr.alloc(V * h * f32)
        tr.free(g)
        tr.free(ge)
        if fsdp:
            reduce_scatter(L, head_grads)
            release(L)
            finish_reduce_scatter()
        tr.free_all(batch)

        # optimizer: clip_grad_norm_ (foreach norms), then fused AdamW ---------
        norms = [tr.alloc(f32) for _ in range(n_grad_tensors)]
        stacked = tr.alloc(n_grad_tensors * f32)
        tr.free_all(norms)
        total = tr.alloc(f32)
        tr.free(stacked)
        if fsdp:
            red = tr.alloc(f32, comm)                   # all-reduce of the norm
            tr.free(red)
        coef = tr.alloc(f32)
        clamped = tr.alloc(f32)
        tr.free_all([total, coef, clamped])


def gen_training(path):
    seed = 5005
    rng = random.Random(seed)
    cfg = TrainConfig(layers=12, hidden=1024, heads=16, ffn=4096, vocab=50257,
                      max_tokens=8192, steps=24)
    tr = Trace("training", seed, [
        ("model", "GPT-like L12-h1024-heads16-ffn4096-V50257, tied LM head"),
        ("precision", "bf16 autocast, fp32 params/grads, AdamW (fused)"),
        ("shapes", "(batch,seq) uniform over {4,8,12,16,24,32}x{128,256,384,512,768,1024,1536,2048}"
         " with 1024 <= batch*seq <= 8192, one per step"),
        ("steps", cfg.steps),
        ("end", "params, grads, optimizer state live"),
    ])
    run_training(tr, rng, cfg)
    tr.write(path)
    return tr


def gen_mixed_streams(path):
    seed = 6006
    rng = random.Random(seed)
    cfg = TrainConfig(layers=12, hidden=2048, heads=16, ffn=8192, vocab=50257,
                      max_tokens=4096, steps=24, fsdp_world=8)
    tr = Trace("mixed_streams", seed, [
        ("model", "GPT-like L12-h2048-heads16-ffn8192-V50257, tied LM head"),
        ("sharding", "FSDP over 8 ranks, one unit per layer + embedding unit"),
        ("stream1", "param all-gathers (prefetch 1 unit), grad reduce-scatters,"
         " next-batch prefetch, norm all-reduce"),
        ("shapes", "(batch,seq) uniform over {4,8,12,16,24,32}x{128,256,384,512,768,1024,1536,2048}"
         " with 1024 <= batch*seq <= 4096, one per step"),
        ("steps", cfg.steps),
        ("end", "sharded params, grads, optimizer state live"),
    ])
    run_training(tr, rng, cfg)
    tr.write(path)
    return tr


FAMILIES = [
    ("logrand", gen_logrand),
    ("rmm_uniform", gen_rmm_uniform),
    ("llm_serving", gen_llm_serving),
    ("grow_then_split", gen_grow_then_split),
    ("training", gen_training),
    ("mixed_streams", gen_mixed_streams),
]


# ---------------------------------------------------------------------------
# --check
# ---------------------------------------------------------------------------

def check_file(path):
    """Parse and verify one trace. Returns (stats dict, list of errors)."""
    errors = []
    live = {}                  # id -> bytes
    live_bytes = peak = 0
    max_blocks = 0
    n_alloc = n_free = n_small = 0
    header_events = header_peak = None

    def err(lineno, msg):
        if len(errors) < 20:
            errors.append("%s:%d: %s" % (os.path.basename(path), lineno, msg))
        elif len(errors) == 20:
            errors.append("%s: more errors left out" % os.path.basename(path))

    def as_int(tok):
        try:
            return int(tok, 10)
        except ValueError:
            return None

    with open(path, "r") as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s:
                continue
            if s.startswith("#"):
                body = s[1:].strip()
                if body.startswith("events:"):
                    header_events = as_int(body.split()[1])
                elif body.startswith("peak_live_bytes:"):
                    header_peak = as_int(body.split()[1])
                continue
            tok = s.split()
            op = tok[0]
            if op == "a":
                if len(tok) not in (3, 4):
                    err(lineno, "'a' takes <id> <bytes> [stream]: %r" % s)
                    continue
                i, n = as_int(tok[1]), as_int(tok[2])
                st = as_int(tok[3]) if len(tok) == 4 else 0
                if i is None or i < 0:
                    err(lineno, "bad id %r" % tok[1])
                    continue
                if n is None or n <= 0:
                    err(lineno, "size must be a positive integer: %r" % tok[2])
                    continue
                if st is None or st < 0:
                    err(lineno, "bad stream %r" % tok[3])
                    continue
                if i in live:
                    err(lineno, "id %d allocated while live" % i)
                    continue
                live[i] = n
                live_bytes += n
                n_alloc += 1
                if n <= MiB:
                    n_small += 1
                if live_bytes > peak:
                    peak = live_bytes
                if len(live) > max_blocks:
                    max_blocks = len(live)
            elif op == "f":
                if len(tok) not in (2, 3):
                    err(lineno, "'f' takes <id> [stream]: %r" % s)
                    continue
                i = as_int(tok[1])
                st = as_int(tok[2]) if len(tok) == 3 else 0
                if i is None or i not in live:
                    err(lineno, "free of id %r that is not live" % tok[1])
                    continue
                if st is None or st < 0:
                    err(lineno, "bad stream %r" % tok[2])
                    continue
                live_bytes -= live.pop(i)
                n_free += 1
            else:
                err(lineno, "unknown event %r" % op)

    events = n_alloc + n_free
    if header_events is not None and header_events != events:
        err(0, "header says %d events, file has %d" % (header_events, events))
    if header_peak is not None and header_peak != peak:
        err(0, "header says peak %d bytes, file has %d" % (header_peak, peak))
    stats = {
        "file": os.path.basename(path), "events": events, "allocs": n_alloc,
        "frees": n_free, "peak": peak, "live_blocks": len(live),
        "live_bytes": live_bytes, "max_blocks": max_blocks,
        "small": (n_small / n_alloc) if n_alloc else 0.0,
        "size": os.path.getsize(path),
    }
    return stats, errors


def limit_warnings(st):
    w = []
    if not MIN_EVENTS <= st["events"] <= MAX_EVENTS:
        w.append("%s: %d events, outside [%d, %d]" % (st["file"], st["events"], MIN_EVENTS, MAX_EVENTS))
    if not MIN_PEAK <= st["peak"] <= MAX_PEAK:
        w.append("%s: peak %.2f GiB, outside [%g, %g] GiB" % (st["file"], st["peak"] / GiB,
                                                              MIN_PEAK / GiB, MAX_PEAK / GiB))
    if st["size"] > MAX_FILE_BYTES:
        w.append("%s: %d bytes on disk, over %d" % (st["file"], st["size"], MAX_FILE_BYTES))
    return w


def run_check(paths):
    if not paths:
        paths = sorted(glob.glob(os.path.join(HERE, "*.trace")))
    if not paths:
        print("no traces to check", file=sys.stderr)
        return 1
    rows, all_errors, warnings = [], [], []
    for p in paths:
        st, errs = check_file(p)
        rows.append(st)
        all_errors.extend(errs)
        warnings.extend(limit_warnings(st))
    head = ["file", "events", "allocs", "frees", "peak live (GiB)", "live at end",
            "max live blocks", "allocs <= 1 MiB"]
    body = []
    for st in rows:
        body.append([st["file"], str(st["events"]), str(st["allocs"]), str(st["frees"]),
                     "%.3f" % (st["peak"] / GiB),
                     "%d blocks, %.3f GiB" % (st["live_blocks"], st["live_bytes"] / GiB),
                     str(st["max_blocks"]), "%.3f" % st["small"]])
    widths = [max(len(r[c]) for r in [head] + body) for c in range(len(head))]
    right = [False] + [True] * (len(head) - 1)

    def fmt(r):
        cells = [(c.rjust(w) if ra else c.ljust(w)) for c, w, ra in zip(r, widths, right)]
        return "| " + " | ".join(cells) + " |"

    print(fmt(head))
    print("|" + "|".join(("-" * (w + 1) + ":") if ra else ("-" * (w + 2))
                         for w, ra in zip(widths, right)) + "|")
    for r in body:
        print(fmt(r))
    total = sum(st["size"] for st in rows)
    print()
    print("%d files, %d bytes (%.2f MB) in all" % (len(rows), total, total / 1e6))
    for w in warnings:
        print("warning: " + w, file=sys.stderr)
    for e in all_errors:
        print("error: " + e, file=sys.stderr)
    if all_errors:
        print("FAILED: %d error(s)" % len(all_errors), file=sys.stderr)
        return 1
    print("all traces well-formed")
    return 0


def import_recorded(src, name, params, out):
    """Write a trace recorded by xseg's trace_file as out/NAME.trace, events
    unchanged, with the standard header.  Returns the path."""
    st, errors = check_file(src)
    if errors:
        raise SystemExit("%s: not a valid trace:\n  %s" % (src, "\n  ".join(errors)))
    hdr = [
        "# xseg allocation trace",
        "# format: 'a <id> <bytes> [stream]' allocates, 'f <id> [stream]' frees;"
        " no stream field = stream 0",
        "# family: %s" % name,
        "# source: recorded by xseg (trace_file), not generated",
    ] + ["# param %s" % p for p in params] + [
        "# events: %d (allocs %d, frees %d)" % (st["events"], st["allocs"], st["frees"]),
        "# peak_live_bytes: %d (%.3f GiB)" % (st["peak"], st["peak"] / GiB),
        "# live_at_end: %d blocks, %d bytes" % (st["live_blocks"], st["live_bytes"]),
    ]
    path = os.path.join(out, name + ".trace")
    with open(src) as fh, open(path, "w", newline="\n") as oh:
        oh.write("\n".join(hdr) + "\n")
        for line in fh:
            if line.strip() and not line.lstrip().startswith("#"):
                oh.write(line.rstrip("\n") + "\n")
    return path


# ---------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="check the given traces (default: every *.trace in this folder)")
    ap.add_argument("--out", default=HERE, help="folder to write traces into")
    ap.add_argument("--only", nargs="+", metavar="FAMILY",
                    help="write only these families")
    ap.add_argument("--import", dest="imp", nargs=2, metavar=("SRC", "NAME"),
                    help="write the recorded trace SRC here as NAME.trace with a header")
    ap.add_argument("--param", action="append", default=[], metavar="'KEY: VALUE'",
                    help="a '# param' header line for --import (repeatable)")
    ap.add_argument("files", nargs="*", help="traces to check (with --check)")
    args = ap.parse_args(argv)

    if args.check:
        return run_check(args.files)
    if args.imp:
        path = import_recorded(args.imp[0], args.imp[1], args.param, args.out)
        return run_check([path])
    if args.files:
        ap.error("file arguments need --check")

    names = [n for n, _ in FAMILIES]
    if args.only:
        bad = [n for n in args.only if n not in names]
        if bad:
            ap.error("unknown family %s (known: %s)" % (", ".join(bad), ", ".join(names)))
    os.makedirs(args.out, exist_ok=True)
    t_all = time.perf_counter()
    for name, fn in FAMILIES:
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        path = os.path.join(args.out, name + ".trace")
        tr = fn(path)
        print("%-22s %6d events  peak %7.3f GiB  %8d bytes  %.2fs" % (
            name + ".trace", tr.events(), tr.peak / GiB, os.path.getsize(path),
            time.perf_counter() - t0))
    print("done in %.2fs" % (time.perf_counter() - t_all))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
