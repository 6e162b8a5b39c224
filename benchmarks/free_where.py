#!/usr/bin/env python3
"""free_where.py: where the free memory lies when a trace fails just below
its min budget (docs/benchmarks.md, "Where the free memory lies at the min
budget").

For each trace, from its min budget (a factor of its peak, as
`xseg-bench frag` gives it) down one MiB at a time, the trace is replayed by
`xseg-bench replay` on the host backend until a replay fails; the
out-of-memory message of that replay (docs/metrics.md, "Diagnosing an
out-of-memory") says how much of the free memory inside xseg's segments
lies in pages that live blocks share and how much in handles that live
blocks pin, and how many whole pages were left for how many the request
needed.  One row per trace and budget kind:

  filler  the budget is what a filler leaves free on a device of
          --device MiB (81559: an H100), as `frag --filler`
  cap     a device of the budget's size (host_capacity_mb), as `frag`

    python3 benchmarks/free_where.py BENCH FRAG_JSON [--kind filler|cap]
        [--device MiB] [--tries N] [--markdown]

FRAG_JSON is the --json output of `xseg-bench --backend host --only xseg
frag` (with --filler for the filler kind): its "frag" rows give each
trace's min budget and peak.  Exit status 0; 1 if a replay could not be
run, or FRAG_JSON holds no trace.
"""
import argparse
import json
import math
import re
import subprocess
import sys

SIZE = r"([0-9.]+ [KMGT]iB|[0-9]+ B)"
WHERE = re.compile(r"of the " + SIZE + r" free inside xseg's segments, " + SIZE + r" lies in pages that live "
                   r"blocks share .*? and " + SIZE + r" in handles that live blocks pin; the whole free pages and "
                   r"the room left come to (\d+) pages, and the request needs (\d+)")


def replay(bench, kind, device, mb, trace):
    """The out-of-memory message of one replay, None if it replayed, or an
    exception if xseg-bench did not run."""
    if kind == "filler":
        args = ["--filler", str(device), "--budget", str(mb), "--conf", "verbose:true"]
    else:
        args = ["--conf", "verbose:true,host_capacity_mb:%d" % mb]
    p = subprocess.run([bench, "--backend", "host", *args, "replay", trace], capture_output=True, text=True,
                       timeout=600)
    for line in (p.stdout + p.stderr).splitlines():
        if "out of memory on device" in line:
            return line
    if p.returncode not in (0, 1):
        raise RuntimeError("%s replay %s: exit status %d: %s" % (bench, trace, p.returncode, p.stderr.strip()[-300:]))
    return None


def where(message):
    """(cause, free, shared, pinned, pages left, pages asked) of a message."""
    cause = message.split("Cause: ", 1)[-1]
    m = WHERE.search(cause)
    if m:
        return ("fragmentation" if cause.startswith("fragmentation") else "outside",) + m.groups()
    return (cause.split(":", 1)[0], "", "", "", "", "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench")
    ap.add_argument("frag_json")
    ap.add_argument("--kind", choices=("filler", "cap"), default="filler")
    ap.add_argument("--device", type=int, default=81559, help="filler: the device's MiB")
    ap.add_argument("--tries", type=int, default=12, help="budgets tried below the min budget")
    ap.add_argument("--markdown", action="store_true", help="a table for docs/benchmarks.md")
    a = ap.parse_args()
    rows = json.load(open(a.frag_json)).get("frag", [])
    if not rows:
        print("free_where.py: %s holds no frag rows" % a.frag_json, file=sys.stderr)
        return 1
    if a.markdown:
        print("| trace | fails at | free inside segments | in shared pages | in pinned handles | "
              "whole free pages and room / pages asked |")
        print("|---|---|---|---|---|---|")
    for r in rows:
        peak = r["peak_live"] / 2**20
        top = math.floor(r["xseg"] * peak)
        for mb in range(top, top - a.tries, -1):
            try:
                msg = replay(a.bench, a.kind, a.device, mb, r["trace"])
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                print("free_where.py: %s" % e, file=sys.stderr)
                return 1
            if msg is None:
                continue
            cause, free, shared, pinned, left, asked = where(msg)
            at = "%s %.4f" % (a.kind, mb / peak)
            if a.markdown and not free:
                print("| %s | %s | (%s) | | | |" % (r["trace"], at, cause))
            elif a.markdown:
                print("| %s | %s | %s | %s | %s | %s / %s |" % (r["trace"], at, free, shared, pinned, left, asked))
            else:
                print("%-22s %s (%d MiB): %s" % (r["trace"], at, mb, msg.split("Cause: ", 1)[-1]))
            break
        else:
            print("%-22s no failure from %d to %d MiB" % (r["trace"], top - a.tries + 1, top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
