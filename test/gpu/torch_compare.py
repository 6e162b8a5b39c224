#!/usr/bin/env python3
"""torch_compare.py: run torch_train.py under each allocator and compare.

    python3 -u test/gpu/torch_compare.py [--out DIR] [--steps N]    # xseg installed: pip install ./python

For each mode (train, infer) and each allocator (native, expandable, xseg)
torch_train.py runs in a fresh process.  Checks:
  - every run finishes and prints its JSON line;
  - train: xseg's per-step losses equal native's exactly (the runs are
    deterministic, so any difference is a bug: the max abs difference is
    printed);  infer: the generated-token checksums are equal;
  - xseg.check_heap() succeeded (at the end of the run and after freeing);
  - xseg's allocated_bytes.all.peak is plausible (> 0 and below the device).
expandable's agreement with native is reported too, as a check of the
determinism premise, but does not fail the run.

Prints a markdown table and writes it (table.md), the raw JSON of every run
and the checks (results.json), and each run's stdout and stderr to the
directory given by --out (default: $OUT if set, else ./torch_out).  The exit
status is non-zero if any check failed.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(HERE, "torch_train.py")
ALLOCATORS = ("native", "expandable", "xseg")
MODES = ("train", "infer")
MiB = 1 << 20


def say(*args):
    print(*args, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description="compare CUDA allocators on torch_train.py")
    p.add_argument("--out", default=os.environ.get("OUT") or "torch_out",
                   help="output directory (default: $OUT, else ./torch_out)")
    p.add_argument("--steps", type=int, default=40, help="steps per run (both modes)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--allocators", default=",".join(ALLOCATORS))
    p.add_argument("--timeout", type=int, default=300, help="seconds per run")
    p.add_argument("--xseg-conf", default=None, help="XSEG_ALLOC_CONF for the xseg runs (default: environment)")
    p.add_argument("--summary", action="store_true", help="xseg runs print xseg's summary to their stderr")
    p.add_argument("--extra", default="",
                   help="more arguments for every torch_train.py run, e.g. --extra='--device cpu'")
    args = p.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    args.allocators = [a for a in args.allocators.split(",") if a]
    for m in args.modes:
        if m not in MODES:
            p.error("unknown mode %r" % m)
    for a in args.allocators:
        if a not in ALLOCATORS:
            p.error("unknown allocator %r" % a)
    return args


def child_env():
    # The installed xseg package (pip install ./python), as a user has it.
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _text(data):
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


def run_one(mode, allocator, args):
    cmd = [sys.executable, "-u", TRAIN, "--allocator", allocator, "--mode", mode, "--steps", str(args.steps)]
    cmd += shlex.split(args.extra)
    if allocator == "xseg":
        if args.xseg_conf is not None:
            cmd += ["--xseg-conf", args.xseg_conf]
        if args.summary:
            cmd.append("--summary")
    say("== %s / %s: %s" % (mode, allocator, " ".join(cmd)))
    t0 = time.time()
    rec = {"mode": mode, "allocator": allocator, "cmd": cmd, "rc": None, "result": None, "error": None}
    try:
        proc = subprocess.run(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=args.timeout, cwd=REPO)
        rec["rc"] = proc.returncode
        out, err = _text(proc.stdout), _text(proc.stderr)
    except subprocess.TimeoutExpired as e:
        out, err = _text(e.stdout), _text(e.stderr)
        rec["error"] = "timed out after %d s" % args.timeout
    rec["wall_s"] = round(time.time() - t0, 2)
    base = os.path.join(args.out, "%s-%s" % (mode, allocator))
    with open(base + ".stdout", "w") as f:
        f.write(out)
    with open(base + ".stderr", "w") as f:
        f.write(err)
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                rec["result"] = json.loads(line)
            except ValueError as e:
                rec["error"] = rec["error"] or "bad JSON line: %s" % e
            break
    if rec["error"] is None:
        if rec["rc"] != 0:
            rec["error"] = "exit status %s%s" % (
                rec["rc"], " (after printing its result: a crash at exit?)"
                if rec["result"] and not rec["result"].get("error") else "")
        elif rec["result"] is None:
            rec["error"] = "no JSON line on stdout"
        elif rec["result"].get("error"):
            rec["error"] = rec["result"]["error"]
    if rec["error"]:
        say("   FAILED: %s" % rec["error"])
        tail = "\n".join(err.splitlines()[-25:])
        if tail:
            say("   --- stderr tail ---\n" + tail)
    else:
        r = rec["result"]
        say("   ok in %.1f s: median step %.2f ms, peak driver %s MiB, peak mem_get_info %s MiB"
            % (rec["wall_s"], r.get("median_step_ms", float("nan")), fmt(r.get("peak_driver_mib")),
               fmt(r.get("peak_meminfo_mib"))))
    return rec


def fmt(v, digits=1):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return "%.*f" % (digits, v)
    return str(v)


def compare_values(mode, ref, other):
    """(equal, detail) for the losses (train) or checksums (infer) of two runs."""
    key = "losses" if mode == "train" else "checksums"
    a, b = ref.get(key), other.get(key)
    if a is None or b is None:
        return False, "missing %s" % key
    if len(a) != len(b):
        return False, "%d vs %d steps" % (len(a), len(b))
    diffs = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if not diffs:
        return True, "equal (%d steps)" % len(a)
    if mode == "train":
        mad = max(abs(x - y) for x, y in zip(a, b))
        return False, "%d of %d steps differ, first at step %d, max abs diff %.3e" % (len(diffs), len(a), diffs[0], mad)
    return False, "%d of %d checksums differ, first at step %d" % (len(diffs), len(a), diffs[0])


def allocator_peaks(res):
    """(allocated peak, reserved peak) in bytes as the allocator itself reports them."""
    if res is None:
        return None, None
    src = res.get("xseg") if res.get("allocator") == "xseg" else res.get("torch_allocator")
    if not isinstance(src, dict):
        return None, None
    return src.get("allocated_bytes_peak"), src.get("reserved_bytes_peak")


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    say("torch_compare: python %s, output in %s" % (sys.executable, os.path.abspath(args.out)))
    if "xseg" in args.allocators:
        say("XSEG_ALLOC_CONF=%s" % (args.xseg_conf if args.xseg_conf is not None
                                    else os.environ.get("XSEG_ALLOC_CONF", "(unset: defaults)")))

    failures, warnings = [], []
    runs = {}
    for mode in args.modes:
        for allocator in args.allocators:
            rec = run_one(mode, allocator, args)
            runs[(mode, allocator)] = rec
            if rec["error"]:
                failures.append("%s/%s: %s" % (mode, allocator, rec["error"]))

    rows = []
    checks = []
    for mode in args.modes:
        native = runs.get((mode, "native"))
        ref = native["result"] if native and not native["error"] else None
        for allocator in args.allocators:
            rec = runs[(mode, allocator)]
            res = rec["result"] if not rec["error"] else None
            equal_cell = "n/a"
            if allocator == "native":
                equal_cell = "reference" if ref else "n/a"
            elif ref is not None and res is not None:
                equal, detail = compare_values(mode, ref, res)
                equal_cell = "yes" if equal else "NO"
                checks.append({"mode": mode, "allocator": allocator, "check": "same as native",
                               "ok": equal, "detail": detail})
                what = "losses" if mode == "train" else "token checksums"
                if not equal:
                    msg = "%s/%s: %s differ from native: %s" % (mode, allocator, what, detail)
                    (failures if allocator == "xseg" else warnings).append(msg)
                say("%s/%s vs native: %s" % (mode, allocator, detail))
            elif allocator == "xseg":
                failures.append("%s/xseg: cannot compare with native (a run failed)" % mode)

            if allocator == "xseg" and res is not None:
                xs = res.get("xseg") or {}
                ok = xs.get("check_heap") is True
                checks.append({"mode": mode, "allocator": "xseg", "check": "check_heap", "ok": ok,
                               "detail": xs.get("check_heap_error")})
                if not ok:
                    failures.append("%s/xseg: check_heap failed: %s" % (mode, xs.get("check_heap_error")))
                if "check_heap_after_free" in xs:
                    ok2 = xs.get("check_heap_after_free") is True
                    checks.append({"mode": mode, "allocator": "xseg", "check": "check_heap after free",
                                   "ok": ok2, "detail": xs.get("check_heap_after_free_error")})
                    if not ok2:
                        failures.append("%s/xseg: check_heap after free failed: %s"
                                        % (mode, xs.get("check_heap_after_free_error")))
                peak = xs.get("allocated_bytes_peak")
                total = (res.get("device_total_mib") or 0) * MiB
                plausible = isinstance(peak, int) and peak > 0 and (not total or peak <= total)
                checks.append({"mode": mode, "allocator": "xseg", "check": "allocated peak plausible",
                               "ok": plausible, "detail": peak})
                if not plausible:
                    failures.append("%s/xseg: implausible allocated_bytes.all.peak %r" % (mode, peak))
                if ref is not None:
                    nat_peak, _ = allocator_peaks(ref)
                    if isinstance(peak, int) and isinstance(nat_peak, int) and nat_peak > 0:
                        ratio = peak / nat_peak
                        say("%s: xseg allocated peak / native allocated peak = %.3f" % (mode, ratio))
                        if not 0.5 <= ratio <= 2.0:
                            warnings.append("%s/xseg: allocated peak %.3fx native's" % (mode, ratio))
                for key in ("num_ooms", "num_alloc_retries"):
                    if xs.get(key):
                        warnings.append("%s/xseg: %s = %s" % (mode, key, xs.get(key)))

            if allocator == "expandable" and res is not None:
                ta = res.get("torch_allocator") or {}
                if ta.get("expandable_segments_in_use") is False:
                    warnings.append("%s/expandable: PyTorch's snapshot shows no expandable segment; "
                                    "was PYTORCH_CUDA_ALLOC_CONF honoured?" % mode)

            a_peak, r_peak = allocator_peaks(res)
            rows.append([
                mode,
                allocator,
                fmt(res.get("median_step_ms"), 2) if res else "FAILED",
                fmt(res.get("peak_driver_mib")) if res else "n/a",
                fmt(res.get("peak_meminfo_mib")) if res else "n/a",
                equal_cell,
                fmt(a_peak / MiB) if isinstance(a_peak, (int, float)) else "n/a",
                fmt(r_peak / MiB) if isinstance(r_peak, (int, float)) else "n/a",
            ])

    header = ["mode", "allocator", "median step ms", "peak driver MiB", "peak mem_get_info MiB",
              "losses equal", "allocator peak allocated MiB", "allocator peak reserved MiB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines)

    device = next((r["result"].get("device_name") for r in runs.values() if r["result"]), None)
    versions = next(((r["result"].get("torch_version"), r["result"].get("transformers_version"))
                     for r in runs.values() if r["result"] and r["result"].get("torch_version")), (None, None))
    notes = [
        "",
        "Device: %s; torch %s; transformers %s; %d steps per run; median over steps after the first 3."
        % (device, versions[0], versions[1], args.steps),
        "Peak driver MiB: NVML used memory polled every 1 ms, minus its value after CUDA initialisation.",
        "Peak mem_get_info MiB: the same from cudaMemGetInfo's free memory.",
        "Losses equal: train compares per-step losses with native exactly; infer compares checksums "
        "of the generated token ids.",
    ]
    say("")
    say(table)
    for n in notes[1:]:
        say(n)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n" + "\n".join(notes) + "\n")

    summary = {
        "ok": not failures,
        "failures": failures,
        "warnings": warnings,
        "checks": checks,
        "table": table,
        "runs": [runs[k] for k in sorted(runs)],
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)

    say("")
    for w in warnings:
        say("warning: " + w)
    for fl in failures:
        say("FAIL: " + fl)
    say("torch_compare: %s" % ("PASS" if not failures else "FAIL (%d)" % len(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
