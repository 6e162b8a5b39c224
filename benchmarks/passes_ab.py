#!/usr/bin/env python3
"""passes_ab.py: two builds of xseg-bench side by side on the host backend.

    python3 benchmarks/passes_ab.py BASE_BENCH NEW_BENCH [--rooms MB,...] [--passes N] [--frag] [--frag-scaled]

For each room (host_capacity_mb), both benches replay every shipped trace
N times in one process (`xseg-bench passes --backend host --model h100`),
and this prints, base -> new: the first passes' modelled driver time
summed over the traces, the largest held peak of each trace summed, and
the driver calls of the later passes summed; then every trace whose held
peaks, calls or driver time differ in any pass, as (held MiB, calls,
driver ms) per pass.  With --frag it also bisects every trace's min-budget
overhead with both benches (`frag --only xseg`) under a filler of an
H100's memory, under a cap, and under a filler with --lag 8, and prints
the traces whose figures differ.  With --frag-scaled it bisects them
under a cap with every trace scaled (`--scale K`, the smallest K of at
least 2 that takes its peak to 96 GiB or more): the rules that depend on
a large room (64 GiB or more) never meet a shipped trace at its min
budget otherwise.  A trace that does not fit a room counts with what it
did before it ran out.

This is how a change to the placement rules is judged before a GPU run
(docs/benchmarks.md, "Growth and shrink cost"): decisions are the same on
the host backend and the GPU (same rooms, same calls, same held peaks),
so what moves here moves there; the times are the H100 model's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CALLS = ("create", "release", "map", "unmap", "set_access")


def passes(bench, room, n, tmp):
    out = os.path.join(tmp, "passes.json")
    # Exit status 1 means some trace ran out of memory in this room: its rows are still written.
    subprocess.run([bench, "passes", "--backend", "host", "--model", "h100", "--passes", str(n),
                    "--conf", "host_capacity_mb:%d" % room, "--json", out],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        rows = json.load(f)["passes"]
    by = {}
    for r in rows:
        by.setdefault(r["trace"], []).append(r)
    return by


def shape(rows):
    return [(r["held_peak"] >> 20, sum(r[k] for k in CALLS), round(r["driver_ns"] / 1e6, 1)) for r in rows]


def compare_room(base, new, room, n, tmp):
    b, w = passes(base, room, n, tmp), passes(new, room, n, tmp)
    first = [sum(v[0]["driver_ns"] for v in t.values()) / 1e6 for t in (b, w)]
    held = [sum(max(p["held_peak"] for p in v) for v in t.values()) >> 20 for t in (b, w)]
    later = [sum(sum(p[k] for p in v[1:] for k in CALLS) for v in t.values()) for t in (b, w)]
    print("room %6d MiB: first-pass driver ms %.1f -> %.1f; held peaks %d -> %d MiB; later-pass calls %d -> %d"
          % (room, first[0], first[1], held[0], held[1], later[0], later[1]))
    for trace in sorted(set(b) | set(w)):
        sb, sw = shape(b.get(trace, [])), shape(w.get(trace, []))
        if sb != sw:
            print("  %-22s base %s\n  %-22s new  %s" % (trace, sb, "", sw))


def frag(bench, extra):
    r = subprocess.run([bench, "frag", "--backend", "host", "--only", "xseg"] + extra,
                       capture_output=True, text=True)
    fig = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1].isdigit():
            fig[parts[0]] = parts[3]
    return fig


def scale_of(path):
    """The --scale that takes the trace's peak (its header) to 96 GiB or more, at least 2."""
    with open(path) as f:
        for line in f:
            if line.startswith("# peak_live_bytes:"):
                peak = int(line.split()[2])
                return max(2, -(-(96 << 30) // peak))
            if not line.startswith("#"):
                break
    sys.exit("passes_ab.py: %s has no peak_live_bytes header" % path)


def compare_frag_scaled(base, new):
    traces = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces")
    diff, same = [], 0
    for name in sorted(f[:-6] for f in os.listdir(traces) if f.endswith(".trace")):
        k = scale_of(os.path.join(traces, name + ".trace"))
        # Both benches at once: each replay is one process, and these take minutes.
        procs = [subprocess.Popen([b, "frag", "--backend", "host", "--only", "xseg", "--scale", str(k), name],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for b in (base, new)]
        figs = []
        for p in procs:
            out, _ = p.communicate()
            row = [l.split() for l in out.splitlines() if l.split()[:1] == [name]]
            figs.append(row[0][3] if row and len(row[0]) > 3 else "failed")
        if figs[0] != figs[1]:
            diff.append("%s (x%d) %s -> %s" % (name, k, figs[0], figs[1]))
        else:
            same += 1
    print("min budgets (cap, scaled to ~96 GiB): %s" % ("; ".join(diff) + ("; %d identical" % same if same else "")
                                                        if diff else "all %d identical" % same))


def compare_frag(base, new):
    for name, extra in (("filler", ["--filler", "81559"]), ("cap", []), ("filler, lag 8", ["--filler", "81559", "--lag", "8"])):
        b, w = frag(base, extra), frag(new, extra)
        diff = ["%s %s -> %s" % (t, b[t], w.get(t)) for t in sorted(b) if b[t] != w.get(t)]
        print("min budgets (%s): %s" % (name, "; ".join(diff) if diff else "all %d identical" % len(b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rooms", default="16384,24576,40960,65536,81559,100000,143771,180000")
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--frag", action="store_true")
    ap.add_argument("--frag-scaled", action="store_true")
    a = ap.parse_args()
    for bench in (a.base, a.new):
        if not os.access(bench, os.X_OK):
            sys.exit("passes_ab.py: %s is not an executable xseg-bench" % bench)
    with tempfile.TemporaryDirectory() as tmp:
        for room in (int(x) for x in a.rooms.split(",")):
            compare_room(a.base, a.new, room, a.passes, tmp)
    if a.frag:
        compare_frag(a.base, a.new)
    if a.frag_scaled:
        compare_frag_scaled(a.base, a.new)


if __name__ == "__main__":
    main()
