#!/usr/bin/env python3
"""Plots for docs/benchmarks.md, made from xseg-bench JSON results.

    python3 benchmarks/plot.py [RESULTS_DIR [OUT_DIR]]

RESULTS_DIR (default benchmarks/results) holds the JSON written by
`xseg-bench --json`: host-*.json and gpu-*-frag.json (section "frag") and
timeline-*.json (section "timeline").  Writes into OUT_DIR (default
docs/img):

  overhead.png          min-budget overhead per trace per allocator
  timeline-TRACE.png    memory over time (live, allocated, mapped) for xseg
                        expandable and binned, one per timeline file

It needs matplotlib (`pip install matplotlib`), and says so if it is
missing rather than installing anything itself.
"""
import glob
import json
import os
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot.py: matplotlib is not installed; install it with: pip install matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20


def load(path):
    with open(path) as f:
        return json.load(f)


def overhead(results, out):
    """Grouped bars: one group per trace, one bar per (allocator, machine)."""
    series = []  # (label, {trace: overhead})
    for path in sorted(glob.glob(os.path.join(results, "host-*.json"))):
        frag = load(path).get("frag", [])
        for key, label in (("xseg", "xseg (host)"), ("xseg_binned", "xseg binned (host)")):
            series.append((label, {r["trace"]: r[key] for r in frag if r.get(key, 0) > 0}))
    for path in sorted(glob.glob(os.path.join(results, "gpu-*-frag.json"))):
        frag = load(path).get("frag", [])
        for key, label in (("xseg", "xseg (H200)"), ("xseg_binned", "xseg binned (H200)"),
                           ("cudaMalloc", "cudaMalloc (H200)"), ("cudaMallocAsync", "cudaMallocAsync (H200)")):
            series.append((label, {r["trace"]: r[key] for r in frag if r.get(key, 0) > 0}))
    series = [s for s in series if s[1]]
    if not series:
        print("plot.py: no fragmentation results in", results)
        return
    traces = sorted({t for _, d in series for t in d})
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(12, 5))
    for k, (label, d) in enumerate(series):
        xs = [i + (k - len(series) / 2 + 0.5) * width for i in range(len(traces))]
        ax.bar(xs, [d.get(t, 0) - 1 for t in traces], width, bottom=1, label=label)
    ax.axhline(1.02, color="black", linestyle="--", linewidth=0.8)
    ax.text(len(traces) - 0.5, 1.021, "1.02 goal", ha="right", va="bottom", fontsize=8)
    ax.set_xticks(range(len(traces)))
    ax.set_xticklabels(traces, rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("min-budget overhead (budget / peak live)")
    ax.set_ylim(1.0, max(1.1, min(1.8, max(v for _, d in series for v in d.values()) + 0.02)))
    ax.set_title("Smallest budget in which each trace replays, over its peak live bytes (lower is better)")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "overhead.png"), dpi=110)
    plt.close(fig)
    print("wrote", os.path.join(out, "overhead.png"))


def timeline(path, out):
    rows = load(path).get("timeline", [])
    if not rows:
        return
    trace = rows[0]["trace"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, mode in zip(axes, ("expandable", "binned")):
        r = [x for x in rows if x["mode"] == mode]
        ev = [x["event"] for x in r]
        ax.plot(ev, [x["live"] / MIB for x in r], label="live (requested)", linewidth=1.2)
        ax.plot(ev, [x["allocated"] / MIB for x in r], label="allocated", linewidth=1, linestyle="--")
        ax.plot(ev, [x["mapped"] / MIB for x in r], label="mapped (device memory)", linewidth=1.2)
        ax.set_title("xseg %s" % mode)
        ax.set_xlabel("event")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MiB")
    axes[0].legend(fontsize=8)
    fig.suptitle("Memory over time, trace %s (host backend, budget 2 x peak; each point the maximum of ~1/400 of the trace)" % trace)
    fig.tight_layout()
    name = os.path.join(out, "timeline-%s.png" % trace)
    fig.savefig(name, dpi=110)
    plt.close(fig)
    print("wrote", name)


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"
    out = sys.argv[2] if len(sys.argv) > 2 else "docs/img"
    os.makedirs(out, exist_ok=True)
    overhead(results, out)
    for path in sorted(glob.glob(os.path.join(results, "timeline-*.json"))):
        timeline(path, out)


if __name__ == "__main__":
    main()
