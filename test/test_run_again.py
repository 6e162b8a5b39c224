#!/usr/bin/env python3
"""A workload run again in the same process, after it freed everything and
without empty_cache, holds no more than its first run and calls the driver
no more (pool/expandable.h, "Refilling an emptied device").  Checked on two
recorded traces.  The training trace's second run held 14,276 MiB against
12,704 in its first: its first blocks went into runs of chunks made for
other moments of the first run, and its largest blocks then found no free
range long enough and grew.  ViT training's second run grew its small pool
by six pages (18 driver calls, 5,070 MiB held against 5,058): its small
blocks were placed as on a device that had stopped packing.  Host backend,
the room of an H100 and of an H200, three runs of each trace in one
process (`xseg-bench passes`).

    python3 test/test_run_again.py BUILD/benchmarks/xseg-bench
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import check, summary

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = [os.path.join(os.path.dirname(HERE), "benchmarks", "traces", t + ".trace")
          for t in ("training", "torch_vit_train")]
CALLS = ("create", "release", "map", "unmap", "set_access")


def passes(bench, room_mb, trace):
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "passes.json")
        p = subprocess.run([bench, "--backend", "host", "--conf", "host_capacity_mb:%d" % room_mb, "--passes", "3",
                            "--json", j, "passes", trace], capture_output=True, text=True, timeout=300)
        out = (p.returncode, p.stdout, p.stderr)
        what = "%s, %d MiB of room" % (os.path.basename(trace), room_mb)
        if not check(p.returncode == 0 and os.path.exists(j), "passes ran (%s)" % what, out):
            return None
        with open(j) as f:
            rows = sorted(json.load(f)["passes"], key=lambda r: r["pass"])
    check([r["pass"] for r in rows] == [1, 2, 3], "three runs (%s)" % what)
    return rows


def main(bench):
    for trace in TRACES:
        for room in (81559, 143771):  # an H100's and an H200's memory, in MiB
            rows = passes(bench, room, trace)
            if not rows or len(rows) != 3:
                continue
            what = "%s, %d MiB of room" % (os.path.basename(trace), room)
            held = [r["held_peak"] >> 20 for r in rows]
            calls = [sum(r[k] for k in CALLS) for r in rows]
            print("%s: held %s MiB, driver calls %s" % (what, held, calls))
            check(held[0] > 0 and calls[0] > 0, "the first run grows from empty (%s)" % what)
            check(held[1] <= held[0] and held[2] <= held[0],
                  "later runs hold no more than the first (%s: %s MiB)" % (what, held))
            check(calls[1] == 0 and calls[2] == 0,
                  "later runs call the driver no more (%s: %s calls)" % (what, calls))
    return summary("test_run_again")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[-1].strip())
    sys.exit(main(sys.argv[1]))
