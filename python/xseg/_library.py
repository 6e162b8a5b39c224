"""xseg._library: finding and loading libxseg.so, and declaring its C
signatures for ctypes.

Where the library comes from, in this order:
  1. the environment variable XSEG_LIBRARY (a path to libxseg.so); when it
     is set it is the only candidate, so a wrong path is an error rather
     than a silent fallback;
  2. a libxseg.so* file next to this package (in the package directory or
     the directory that holds it);
  3. ctypes.util.find_library("xseg"), i.e. the system's library path.
"""

import ctypes
import ctypes.util
import glob
import os
import threading

from ._errors import XsegError


_lock = threading.Lock()
_lib = None
_lib_path = None

_c_ssize_t = getattr(ctypes, "c_ssize_t", ctypes.c_long)

# name: (restype, argtypes, required).  Required names are the design's
# fixed contract; the others are newer API that a library under
# development may lack, reported only when called.
_SIGNATURES = {
    "xseg_malloc": (ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p], True),
    "xseg_free": (ctypes.c_int, [ctypes.c_void_p], True),
    "xseg_record_stream": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p], True),
    "xseg_empty_cache": (ctypes.c_int, [ctypes.c_int], True),
    "xseg_reset_peak_stats": (ctypes.c_int, [ctypes.c_int], True),
    "xseg_stats_json": (ctypes.c_size_t, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t], True),
    "xseg_print_summary": (None, [ctypes.c_int, ctypes.c_void_p], True),
    "xseg_last_error": (ctypes.c_char_p, [], True),
    "xseg_torch_alloc": (ctypes.c_void_p, [_c_ssize_t, ctypes.c_int, ctypes.c_void_p], True),
    "xseg_torch_free": (None, [ctypes.c_void_p, _c_ssize_t, ctypes.c_int, ctypes.c_void_p], True),
    "xseg_last_error_code": (ctypes.c_int, [], False),
    "xseg_init": (ctypes.c_int, [ctypes.c_char_p], False),
    "xseg_shutdown": (ctypes.c_int, [], False),
    "xseg_check_heap": (ctypes.c_int, [ctypes.c_int], False),
    "xseg_snapshot_json": (ctypes.c_size_t, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t], False),
    "xseg_config_describe": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t], False),
    "xseg_device_count": (ctypes.c_int, [], False),
    "xseg_enable_peer_access": (ctypes.c_int, [ctypes.c_int, ctypes.c_int], False),
    "xseg_version": (ctypes.c_char_p, [], False),
    "xseg_config_check": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t], False),
    "xseg_configure": (ctypes.c_int, [ctypes.c_char_p], False),
    "xseg_reset_accumulated_stats": (ctypes.c_int, [ctypes.c_int], False),
}


def _candidates():
    """The (description, path-or-name) pairs to try, in order."""
    env = os.environ.get("XSEG_LIBRARY")
    if env:
        return [("XSEG_LIBRARY=%s" % env, env)], True
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    folders = (here, os.path.dirname(here))
    for folder in folders:
        names = glob.glob(os.path.join(folder, "libxseg.so*"))
        # Prefer the plain name, then the shortest versioned one.
        names.sort(key=lambda p: (len(os.path.basename(p)), p))
        for p in names:
            out.append(("%s (next to the package)" % p, p))
    if not out:
        out.append(("no libxseg.so* next to the package (in %s)" % " or ".join(folders), None))
    found = ctypes.util.find_library("xseg")
    if found:
        out.append(('ctypes.util.find_library("xseg") -> %s' % found, found))
    else:
        out.append(('ctypes.util.find_library("xseg") found nothing', None))
    return out, False


def _loaded_path(cdll, fallback):
    """The file the dynamic linker actually loaded, for library_path()."""
    try:
        class _DlInfo(ctypes.Structure):
            _fields_ = [
                ("dli_fname", ctypes.c_char_p),
                ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p),
            ]

        for libname in (None, ctypes.util.find_library("dl"), ctypes.util.find_library("c")):
            try:
                host = ctypes.CDLL(libname)
                dladdr = host.dladdr
            except (OSError, AttributeError):
                continue
            dladdr.restype = ctypes.c_int
            dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
            info = _DlInfo()
            addr = ctypes.cast(cdll.xseg_free, ctypes.c_void_p).value
            if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
                return os.path.abspath(os.fsdecode(info.dli_fname))
    except Exception:  # pragma: no cover - best effort only
        pass
    if fallback and os.path.sep in fallback:
        return os.path.abspath(fallback)
    return fallback


def _declare(cdll):
    for name, (restype, argtypes, required) in _SIGNATURES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            if required:
                raise XsegError(None, "the library lacks the required symbol %s" % name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes


def load():
    """Load libxseg once and return the CDLL; raise XsegError if none loads."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        cands, explicit = _candidates()
        tried = []
        for desc, target in cands:
            if target is None:
                tried.append(desc)
                continue
            try:
                cdll = ctypes.CDLL(target)
                _declare(cdll)
            except (OSError, XsegError) as e:
                tried.append("%s: %s" % (desc, e))
                continue
            _lib_path = _loaded_path(cdll, target)
            _lib = cdll
            return _lib
        hint = (
            "fix the path in XSEG_LIBRARY"
            if explicit
            else "set XSEG_LIBRARY to the path of libxseg.so (built as build/libxseg.so), "
            "or copy libxseg.so next to the xseg package"
        )
        raise XsegError(None, "cannot load libxseg; tried:\n  " + "\n  ".join(tried) + "\n" + hint)


def path():
    """The file the loaded library came from (None before load())."""
    return _lib_path
