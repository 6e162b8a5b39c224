"""xseg: Python bindings (ctypes only) for the xseg GPU memory allocator.

The package loads libxseg.so and wraps its C API (include/xseg.h).  It needs
neither PyTorch nor a GPU: with XSEG_ALLOC_CONF=backend:host,... (or
``xseg.init("backend:host,...")``) the library simulates a device on host
memory.  ``xseg.torch`` installs xseg as PyTorch's CUDA allocator.

Where the library comes from, in this order:
  1. the environment variable XSEG_LIBRARY (a path to libxseg.so); when it
     is set it is the only candidate, so a wrong path is an error rather
     than a silent fallback;
  2. a libxseg.so* file next to this package (in the package directory or
     the directory that holds it);
  3. ctypes.util.find_library("xseg"), i.e. the system's library path.

Every function that wraps a C call returning an error code raises XsegError
(carrying the code and xseg_last_error()) when the code is not 0.
"""

import ctypes
import ctypes.util
import glob
import json
import os
import tempfile
import threading

__all__ = [
    "XsegError",
    "init",
    "shutdown",
    "stats",
    "memory_stats",
    "summary",
    "empty_cache",
    "reset_peak_stats",
    "snapshot",
    "check_heap",
    "config",
    "device_count",
    "enable_peer_access",
    "record_stream",
    "malloc",
    "free",
    "version",
    "library_path",
    "lib",
]

__version__ = "0.1.0"

# Error codes of include/xseg.h.
XSEG_OK = 0
XSEG_EINVAL = 1
XSEG_ENOMEM = 2
XSEG_ECONFIG = 3
XSEG_ENODRIVER = 4
XSEG_ENODEV = 5
XSEG_EBACKEND = 6
XSEG_ENOTSUP = 7
XSEG_EBUSY = 8
XSEG_ENOTREADY = 9
XSEG_ECORRUPT = 10
XSEG_ERANGE = 11

ERROR_NAMES = {
    XSEG_OK: "XSEG_OK",
    XSEG_EINVAL: "XSEG_EINVAL",
    XSEG_ENOMEM: "XSEG_ENOMEM",
    XSEG_ECONFIG: "XSEG_ECONFIG",
    XSEG_ENODRIVER: "XSEG_ENODRIVER",
    XSEG_ENODEV: "XSEG_ENODEV",
    XSEG_EBACKEND: "XSEG_EBACKEND",
    XSEG_ENOTSUP: "XSEG_ENOTSUP",
    XSEG_EBUSY: "XSEG_EBUSY",
    XSEG_ENOTREADY: "XSEG_ENOTREADY",
    XSEG_ECORRUPT: "XSEG_ECORRUPT",
    XSEG_ERANGE: "XSEG_ERANGE",
}


class XsegError(RuntimeError):
    """An error reported by libxseg, or a failure to load or use it.

    ``code`` is the XSEG_E* code (an int), or None when the error did not
    come from the library (for instance when it could not be loaded).
    ``message`` is the library's xseg_last_error() text or our own.
    """

    def __init__(self, code, message):
        self.code = code
        self.message = message
        if code is None:
            text = message
        else:
            text = "[%s] %s" % (ERROR_NAMES.get(code, "error %d" % code), message)
        super().__init__(text)


# ---- loading the library ---------------------------------------------------

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


def _load():
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


def lib():
    """The loaded ctypes.CDLL, with argument and result types declared.

    For calls the wrappers below do not cover, e.g.
    ``xseg.lib().xseg_malloc(size, device, None)``.
    """
    return _load()


def library_path():
    """The path of the loaded libxseg (loads it if needed)."""
    _load()
    return _lib_path


def _fn(name):
    cdll = _load()
    try:
        return getattr(cdll, name)
    except AttributeError:
        raise XsegError(XSEG_ENOTSUP, "%s is not exported by %s (an older library?)" % (name, _lib_path))


def _last_error():
    cdll = _load()
    msg = cdll.xseg_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def _last_code(default):
    cdll = _load()
    if hasattr(cdll, "xseg_last_error_code"):
        code = cdll.xseg_last_error_code()
        if code:
            return code
    return default


def _check(rc):
    if rc != 0:
        raise XsegError(rc, _last_error() or "error %d" % rc)
    return rc


def _read_json_text(fn, *args):
    """Call an snprintf-like function: once to size the buffer, then to fill it."""
    need = fn(*args, None, 0)
    if need == 0:
        raise XsegError(_last_code(XSEG_EINVAL), _last_error() or "%s failed" % fn.__name__)
    for _ in range(8):
        size = need + 1 + 256  # slack in case the state grows in between
        buf = ctypes.create_string_buffer(size)
        need = fn(*args, buf, size)
        if need == 0:
            raise XsegError(_last_code(XSEG_EINVAL), _last_error() or "%s failed" % fn.__name__)
        if need < size:
            return buf.value.decode("utf-8", "replace")
    raise XsegError(XSEG_ERANGE, "%s: the text kept growing" % fn.__name__)


# ---- the API ------------------------------------------------------------


def init(conf=None):
    """(Re)initialise the library from a configuration string.

    ``conf`` has the grammar of XSEG_ALLOC_CONF (docs/config.md); None reads
    the XSEG_ALLOC_CONF environment variable.  Raises XsegError with the
    parser's message for an invalid string (the library then refuses every
    allocation until a valid configuration is given) and XSEG_EBUSY while
    memory is still allocated.
    """
    if conf is not None and not isinstance(conf, (str, bytes)):
        raise TypeError("conf must be a str or None")
    if isinstance(conf, str):
        conf = conf.encode("utf-8")
    _check(_fn("xseg_init")(conf))


def shutdown():
    """Release everything to the driver and return to the uninitialised state."""
    _check(_fn("xseg_shutdown")())


def stats(device=0):
    """The device's statistics as a nested dict (docs/metrics.md).

    Keys follow torch.cuda.memory_stats_as_nested_dict(): for example
    ``stats()["allocated_bytes"]["all"]["peak"]``.  ``memory_stats()`` gives
    the same figures flattened to torch.cuda.memory_stats()'s dotted keys.
    """
    return json.loads(_read_json_text(_fn("xseg_stats_json"), int(device)))


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(prefix + "." + k if prefix else k, v, out)
    else:
        out[prefix] = value


def memory_stats(device=0):
    """stats() flattened to dotted keys, e.g. ``"allocated_bytes.all.current"``."""
    out = {}
    _flatten("", stats(device), out)
    return dict(sorted(out.items()))


def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else ctypes.CDLL(None)
    except OSError:
        return ctypes.CDLL(None)


def summary(device=0):
    """A human-readable summary of the device's memory, as a str.

    xseg_print_summary writes to a C ``FILE*``; we open one with libc's
    fopen on a temporary file, let the library write, fclose it and read the
    file back.
    """
    device = int(device)
    stats(device)  # raises a proper XsegError for a bad device or config
    libc = _libc()
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.restype = ctypes.c_int
    libc.fclose.argtypes = [ctypes.c_void_p]
    fd, path = tempfile.mkstemp(prefix="xseg-summary-", suffix=".txt")
    os.close(fd)
    try:
        fp = libc.fopen(os.fsencode(path), b"w")
        if not fp:
            raise XsegError(None, "fopen(%s) failed" % path)
        try:
            _fn("xseg_print_summary")(device, fp)
        finally:
            libc.fclose(fp)
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()
    finally:
        os.unlink(path)


def empty_cache(device=-1):
    """Release cached pages (or wholly free segments) to the driver; -1: all devices."""
    _check(_fn("xseg_empty_cache")(int(device)))


def reset_peak_stats(device=-1):
    """Reset the .peak statistics to their current values; -1: all devices."""
    _check(_fn("xseg_reset_peak_stats")(int(device)))


def snapshot(device=0):
    """Segments, pages and blocks of the device as a dict (docs/metrics.md)."""
    return json.loads(_read_json_text(_fn("xseg_snapshot_json"), int(device)))


def check_heap(device=-1):
    """Check the allocator's invariants; True, or XsegError(XSEG_ECORRUPT, first problem)."""
    _check(_fn("xseg_check_heap")(int(device)))
    return True


def config():
    """The effective configuration: ``key:value`` lines with their source."""
    return _read_json_text(_fn("xseg_config_describe"))


def device_count():
    """Number of devices the active backend sees."""
    n = _fn("xseg_device_count")()
    if n < 0:
        raise XsegError(-n, _last_error())
    return n


def enable_peer_access(device, peer):
    """Give ``peer`` access to every page of ``device``, now and later."""
    _check(_fn("xseg_enable_peer_access")(int(device), int(peer)))


def _stream_handle(stream):
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if handle is not None:
        return handle or None
    raise TypeError("stream must be None, an int handle or an object with .cuda_stream")


def record_stream(ptr, stream):
    """Declare that ``stream`` uses the block at ``ptr`` (an int address) too."""
    _check(_fn("xseg_record_stream")(ctypes.c_void_p(int(ptr)), _stream_handle(stream)))


def malloc(size, device=0, stream=None):
    """Allocate ``size`` bytes; returns the address as an int (raises on failure)."""
    p = _fn("xseg_malloc")(int(size), int(device), _stream_handle(stream))
    if not p:
        raise XsegError(_last_code(XSEG_ENOMEM), _last_error() or "xseg_malloc(%d) failed" % size)
    return p


def free(ptr):
    """Free an address returned by malloc()."""
    _check(_fn("xseg_free")(ctypes.c_void_p(int(ptr)) if ptr else None))


def version():
    """The library's version string, "MAJOR.MINOR.PATCH"."""
    v = _fn("xseg_version")()
    return v.decode("ascii", "replace") if v else ""
