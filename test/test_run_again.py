#!/usr/bin/env python3
"""A workload run again in the same process, after it freed everything and
without empty_cache, holds no more than its first run and calls the driver
no more (pool/expandable.h, "Running again" and "Refilling an emptied
device").  Checked on every shipped trace, three runs of each in one
process (`xseg-bench passes`), host backend, with the room of an H100 and
of an H200.  Before the last run's places were followed, the GPT-2-medium
training trace's later runs held 62,634 and 64,102 MiB against 61,122 in
its first with an H200's room (its 1,570 MiB blocks found no free range
long enough and grew), ResNet-50's 9,232-9,312 against 9,160 with an
H100's, and eight traces called the driver in their second run.  The
training trace's second run held 14,276 MiB against 12,704 before growth
chunks were refilled; ViT training's grew its small pool by six pages
before the small pool packed again once nothing was live.  With 24 and
40 GiB of room the same holds for every trace whose peak fits (all but
the two GPT-2 training traces that fill any such room): until a followed
place could pin an idle chunk only within what its budget held in the
last run, rmm_uniform's later runs held 11,628 MiB against 11,126 with 24
GiB, calling the driver 307 times in the second, and logrand's 5,954
against 5,772.

    python3 test/test_run_again.py BUILD/benchmarks/xseg-bench
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import check, summary

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE_DIR = os.path.join(os.path.dirname(HERE), "benchmarks", "traces")
TRACES = sorted(os.path.join(TRACE_DIR, t) for t in os.listdir(TRACE_DIR) if t.endswith(".trace"))
CALLS = ("create", "release", "map", "unmap", "set_access")


def passes(bench, room_mb, traces):
    """Three runs of each trace at room_mb: {trace name: [pass rows]}."""
    what = "%d MiB of room" % room_mb
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "passes.json")
        p = subprocess.run([bench, "--backend", "host", "--conf", "host_capacity_mb:%d" % room_mb, "--passes", "3",
                            "--json", j, "passes"] + traces, capture_output=True, text=True, timeout=600)
        out = (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        if not check(p.returncode == 0 and os.path.exists(j), "passes ran (%s)" % what, out):
            return {}
        with open(j) as f:
            rows = json.load(f)["passes"]
    runs = {}
    for r in rows:
        runs.setdefault(r["trace"], []).append(r)
    return {t: sorted(v, key=lambda r: r["pass"]) for t, v in runs.items()}


def peak_mib(path):
    """The trace's peak of live bytes, from its header, in MiB."""
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                break
            if line.startswith("# peak_live_bytes:"):
                return int(line.split(":")[1].split()[0]) >> 20
    return None


def main(bench):
    check(len(TRACES) >= 14, "the shipped traces are there (%d)" % len(TRACES))
    peaks = {os.path.basename(t)[:-len(".trace")]: peak_mib(t) for t in TRACES}
    check(all(peaks.values()), "every trace states its peak (%s)" % peaks)
    # 24 and 40 GiB, an H100's and an H200's memory, in MiB
    for room in (24576, 40960, 81559, 143771):
        # A trace whose peak leaves less than an eighth of the room free
        # runs under pressure, where no place is followed.
        fit = [t for t in TRACES if (peaks[os.path.basename(t)[:-len(".trace")]] or room) * 8 <= room * 7]
        check(len(fit) >= 12, "at least twelve traces fit %d MiB of room (%d)" % (room, len(fit)))
        runs = passes(bench, room, fit)
        check(len(runs) == len(fit), "every trace ran (%d of %d, %d MiB of room)" % (len(runs), len(fit), room))
        for trace, rows in sorted(runs.items()):
            what = "%s, %d MiB of room" % (trace, room)
            if not check([r["pass"] for r in rows] == [1, 2, 3], "three runs (%s)" % what):
                continue
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
