"""Tests of the xseg Python package on the host backend: no torch, no GPU.

Run with either of
    XSEG_LIBRARY=<build>/libxseg.so python3 -m pytest python/tests
    XSEG_LIBRARY=<build>/libxseg.so python3 python/tests/test_xseg.py
Without XSEG_LIBRARY the tests use <repo>/build/libxseg.so when it exists,
else the package's own search.
"""

import ctypes
import json
import os
import subprocess
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)

if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)
if "XSEG_LIBRARY" not in os.environ:
    _default = os.path.join(REPO, "build", "libxseg.so")
    if os.path.exists(_default):
        os.environ["XSEG_LIBRARY"] = _default

import xseg  # noqa: E402

HOST_CONF = "backend:host,host_capacity_mb:64"
MiB = 1 << 20


def _subprocess_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


class XsegHostTest(unittest.TestCase):
    def setUp(self):
        xseg.init(HOST_CONF)
        self.lib = xseg.lib()
        self.live = []

    def tearDown(self):
        for p in self.live:
            self.lib.xseg_free(p)
        self.live = []
        xseg.init(HOST_CONF)  # leave a valid configuration for the next test

    def alloc(self, size, device=0):
        p = self.lib.xseg_malloc(size, device, None)
        self.assertTrue(p, "xseg_malloc(%d) failed: %s" % (size, self.lib.xseg_last_error()))
        self.live.append(p)
        return p

    def free(self, p):
        self.assertEqual(self.lib.xseg_free(p), 0, self.lib.xseg_last_error())
        self.live.remove(p)

    # -- loading ----------------------------------------------------------

    def test_library_path_and_version(self):
        path = xseg.library_path()
        self.assertTrue(os.path.exists(path), path)
        self.assertIn("libxseg", os.path.basename(path))
        v = xseg.version()
        self.assertRegex(v, r"^\d+\.\d+\.\d+$")

    def test_bad_library_path_names_it(self):
        bogus = os.path.join(HERE, "no-such-dir", "libxseg.so")
        code = "import xseg\ntry:\n    xseg.version()\nexcept xseg.XsegError as e:\n    print('ERR', e)\n"
        r = subprocess.run(
            [sys.executable, "-c", code],
            env=_subprocess_env(XSEG_LIBRARY=bogus),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ERR", r.stdout)
        self.assertIn(bogus, r.stdout)
        self.assertIn("XSEG_LIBRARY", r.stdout)

    # -- stats ------------------------------------------------------------

    def test_stats_torch_style_keys(self):
        s = xseg.stats(0)
        for key in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                    "inactive_split_bytes", "allocation", "segment"):
            self.assertIn(key, s)
            for pool in ("all", "small_pool", "large_pool"):
                self.assertIn(pool, s[key])
                for stat in ("current", "peak", "allocated", "freed"):
                    self.assertIsInstance(s[key][pool][stat], int, (key, pool, stat))
        for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
            self.assertIsInstance(s[key], int, key)

    def test_stats_change_after_allocating(self):
        before = xseg.stats(0)["allocated_bytes"]["all"]["current"]
        p = self.alloc(3 * MiB)
        q = self.alloc(1000)
        s = xseg.stats(0)
        self.assertGreaterEqual(s["allocated_bytes"]["all"]["current"], before + 3 * MiB + 1000)
        self.assertGreaterEqual(s["allocated_bytes"]["all"]["peak"], s["allocated_bytes"]["all"]["current"])
        self.assertGreaterEqual(s["reserved_bytes"]["all"]["current"], s["allocated_bytes"]["all"]["current"])
        self.assertGreaterEqual(s["allocation"]["all"]["current"], 2)
        peak = s["allocated_bytes"]["all"]["peak"]
        self.free(p)
        self.free(q)
        s = xseg.stats(0)
        self.assertEqual(s["allocated_bytes"]["all"]["current"], before)
        self.assertEqual(s["allocated_bytes"]["all"]["peak"], peak)
        xseg.reset_peak_stats(0)
        self.assertEqual(xseg.stats(0)["allocated_bytes"]["all"]["peak"], before)

    def test_memory_stats_flat(self):
        p = self.alloc(2 * MiB)
        flat = xseg.memory_stats(0)
        nested = xseg.stats(0)
        self.assertEqual(flat["allocated_bytes.all.current"], nested["allocated_bytes"]["all"]["current"])
        self.assertIn("reserved_bytes.all.peak", flat)
        self.assertIn("num_ooms", flat)
        self.free(p)

    def test_stats_bad_device(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.stats(7)
        self.assertEqual(cm.exception.code, xseg.XSEG_ENODEV)
        self.assertIn("7", str(cm.exception))

    # -- summary, snapshot, heap check, cache ---------------------------------

    def test_summary(self):
        p = self.alloc(5 * MiB)
        text = xseg.summary(0)
        self.assertIsInstance(text, str)
        self.assertIn("Allocated memory", text)
        self.free(p)

    def test_snapshot(self):
        p = self.alloc(4 * MiB)
        snap = xseg.snapshot(0)
        self.assertIsInstance(snap, dict)
        self.assertIn("segments", snap)
        self.assertTrue(snap["segments"], "a live allocation should show a segment")
        json.dumps(snap)
        self.free(p)

    def test_check_heap_and_empty_cache(self):
        ps = [self.alloc(s) for s in (1 * MiB, 7 * MiB, 100, 12 * MiB)]
        self.assertTrue(xseg.check_heap(0))
        self.assertTrue(xseg.check_heap())
        for p in ps[::2]:
            self.free(p)
        self.assertTrue(xseg.check_heap())
        xseg.empty_cache()
        xseg.empty_cache(0)
        self.assertTrue(xseg.check_heap(-1))

    def test_free_errors(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.free(0x1234000)
        self.assertEqual(cm.exception.code, xseg.XSEG_EINVAL)
        xseg.free(0)  # NULL is a no-op

    def test_package_malloc_free(self):
        p = xseg.malloc(MiB)
        self.assertIsInstance(p, int)
        self.assertEqual(p % 512, 0)
        xseg.free(p)
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.malloc(1 << 40)
        self.assertEqual(cm.exception.code, xseg.XSEG_ENOMEM)

    def test_torch_entry_points_size_zero(self):
        self.assertIsNone(self.lib.xseg_torch_alloc(0, 0, None))
        p = self.lib.xseg_torch_alloc(4096, 0, None)
        self.assertTrue(p)
        self.lib.xseg_torch_free(p, 4096, 0, None)
        self.assertEqual(xseg.stats(0)["allocated_bytes"]["all"]["current"], 0)

    # -- configuration --------------------------------------------------------

    def test_invalid_init_names_the_key(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.init("backend:host,not_a_real_key:3")
        self.assertEqual(cm.exception.code, xseg.XSEG_ECONFIG)
        self.assertIn("not_a_real_key", str(cm.exception))
        self.assertIn("not_a_real_key", cm.exception.message)
        # Nothing is allocated until a valid configuration is given.
        self.assertFalse(self.lib.xseg_malloc(1024, 0, None))
        xseg.init(HOST_CONF)
        self.alloc(1024)

    def test_invalid_value_names_the_key(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.init("backend:host,host_granularity_kb:3")
        self.assertIn("host_granularity_kb", str(cm.exception))

    def test_init_busy(self):
        self.alloc(1024)
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.init(HOST_CONF)
        self.assertEqual(cm.exception.code, xseg.XSEG_EBUSY)
        with self.assertRaises(xseg.XsegError):
            xseg.shutdown()

    def test_config_and_devices(self):
        xseg.init(HOST_CONF + ",host_devices:2")
        text = xseg.config()
        self.assertIn("host_capacity_mb", text)
        self.assertEqual(xseg.device_count(), 2)
        p = self.alloc(MiB, device=1)
        self.assertGreater(xseg.stats(1)["allocated_bytes"]["all"]["current"], 0)
        self.assertEqual(xseg.stats(0)["allocated_bytes"]["all"]["current"], 0)
        self.free(p)

    def test_shutdown_and_reinit(self):
        xseg.shutdown()
        xseg.init(HOST_CONF)
        self.assertEqual(xseg.stats(0)["allocated_bytes"]["all"]["peak"], 0)


class TorchModuleWithoutTorchTest(unittest.TestCase):
    def test_import_and_enable_without_torch(self):
        # sys.modules["torch"] = None makes `import torch` raise ImportError,
        # whether or not torch is installed here.
        with mock.patch.dict(sys.modules, {"torch": None}):
            import xseg.torch as xt

            self.assertFalse(xt.is_enabled())
            with self.assertRaises(xseg.XsegError) as cm:
                xt.enable()
            self.assertIn("PyTorch", str(cm.exception))
            self.assertFalse(xt.is_enabled())

    def test_import_in_fresh_interpreter(self):
        code = (
            "import sys\n"
            "sys.modules['torch'] = None\n"
            "import xseg, xseg.torch\n"
            "try:\n"
            "    xseg.torch.enable()\n"
            "except xseg.XsegError as e:\n"
            "    print('ERR', e)\n"
            "print('torch' in sys.modules and sys.modules['torch'] is not None)\n"
        )
        r = subprocess.run([sys.executable, "-c", code], env=_subprocess_env(),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ERR", r.stdout)
        self.assertIn("needs PyTorch", r.stdout)
        self.assertTrue(r.stdout.strip().endswith("False"), r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
