#!/usr/bin/env python3
"""xseg-bench's command line: exit statuses, which stream each message goes
to, how often it is said, and the configuration it runs under.

    python3 test/test_cli.py PATH/TO/xseg-bench [quick]

Conventions checked (docs/benchmarks.md, "The command line"): --help on
stdout with status 0; a mistake named on stderr with the usage line and
status 2, before anything is printed on stdout; every message once; the
configuration merged from the bench's defaults, XSEG_ALLOC_CONF and --conf
and shown on the line below the header.  Every run is a second or less.
With `quick`, one run of `xseg-bench --quick` instead: every table printed,
every shipped trace replayed, in under 20 s of CPU time (CPU time rather
than wall time, so a busy machine does not fail it; on a 2-core VM on
2026-11-26 it took 9.2 s, of which 7.3 s in the kernel serving the host
backend's memory files, a share that varies between machines and rose to
10.3 s with the test suite running beside it).
"""
import errno
import json
import re
import os
import resource
import subprocess
import sys
import tempfile

from checks import check, summary

BENCH = sys.argv[1] if len(sys.argv) > 1 else "build/benchmarks/xseg-bench"


def run(*args, env=None):
    e = dict(os.environ)
    e.pop("XSEG_ALLOC_CONF", None)
    e.update(env or {})
    p = subprocess.run([BENCH, *args], env=e, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr



def usage_error(args, named, env=None):
    """A mistake: status 2, nothing on stdout, the culprit named once on stderr."""
    out = run(*args, env=env)
    rc, so, se = out
    label = " ".join(args)
    check(rc == 2, "%s: exit status 2" % label, out)
    check(so == "", "%s: nothing on stdout" % label, out)
    check(se.count(named) == 1, "%s: stderr names %s once" % (label, named), out)
    return out


def quick():
    """xseg-bench --quick: every section, every trace, in its time budget."""
    traces = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "traces")
    names = sorted(f[:-6] for f in os.listdir(traces) if f.endswith(".trace"))
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "quick.json")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = run("--backend", "host", "--quick", "--json", j)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rc, so, se = out
        check(rc == 0, "--quick: status 0", out)
        for section in ("latency", "scale", "growth", "threads", "devices", "fragmentation"):
            check("\n== %s:" % section in so, "--quick prints the %s table" % section, out)
        rows = {l.split()[0]: l.split() for l in so.splitlines() if l.split() and l.split()[0] in names}
        check(sorted(rows) == names, "--quick replays every shipped trace", out)
        check(all(int(r[1]) <= 2000 for r in rows.values()), "--quick replays a prefix of each trace", out)
        try:
            with open(j) as f:
                doc = json.load(f)
            ok = all(doc.get(k) for k in ("latency", "scale", "growth", "threads", "devices", "frag"))
            ok = ok and [r["devices"] for r in doc["devices"]] == [1, 2, 4, 8]
            ok = ok and all(r["mops"] > 0 and r["one_device_mops"] > 0 for r in doc["devices"])
        except (OSError, ValueError):
            ok = False
        check(ok, "--quick --json: valid, every section", out)
        check(cpu < 20, "--quick takes %.1f s of CPU time, under 20" % cpu)
        print("xseg-bench --quick: %.1f s of CPU time" % cpu)


def main():
    if sys.argv[2:] == ["quick"]:
        quick()
        return summary("test_cli")

    # --help and -h: the usage on stdout, status 0, nothing on stderr.
    for flag in ("--help", "-h"):
        out = run(flag)
        rc, so, se = out
        check(rc == 0 and so.startswith("usage: xseg-bench") and se == "", flag + " on stdout, status 0", out)
        check("XSEG_ALLOC_CONF" in so and "Exit status" in so, flag + " explains the configuration", out)

    # Mistakes on the command line.
    rc, so, se = usage_error(["--frobnicate"], "unknown option '--frobnicate'")
    check("usage: xseg-bench" in se, "unknown option: usage hint on stderr", (rc, so, se))
    usage_error(["--frobnicate=3", "latency"], "'--frobnicate'")
    usage_error(["frob"], "unknown command 'frob'")
    usage_error(["--json"], "'--json' needs an argument")
    usage_error(["latency", "--conf"], "'--conf' needs an argument")
    usage_error(["--backend", "gpu"], "'gpu'")
    usage_error(["--lag", "x"], "'x'")
    usage_error(["--passes", "1", "passes"], "'1'")
    usage_error(["--passes", "17", "passes"], "'17'")
    usage_error(["--filler", "0", "frag"], "'0'")
    usage_error(["--only", "jemalloc", "frag"], "'jemalloc'")
    usage_error(["--budget", "0", "replay", "x"], "'0'")
    usage_error(["--backend", "host", "--budget", "64", "frag"], "--budget is for replay")
    usage_error(["--backend", "host", "--budget", "64", "replay", "x"], "--filler device of at least")
    usage_error(["--model", "a100", "latency"], "'a100'")
    usage_error(["--scale", "0", "frag"], "'0'")
    usage_error(["--scale", "2x", "frag"], "'2x'")
    usage_error(["--scale", "4097", "frag"], "'4097'")
    usage_error(["latency", "extra"], "'extra'")
    usage_error(["replay"], "replay needs a TRACE")

    # An invalid configuration stops the bench before it prints anything,
    # with the library's message, once, naming the key and where it came from.
    rc, so, se = usage_error(["latency"], "unknown key 'foo'", env={"XSEG_ALLOC_CONF": "foo:bar"})
    check("XSEG_ALLOC_CONF" in se and se.count("\n") == 1, "XSEG_ALLOC_CONF=foo:bar: one line, naming its source",
          (rc, so, se))
    rc, so, se = usage_error(["--conf", "foo:bar", "latency"], "unknown key 'foo'")
    check("--conf" in se and se.count("\n") == 1, "--conf foo:bar: one line, naming its source", (rc, so, se))
    usage_error(["--quick"], "unknown key 'foo'", env={"XSEG_ALLOC_CONF": "foo:bar"})  # all sections: still once
    usage_error(["latency"], "has no closing", env={"XSEG_ALLOC_CONF": "roundup_power2_divisions:[256:1"})

    # A missing trace: the OS's reason and the name, before any output.
    enoent = os.strerror(errno.ENOENT)
    rc, so, se = usage_error(["frag", "nosuch_trace"], "'nosuch_trace'")
    check(enoent in se, "missing trace: the OS's reason", (rc, so, se))
    rc, so, se = usage_error(["--quick", "frag", "torch_gpt2_infer", "/nonexistent/x.trace"], "/nonexistent/x.trace")
    check(enoent in se, "missing trace after a good one: the OS's reason, nothing printed", (rc, so, se))
    usage_error(["timeline", "/nonexistent/x.trace"], "/nonexistent/x.trace")

    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "tiny.trace")
        with open(trace, "w") as f:
            f.write("a 1 3145728\na 2 1048576\nf 1\na 3 2097152\nf 2\nf 3\n")
        with open(os.path.join(d, "bad.trace"), "w") as f:
            f.write("a 1 100\nf 2\n")
        # A header comment longer than any event line (recorded traces say
        # how they were made) is read past; an over-long event line is an error.
        with open(os.path.join(d, "longhead.trace"), "w") as f:
            f.write("# param run: " + "x" * 700 + "\na 1 3145728\nf 1\n")
        with open(os.path.join(d, "longev.trace"), "w") as f:
            f.write("a 1 3145728" + " " * 700 + "\nf 1\n")

        # Trace names as the tables print them, looked up in --traces, and paths.
        for name in ("tiny", trace):
            out = run("--quick", "--traces", d, "frag", name)
            rc, so, se = out
            check(rc == 0 and any(l.split()[:1] == ["tiny"] for l in so.splitlines()), "frag %s: a row for tiny" % name,
                  out)
        out = run("--traces", d, "replay", "tiny")
        check(out[0] == 0 and "replayed tiny: 6 events" in out[1], "replay by name", out)
        out = run("--quick", "frag", "torch_gpt2_infer")  # the shipped directory
        check(out[0] == 0 and "torch_gpt2_infer" in out[1], "a shipped trace by name", out)
        # A malformed trace is an input error too, found before the header.
        rc, so, se = usage_error(["--traces", d, "frag", "tiny", "bad"], "bad.trace:2")
        out = run("--traces", d, "replay", "longhead")
        check(out[0] == 0 and "replayed longhead: 2 events" in out[1], "a long comment line is read past", out)
        rc, so, se = usage_error(["--traces", d, "replay", "longev"], "longev.trace:1: line too long")

        # --scale K: every allocation K times its size, the peak with them,
        # said on the line that reports the replay; a peak that would pass
        # 4 TiB is an input error naming the trace, before any output.
        out = run("--traces", d, "--scale", "3", "replay", "tiny")
        check(out[0] == 0 and "peak live 12.0 MiB; every size x 3" in out[1], "replay --scale 3: the peak is three times tiny's", out)
        out = run("--traces", d, "replay", "tiny")
        check(out[0] == 0 and "peak live 4.0 MiB" in out[1] and "every size" not in out[1], "replay without --scale", out)
        with open(os.path.join(d, "big.trace"), "w") as f:
            f.write("a 1 2147483648\nf 1\n")
        usage_error(["--traces", d, "--scale", "4096", "frag", "big"], "trace 'big'")
        out = run("--backend", "host", "--traces", d, "--scale", "1024", "frag", "tiny")
        rows = [l.split() for l in out[1].splitlines() if l.split()[:1] == ["tiny"]]
        check(out[0] == 0 and "every size x 1024" in out[1] and rows and rows[0][2] == "4096" and float(rows[0][3]) >= 1.0,
              "frag --scale 1024: tiny's peak is 4 GiB, and it has a min budget", out)

        # The configuration: XSEG_ALLOC_CONF merged with --conf, --conf winning
        # a key both set, lists kept whole, the result on the line below the header.
        out = run("--quick", "--conf", "host_capacity_mb:1024,max_split_size_mb:256", "growth",
                  env={"XSEG_ALLOC_CONF": "host_capacity_mb:8192, verbose:1, roundup_power2_divisions:[256:1,>:8]"})
        rc, so, se = out
        lines = so.splitlines()
        conf = lines[1] if len(lines) > 1 else ""
        check(rc == 0 and conf.startswith("config: "), "the configuration line follows the header", out)
        for part in ("backend:host (xseg-bench)", "verbose:1 (XSEG_ALLOC_CONF)",
                     "roundup_power2_divisions:[256:1,>:8] (XSEG_ALLOC_CONF)", "host_capacity_mb:1024 (--conf)",
                     "max_split_size_mb:256 (--conf)"):
            check(part in conf, "config line shows " + part, out)
        check("8192" not in conf, "--conf's host_capacity_mb replaces XSEG_ALLOC_CONF's", out)
        check("configuration:" in se and "verbose:True (api)" in se, "verbose:1 from XSEG_ALLOC_CONF takes effect", out)
        # host_capacity_mb:1024 takes effect: 2 MiB growth stops at the capacity.
        rows = [l.split() for l in lines if l.split()[:1] == ["2097152"]]
        check(rows and int(rows[0][1]) <= 512, "host_capacity_mb:1024 limits growth", out)

        out = run("--quick", "growth", env={"XSEG_ALLOC_CONF": "backend:host"})
        check(out[0] == 0 and "backend:host (XSEG_ALLOC_CONF)" in out[1], "a backend key picks the backend", out)

        # A section says which of the user's keys it measures itself.
        out = run("--quick", "--traces", d, "--conf", "host_capacity_mb:9000", "frag", "tiny")
        check(out[0] == 0 and "host_capacity_mb:9000 from --conf is not used here" in out[1], "frag names the key it sets",
              out)

        # passes honours --lag (a GPU running behind): says so, and frees
        # then wait for their fences, which changes what the first pass does.
        def first_pass(*extra):
            out = run("--backend", "host", *extra, "passes", "torch_gpt2m_train")
            rows = [l.split() for l in out[1].splitlines() if l.split()[:2] == ["torch_gpt2m_train", "1"]]
            return out, rows[0][5:] if rows else None
        out0, calls0 = first_pass()
        out4, calls4 = first_pass("--lag", "4")
        check(out0[0] == 0 and calls0 and "stream work completes" not in out0[1], "passes without --lag", out0)
        check(out4[0] == 0 and "stream work completes every 4 events" in out4[1], "passes --lag 4 says so", out4)
        check(calls4 and calls4 != calls0, "passes --lag 4 changes the first pass's driver calls", out4)
        # --passes N: N rows for the trace, numbered 1..N.
        out = run("--backend", "host", "--passes", "3", "passes", "torch_gpt2s_infer")
        nums = [l.split()[-13] for l in out[1].splitlines() if len(l.split()) >= 13 and l.split()[-12].isdigit()]
        check(out[0] == 0 and "each trace 3 times" in out[1] and nums == ["1", "2", "3"], "passes --passes 3: three rows", (out, nums))
        # So does replay.
        def replayed(*extra):
            out = run("--backend", "host", *extra, "replay", "torch_gpt2m_train")
            m = re.search(r'"num_device_alloc":(\d+)', out[1])
            return out, m and int(m.group(1))
        (r0, c0), (r4, c4) = replayed(), replayed("--lag", "4")
        check(r0[0] == 0 and c0 and "stream work completes" not in r0[1], "replay without --lag", r0)
        check(r4[0] == 0 and "stream work completes every 4 events" in r4[1], "replay --lag 4 says so", r4)
        check(c4 and c4 != c0, "replay --lag 4 changes the handles created (%s, %s)" % (c0, c4), r4)

        # frag --filler (host backend): the budget is what an allocation
        # outside xseg leaves free on a larger device, as on the GPU.
        out = run("--backend", "host", "--traces", d, "--filler", "64", "frag", "tiny")
        rows = [l.split() for l in out[1].splitlines() if l.split()[:1] == ["tiny"]]
        check(out[0] == 0 and "a device of 64 MiB, the rest held by a filler" in out[1], "frag --filler says so", out)
        check(rows and float(rows[0][3]) >= 1.0, "frag --filler: a min-budget figure for tiny", out)

        # replay --budget with --filler: a filler leaves that much free; with
        # --model h100 the replay is timed as an H100 would take it (its
        # driver calls cost their H100 figures, so slower than the host).
        def budget_replay(*extra):
            out = run("--backend", "host", "--traces", d, "--filler", "64", "--budget", "24", *extra, "replay", "tiny")
            m = re.search(r"\((\d+) ns/event\)", out[1])
            a = re.search(r'"num_set_access":(\d+)', out[1])
            return out, m and int(m.group(1)), a and int(a.group(1))
        (b0, _, _), (b1, t1, acc1) = budget_replay(), budget_replay("--model", "h100")
        check(b0[0] == 0 and "a filler leaves 24 of 64 MiB" in b0[1] and "modelled" not in b0[1],
              "replay --filler --budget says so", b0)
        check(b1[0] == 0 and "modelled H100 time" in b1[1], "replay --model h100 says so", b1)
        # The modelled replay is charged at least the H100's 24.7 us for each
        # of its set accesses (vmm/host_backend.c) over tiny's 6 events: a
        # floor that does not move with the host's load (comparing with the
        # host's own time for six events failed once beside another job).
        check(t1 is not None and acc1 and t1 * 6 >= acc1 * 24700,
              "modelled time covers the H100's set accesses (%s ns/event, %s set accesses)" % (t1, acc1), b1)
        # Under --model xseg reads modelled time only, so two replays are
        # charged and decide alike however busy the host is (the calls' times
        # once carried the host's own nanoseconds).
        (b2, _, _) = budget_replay("--model", "h100")
        def modelled(out):
            return re.findall(r'"(time_[a-z_]+_ns|num_create_waits)":(\d+)', out[1])
        check(b2[0] == 0 and len(modelled(b1)) >= 6 and modelled(b1) == modelled(b2),
              "replay --model h100 twice: the same modelled times", (modelled(b1), modelled(b2)))

        # The JSON records the configuration too.
        j = os.path.join(d, "out.json")
        out = run("--quick", "--json", j, "--conf", 'stats_file:', "growth")
        try:
            with open(j) as f:
                doc = json.load(f)
            ok = "stats_file: (--conf)" in doc["machine"]["config"] and len(doc["growth"]) == 6
        except (OSError, ValueError, KeyError):
            ok = False
        check(out[0] == 0 and ok, "--json: valid, with the configuration", out)

    plot_without_matplotlib()
    return summary("test_cli")


def plot_without_matplotlib():
    """benchmarks/plot.py with no matplotlib: a message naming the package
    to install, a failing status, and no pip run behind the user's back."""
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "plot.py")
    with tempfile.TemporaryDirectory() as d:
        marker = os.path.join(d, "pip-ran")
        for pkg, code in (("matplotlib", "raise ImportError('no matplotlib here')\n"),
                          ("pip", "open(%r, 'w').close()\n" % marker)):
            os.makedirs(os.path.join(d, pkg))
            for f in ("__init__.py", "__main__.py"):
                with open(os.path.join(d, pkg, f), "w") as fh:
                    fh.write(code)
        env = dict(os.environ, PYTHONPATH=d, PIP_NO_INDEX="1")
        p = subprocess.run([sys.executable, plot, d, d], env=env, capture_output=True, text=True, timeout=60)
        out = (p.returncode, p.stdout, p.stderr)
        check(p.returncode != 0 and "pip install matplotlib" in p.stderr, "plot.py: says to pip install matplotlib", out)
        check(not os.path.exists(marker), "plot.py: does not run pip itself", out)


if __name__ == "__main__":
    sys.exit(main())
