"""Tests of xseg's PyTorch binding that need torch but no GPU.

They run against the installed package (pip install --no-build-isolation
./python, where torch is installed), on xseg's host backend where memory is
involved:
  - the allocation path and the statistics mapping, called as torch calls
    them (getDeviceStats with torch's key names and meanings);
  - out of memory as torch sees it;
  - selection with the environment variable alone (torch's backend
    autoload at `import torch`), and the refusals that keep it honest.
Exit code 77 (skipped) without torch or without the built binding.
"""

import json
import os
import subprocess
import sys
import unittest

try:
    import torch
    import xseg
    import xseg.torch as xt
    from xseg import _torch as binding
except ImportError as e:  # no torch, or a package built without it
    print("skipped: %s" % e)
    sys.exit(77)

MiB = 1 << 20
HOST = "backend:host,host_capacity_mb:64"

# The keys torch.cuda.memory_stats_as_nested_dict() has (torch's DeviceStats).
POOLED = ["allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
          "active_bytes", "inactive_split_bytes", "requested_bytes"]
SINGLE = ["oversize_allocations", "oversize_segments"]
COUNTS = ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
          "max_split_size"]
FIELDS = ["current", "peak", "allocated", "freed"]


def run_python(code, **env):
    e = dict(os.environ)
    e.pop("XSEG_ALLOC_CONF", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


class StatsMapping(unittest.TestCase):
    def setUp(self):
        xseg.init(HOST)
        self.live = []

    def tearDown(self):
        for p in self.live:
            binding._test_free(p)
        xseg.init(HOST)

    def alloc(self, n):
        p = binding._test_alloc(n, 0)
        self.live.append(p)
        return p

    def test_keys_are_torch_keys(self):
        s = binding._test_stats(0)
        self.assertEqual(set(s), set(POOLED + SINGLE + COUNTS))
        for k in POOLED:
            self.assertEqual(set(s[k]), {"all", "small_pool", "large_pool"})
            for pool in s[k].values():
                self.assertEqual(set(pool), set(FIELDS))
        for k in SINGLE:
            self.assertEqual(set(s[k]), set(FIELDS))

    def test_values_follow_xsegs_counters(self):
        for n in (1000, 300 * 1024, 3 * MiB, 5 * MiB + 7):
            self.alloc(n)
        binding._test_free(self.live.pop(1))
        s, x = binding._test_stats(0), xseg.stats(0)
        for k in POOLED:
            for pool in ("all", "small_pool", "large_pool"):
                for f in FIELDS:
                    self.assertEqual(s[k][pool][f], x[k][pool][f], "%s.%s.%s" % (k, pool, f))
        self.assertEqual(s["allocation"]["all"]["current"], 3)
        self.assertEqual(s["requested_bytes"]["all"]["current"], 1000 + 3 * MiB + 5 * MiB + 7)
        self.assertEqual(s["allocated_bytes"]["all"]["current"], 512 * 2 + 3 * MiB + 5 * MiB + 512)
        self.assertEqual(s["num_sync_all_streams"], 0)
        self.assertEqual(s["max_split_size"], -1)  # no limit, as torch shows it
        self.assertEqual(s["num_device_alloc"], x["num_device_alloc"])

    def test_resets(self):
        self.alloc(3 * MiB)
        binding._test_free(self.live.pop())
        xseg.reset_peak_stats(0)
        s = binding._test_stats(0)
        self.assertEqual(s["allocated_bytes"]["all"]["peak"], 0)
        self.assertEqual(s["allocated_bytes"]["all"]["allocated"], 3 * MiB)
        xseg.lib().xseg_reset_accumulated_stats(0)
        s = binding._test_stats(0)
        self.assertEqual(s["allocated_bytes"]["all"]["allocated"], 0)
        self.assertEqual(s["num_device_alloc"], 0)

    def test_out_of_memory_reads_as_torchs(self):
        with self.assertRaises(MemoryError) as cm:
            self.alloc(1 << 30)
        text = str(cm.exception)
        self.assertTrue(text.startswith("CUDA out of memory. xseg: out of memory on device 0"), text)
        self.assertIn("Cause:", text)
        self.assertEqual(binding._test_stats(0)["num_ooms"], 1)

    def test_out_of_memory_says_where_the_free_memory_lies(self):
        # 21 blocks of 3 MiB fill the 64 MiB device; with every odd one freed
        # its 10 whole free pages are short of a 24 MiB request, and the other
        # 11 MiB lie in pages the blocks left share (test/test_stats.c,
        # oom_free_memory_in_shared_pages, through torch's entry point).
        blocks = [self.alloc(3 * MiB) for _ in range(21)]
        for p in blocks[1::2]:
            self.live.remove(p)
            binding._test_free(p)
        with self.assertRaises(MemoryError) as cm:
            self.alloc(24 * MiB)
        text = str(cm.exception)
        self.assertIn("of the 31.00 MiB free inside xseg's segments, 11.00 MiB lies in pages that live blocks share",
                      text)
        self.assertIn("the whole free pages and the room left come to 10 pages, and the request needs 12", text)
        self.assertEqual(xseg.stats(0)["free_in_shared_pages_bytes"], 11 * MiB)


class Selection(unittest.TestCase):
    PROBE = "import torch; print(torch.cuda.get_allocator_backend())"

    def test_the_variable_alone_selects_xseg(self):
        r = run_python(self.PROBE, XSEG_ALLOC_CONF="max_split_size_mb:256")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip().splitlines()[-1], "xseg")
        r = run_python(self.PROBE, XSEG_ALLOC_CONF="")  # set but empty: the defaults
        self.assertEqual(r.stdout.strip().splitlines()[-1], "xseg", r.stderr)

    def test_without_the_variable_nothing_changes(self):
        r = run_python(self.PROBE)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip().splitlines()[-1], "native")

    def test_a_bad_configuration_stops_the_program(self):
        r = run_python(self.PROBE, XSEG_ALLOC_CONF="expandable_segments:maybe")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("expandable_segments", r.stderr)
        self.assertIn("expandable_segments:True|False", r.stderr)
        self.assertNotIn("native", r.stdout)
        r = run_python(self.PROBE, XSEG_ALLOC_CONF="no_such_key:1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no_such_key", r.stderr)

    def test_refusals_name_the_problem(self):
        r = run_python(self.PROBE, XSEG_ALLOC_CONF="backend:host")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("backend:host", r.stderr)
        r = run_python(self.PROBE, XSEG_ALLOC_CONF="", PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF", r.stderr)

    def test_enable_in_code_and_twice(self):
        code = (
            "import torch, xseg.torch as xt\n"
            "assert torch.cuda.get_allocator_backend() == 'native'\n"
            "xt.enable('max_split_size_mb:64')\n"
            "xt.enable()\n"
            "try:\n"
            "    xt.enable('verbose:1')\n"
            "except xt.XsegError as e:\n"
            "    print('second conf refused:', e)\n"
            "print(torch.cuda.get_allocator_backend(), xt.is_enabled())\n"
        )
        r = run_python(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("second conf refused", r.stdout)
        self.assertTrue(r.stdout.strip().endswith("xseg True"), r.stdout)

    def test_a_binding_for_another_torch_is_refused(self):
        class OtherTorch:
            __version__ = "0.0.1"

        with self.assertRaises(xseg.XsegError) as cm:
            xt._binding(OtherTorch)
        self.assertIn(binding.TORCH_VERSION, str(cm.exception))
        self.assertIn("0.0.1", str(cm.exception))
        self.assertIn("--no-build-isolation", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
