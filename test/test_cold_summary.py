#!/usr/bin/env python3
"""Tests of benchmarks/cold_summary.py, the summary of many first passes
from empty under two allocators: its medians and ratios on hand-made rows
worked out by hand, and its errors on bad input."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, "benchmarks", "cold_summary.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import cold_summary as cs  # noqa: E402

FAILED = []


def check(cond, what):
    if cond:
        return
    FAILED.append(what)
    print("FAIL: " + what)


def close(a, b):
    return a is not None and abs(a - b) < 1e-9


def row(alloc, trace, us, ref=1000.0, calls=None, rep=0):
    # The warm pass: half the time, the same reference, no driver call.
    r = {"allocator": alloc, "trace": trace, "events": 10, "us_per_event_1": us, "cpu_ref_us_1": ref,
         "us_per_event_2": us / 2, "cpu_ref_us_2": ref, "driver_2": {"num_device_alloc": 0}, "repeat": rep}
    if calls is not None:
        r["driver_1"] = {"num_device_alloc": calls, "num_map": calls, "num_set_access": calls,
                         "num_conversions": 99}
    return r


def write(tmp, name, rows):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(rows, f)
    return path


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def summary_cases(tmp):
    # Round 1: native 2, 4, 6 (median 4); xseg 5, 5 (median 5): 1.25.
    # Round 2, a machine twice as slow for both: native 8, 8 (median 8); xseg 8 (median 8): 1.00.
    # Pooled: native 2,4,6,8,8 -> 6; xseg 5,5,8 -> 5: 0.8333.  Paired: median(1.25, 1.0) = 1.125.
    files = [
        write(tmp, "cold-native-1.json", [row("native", "t", 2), row("native", "t", 4), row("native", "t", 6),
                                          row("native", "only_native", 1)]),
        write(tmp, "cold-xseg-1.json", [row("xseg", "t", 5, calls=10), row("xseg", "t", 5, ref=500, calls=10)]),
        write(tmp, "cold-native-2.json", [row("native", "t", 8, ref=2000), row("native", "t", 8, ref=2000)]),
        write(tmp, "cold-xseg-2.json", [row("xseg", "t", 8, ref=2000, calls=12)]),
    ]
    s = cs.summarize(cs.load(files), "native", "xseg")
    check(len(s) == 1 and s[0]["trace"] == "t", "only the trace both replayed is summed up: %r" % s)
    r = s[0]
    check(r["n_base"] == 5 and r["n_new"] == 3, "counts of first passes: %r" % r)
    check(close(r["base_us"], 6) and close(r["new_us"], 5), "pooled medians 6 and 5: %r" % r)
    check(close(r["pooled"], 5 / 6), "pooled ratio 5/6: %r" % r["pooled"])
    check(close(r["paired"], 1.125) and r["rounds"] == 2, "paired ratio median(1.25, 1.0): %r" % r)
    # Relative to the CPU reference: native 2,4,6 /1000 and 8,8 /2000 -> .002,.004,.006,.004,.004 -> .004;
    # xseg 5/1000, 5/500, 8/2000 -> .005,.01,.004 -> .005: 1.25.
    check(close(r["cpu"], 1.25), "cpu-relative ratio 1.25: %r" % r["cpu"])
    check(r["calls"] == (30, 36), "calls from empty: the five kinds only, least and most: %r" % (r["calls"],))
    # Fast phases: the least reference is 500 (xseg's second pass), so within 1.2x of it: none of
    # native's (1000, 2000) - no ratio; with --fast 2 (up to 1000): native 2,4,6 -> 4, xseg 5,5 -> 5.
    check(r["fast"] is None and r["n_fast"] == (0, 1), "no fast ratio without fast passes of both: %r" % r)
    r2 = cs.summarize(cs.load(files), "native", "xseg", 2.0)[0]
    check(close(r2["fast"], 1.25) and r2["n_fast"] == (3, 2), "fast-phase ratio 5/4 with --fast 2: %r" % r2)
    rc, out, err = run(*files)
    check(rc == 0 and "0.83x" in out and "1.12x" in out and "1.25x" in out and "30-36" in out,
          "command line prints the ratios: rc %d\n%s%s" % (rc, out, err))
    rc, out, err = run("--fast", "2", *files)
    check(rc == 0 and "1.25x   3/2" in out, "--fast 2 prints the fast ratio and counts: %s%s" % (out, err))
    rc, out, err = run("--fast", "0.5", *files)
    check(rc == 2 and "--fast" in err, "--fast below 1 refused: rc %d %s" % (rc, err))
    w = cs.summarize(cs.load(files, 2), "native", "xseg", 1.2, 2)[0]
    check(close(w["base_us"], 3) and close(w["new_us"], 2.5) and w["calls"] == (0, 0),
          "--warm: the second passes' medians and calls: %r" % w)
    rc, out, err = run("--warm", *files)
    check(rc == 0 and "calls warm" in out and "0.83x" in out, "--warm on the command line: %s%s" % (out, err))
    rc, out, err = run("--base", "xseg", "--new", "native", *files)
    check(rc == 0 and "1.20x" in out, "--base and --new swap the ratio (6/5): %s%s" % (out, err))


def error_cases(tmp):
    good = write(tmp, "ok-native-1.json", [row("native", "t", 1)])
    rc, _, err = run(write(tmp, "noround.json", []))
    check(rc == 2 and "noround.json" in err and "round" in err, "a name with no round: rc %d %s" % (rc, err))
    bad = os.path.join(tmp, "bad-xseg-1.json")
    with open(bad, "w") as f:
        f.write("[{")
    rc, _, err = run(good, bad)
    check(rc == 2 and "bad-xseg-1.json" in err, "malformed JSON named: rc %d %s" % (rc, err))
    rc, _, err = run(good, write(tmp, "miss-xseg-1.json", [{"allocator": "xseg", "trace": "t"}]))
    check(rc == 2 and "us_per_event_1" in err and "row 0" in err, "a missing field named: rc %d %s" % (rc, err))
    cold_only = write(tmp, "cold-xseg-1.json", [{"allocator": "xseg", "trace": "t", "us_per_event_1": 1,
                                                 "cpu_ref_us_1": 1}])
    rc, _, err = run("--warm", good, cold_only)
    check(rc == 2 and "us_per_event_2" in err, "--warm on rows without a second pass: rc %d %s" % (rc, err))
    rc, _, err = run(good, write(tmp, "zero-xseg-1.json", [row("xseg", "t", 1, ref=0)]))
    check(rc == 2 and "cpu_ref_us_1" in err, "a CPU reference of 0 refused: rc %d %s" % (rc, err))
    rc, _, err = run(good)
    check(rc == 1 and "no trace" in err, "one allocator alone: rc %d %s" % (rc, err))
    rc, _, err = run(os.path.join(tmp, "absent-xseg-1.json"))
    check(rc == 2 and "absent-xseg-1.json" in err, "a missing file named: rc %d %s" % (rc, err))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        summary_cases(tmp)
        error_cases(tmp)
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
