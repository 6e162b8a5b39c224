#!/usr/bin/env python3
"""Tests of benchmarks/ideal_pages.py, the model of an allocator whose page
moves cost nothing: its placement and page counts on hand-made traces whose
answers are worked out by hand, and its error on a malformed trace."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, "benchmarks", "ideal_pages.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import ideal_pages as ip  # noqa: E402

MIB, PAGE = ip.MIB, 2 * ip.MIB
FAILED = []  # what each failed check expected


def check(cond, what):
    """Record and print `what` unless cond holds."""
    if cond:
        return
    FAILED.append(what)
    print("FAIL: " + what)


def trace(tmp, name, lines):
    path = os.path.join(tmp, name + ".trace")
    with open(path, "w") as f:
        f.write("# a hand-made trace\n" + "\n".join(lines) + "\n")
    return path


def pool_cases():
    # Two 3 MiB blocks: the second starts where the first ends, in the
    # first's last page, and adds one page; aligned, it takes two.
    p = ip.Pool(PAGE, False)
    check(p.place(3 * MIB) == (0, 2), "first block at 0 on two new pages")
    check(p.place(3 * MIB) == (3 * MIB, 1), "second block shares the first's last page")
    q = ip.Pool(PAGE, True)
    q.place(3 * MIB)
    check(q.place(3 * MIB) == (4 * MIB, 2), "aligned: the second block starts on the next page")
    # A shared page stays held until both blocks are gone.
    check(p.free(0) == 1, "freeing the first gives back its own page only")
    check(p.free(3 * MIB) == 2, "freeing the second gives back the shared page and its own")
    # A hole is preferred to the open end when both cost as many pages.
    r = ip.Pool(PAGE, False)
    r.place(4 * MIB)
    r.place(4 * MIB)
    r.free(0)
    check(r.place(2 * MIB) == (0, 1), "a 2 MiB block goes into the 4 MiB hole, not after the last block")
    # Fewest new pages first, before the smaller range: a 3 MiB block
    # takes two new pages in the 4 MiB hole at 0 (its end is page-aligned)
    # and one after the live block [4, 7) MiB, which ends mid-page.
    s = ip.Pool(PAGE, False)
    s.place(4 * MIB)
    check(s.place(3 * MIB) == (4 * MIB, 2), "a 3 MiB block after a 4 MiB one on two new pages")
    s.free(0)
    check(s.place(3 * MIB) == (7 * MIB, 1), "a 3 MiB block in the live block's last page, not the hole")
    # Equal new pages: the place that shares fewer pages.
    t = ip.Pool(PAGE, False)
    t.place(5 * MIB)
    check(t.place(4 * MIB) == (6 * MIB, 2), "a 4 MiB block starts on the next page rather than share one")


def replay_cases(tmp):
    two = trace(tmp, "two", ["a 1 3145728", "a 2 3145728", "f 1", "f 2"])
    check(ip.replay(two, PAGE, MIB, False) == (6 * MIB, 3), "two 3 MiB blocks: 6 MiB live, 3 pages")
    check(ip.replay(two, PAGE, MIB, True) == (6 * MIB, 4), "aligned: 4 pages")
    # Pools of different streams share no page.
    streams = trace(tmp, "streams", ["a 1 3145728 0", "a 2 3145728 7", "f 1 0", "f 2 7"])
    check(ip.replay(streams, PAGE, MIB, False) == (6 * MIB, 4), "two streams: 4 pages")
    # Small blocks (at most --small-mib) and large ones keep apart.
    mixed = trace(tmp, "mixed", ["a 1 1048576", "a 2 3145728"])
    check(ip.replay(mixed, PAGE, MIB, False) == (4 * MIB, 3), "a small and a large block: 3 pages")
    # Sizes round up to 512 bytes: two of 1 byte and one of 1 MiB less
    # 512 fill one page to the byte; one byte more takes a second page.
    # The peak is of the sizes asked for.
    tiny = trace(tmp, "tiny", ["a 1 1", "a 2 1", "a 3 1048064"])
    check(ip.replay(tiny, PAGE, 2 * MIB, False) == (1048066, 1), "blocks rounded to fill one page: one page")
    over = trace(tmp, "over", ["a 1 1", "a 2 1", "a 3 1048064", "a 4 1048065"])
    check(ip.replay(over, PAGE, 2 * MIB, False) == (2096131, 2), "one byte over the page: two pages")
    # The command line: the table, and exit status 2 naming a bad line.
    out = subprocess.run([sys.executable, SCRIPT, two], capture_output=True, text=True)
    row = [l.split() for l in out.stdout.splitlines() if l.startswith("two")]
    check(out.returncode == 0 and row and row[0][1:] == ["6.0", "3", "1.0000", "1.3333"],
          "command line row for the two-block trace: %r" % out.stdout)
    bad = trace(tmp, "bad", ["a 1 4096", "x 2"])
    out = subprocess.run([sys.executable, SCRIPT, bad], capture_output=True, text=True)
    check(out.returncode == 2 and "bad.trace:3" in out.stderr and "unknown event" in out.stderr,
          "a malformed line fails with its file and line: %r" % out.stderr)
    for name, lines, where in (("twice", ["a 1 4096", "f 1", "f 1"], "twice.trace:4"),
                               ("again", ["a 1 4096", "a 1 4096"], "again.trace:3"),
                               ("empty", ["a 1 0"], "empty.trace:2")):
        out = subprocess.run([sys.executable, SCRIPT, trace(tmp, name, lines)], capture_output=True, text=True)
        check(out.returncode == 2 and where in out.stderr and "malformed event" in out.stderr,
              "a free of no live block, an id live twice, a size of 0 fail at %s: %r" % (where, out.stderr))
    out = subprocess.run([sys.executable, SCRIPT, "--page-mib", "0", two], capture_output=True, text=True)
    check(out.returncode == 2 and "--page-mib" in out.stderr, "a page of 0 MiB is refused: %r" % out.stderr)
    out = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "missing.trace")], capture_output=True, text=True)
    check(out.returncode == 2 and "missing" in out.stderr, "a missing trace fails by name: %r" % out.stderr)


def main():
    pool_cases()
    with tempfile.TemporaryDirectory() as tmp:
        replay_cases(tmp)
    print("test_ideal_pages: %s" % ("%d failed" % len(FAILED) if FAILED else "all passed"))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
