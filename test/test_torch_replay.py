#!/usr/bin/env python3
"""The bisection and trace parsing of test/gpu/torch_replay.py, without torch.

A stand-in replayer succeeds exactly when the budget is at least a chosen
threshold, so min_budget must return the smallest multiple of the step at or
above it, for thresholds at, just above and well above the peak, and give up
past 4x; where budgets just above that edge fail, the figure is above them.  parse_trace must compute the peak and reject malformed traces.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import torch_replay  # noqa: E402  (imports no torch at module level)
from checks import check, summary  # noqa: E402

MIB = torch_replay.MIB

class Stub(torch_replay.Replayer):
    def __init__(self, need, overrun=0):
        self.need, self.overrun, self.last, self.calls = need, overrun, 0, 0

    def replay(self, events, budget):
        self.calls += 1
        self.last = budget
        return budget >= self.need

    def peak_reserved(self):
        return self.last + self.overrun


def write(text):
    fd, path = tempfile.mkstemp(suffix=".trace")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


path = write("# c\na 1 3000000\na 2 5000000 1\nf 1\na 3 1000\nf 2 1\nf 3\n")
events, peak = torch_replay.parse_trace(path)
os.unlink(path)
check(peak == 8000000, "peak %d, expected 8000000" % peak)
check(events[1] == (0, 2, 5000000, 1) and events[4] == (1, 2, 0, 1), "events %r" % events)

for bad in ("a 1 0\n", "f 9\n", "a 1 5\na 1 5\n", "x 1\n", "a one 5\n"):
    path = write(bad)
    try:
        torch_replay.parse_trace(path)
        check(False, "malformed trace accepted: %r" % bad)
    except SystemExit as e:
        check("malformed" in str(e), "unclear message for %r: %s" % (bad, e))
    finally:
        os.unlink(path)

peak = 1000 * MIB + 12345
for need in (peak, peak + 1, 1013 * MIB, 1200 * MIB + 7, 3999 * MIB):
    s = Stub(need)
    budget, trials, held = s.min_budget([], peak)
    want = -(-need // MIB) * MIB
    check(budget == want, "need %d: budget %s, expected %d" % (need, budget, want))
    check(held == budget, "held %s at budget %s" % (held, budget))
    check(trials == s.calls, "trials %d, replays %d" % (trials, s.calls))
    check(trials < 25 + torch_replay.STABLE_TRIES, "need %d: %d trials" % (need, trials))


class Holes(Stub):
    # Fits from `need` up but in the budgets listed: a replay that fits at
    # bisection's edge by luck and fails just above it.
    def __init__(self, need, holes):
        Stub.__init__(self, need)
        self.holes = holes

    def replay(self, events, budget):
        return Stub.replay(self, events, budget) and budget not in self.holes


s = Holes(1013 * MIB, {1014 * MIB, 1017 * MIB})
budget, trials, held = s.min_budget([], peak)
check(budget == 1018 * MIB, "holes above the edge: budget %s MiB, expected 1018" % (budget // MIB))
check(trials == s.calls, "holes: trials %d, replays %d" % (trials, s.calls))

s = Stub(5 * peak)
budget, trials, held = s.min_budget([], peak)
check(budget is None and held is None, "gave a budget past 4x: %s" % budget)

s = Stub(1013 * MIB, overrun=3 * MIB)
budget, trials, held = s.min_budget([], peak)
check(budget == 1013 * MIB and held == 1016 * MIB, "overrun: budget %s held %s" % (budget, held))

# --at's SPEC: one factor, or NAME:FACTOR pairs with *:FACTOR for the rest.
check(torch_replay.factors("1.02") == {"*": 1.02}, "factors('1.02')")
got = torch_replay.factors("rmm_uniform:1.0941,grow_then_split:1.2,*:1.05")
check(got == {"rmm_uniform": 1.0941, "grow_then_split": 1.2, "*": 1.05}, "factors: %r" % got)
for bad, words in (("x:abc", "not a factor"), ("0.5", "outside"), ("a:9", "outside")):
    try:
        torch_replay.factors(bad)
        check(False, "--at %s accepted" % bad)
    except SystemExit as e:
        check(words in str(e), "unclear message for --at %s: %s" % (bad, e))

# xseg's driver counters, as torch_passes.py and --at read them.
st = {k: 1 for k in torch_replay.DRIVER_CALLS}
st.update({k: 10 for k in torch_replay.DRIVER_TIMES}, num_grows=3, unrelated=7)
got = torch_replay.xseg_driver_counts(st, ("num_grows",))
want = dict({k: 1 for k in torch_replay.DRIVER_CALLS}, **{k: 10 for k in torch_replay.DRIVER_TIMES})
check(got == dict(want, num_grows=3, driver_ns=50), "driver counts %r" % got)
# A replay's counters: a later snapshot less an earlier one (keys of the later).
got = torch_replay.counts_since({"num_map": 2, "gone": 5}, {"num_map": 7, "driver_ns": 9})
check(got == {"num_map": 5, "driver_ns": 9}, "counts since %r" % got)
# Each kind's count and milliseconds, in the order of the driver's calls.
got = torch_replay.driver_split(dict(want, time_create_ns=1500000, time_set_access_ns=2000000))
check(got == "1 create 1.5, 1 release 0.0, 1 map 0.0, 1 unmap 0.0, 1 set access 2.0", "driver split %r" % got)

sys.exit(summary("test_torch_replay"))
