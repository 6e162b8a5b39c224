"""xseg: Python bindings (ctypes only) for the xseg GPU memory allocator.

The package loads libxseg.so and wraps its C API (include/xseg.h).  It needs
neither PyTorch nor a GPU: with XSEG_ALLOC_CONF=backend:host,... (or
``xseg.init("backend:host,...")``) the library simulates a device on host
memory.  ``xseg.torch`` installs xseg as PyTorch's CUDA allocator.

Finding and loading the library is xseg._library's job (see there for
where it looks); the error codes and XsegError live in xseg._errors.

Every function that wraps a C call returning an error code raises XsegError
(carrying the code and xseg_last_error()) when the code is not 0.
"""

import ctypes
import ctypes.util
import json
import os
import tempfile

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
    "check_config",
    "configure",
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

from . import _library
from ._errors import (  # noqa: F401  (the codes and XsegError are the package's API)
    ERROR_NAMES,
    XSEG_EBACKEND,
    XSEG_EBUSY,
    XSEG_ECONFIG,
    XSEG_ECORRUPT,
    XSEG_EINVAL,
    XSEG_ENODEV,
    XSEG_ENODRIVER,
    XSEG_ENOMEM,
    XSEG_ENOTREADY,
    XSEG_ENOTSUP,
    XSEG_ERANGE,
    XSEG_OK,
    XsegError,
)


def _load():
    return _library.load()


def lib():
    """The loaded ctypes.CDLL, with argument and result types declared.

    For calls the wrappers below do not cover, e.g.
    ``xseg.lib().xseg_malloc(size, device, None)``.
    """
    return _load()


def library_path():
    """The path of the loaded libxseg (loads it if needed)."""
    _load()
    return _library.path()


def _fn(name):
    cdll = _load()
    try:
        return getattr(cdll, name)
    except AttributeError:
        raise XsegError(XSEG_ENOTSUP, "%s is not exported by %s (an older library?)" % (name, _library.path()))


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


def _conf_bytes(conf):
    if conf is not None and not isinstance(conf, (str, bytes)):
        raise TypeError("conf must be a str or None")
    return conf.encode("utf-8") if isinstance(conf, str) else conf


def check_config(conf=None):
    """Check a configuration string (None: XSEG_ALLOC_CONF) without starting
    anything; return its effective ``key:value`` lines, or raise XsegError
    naming the bad key and the accepted form."""
    return _read_json_text(_fn("xseg_config_check"), _conf_bytes(conf))


def configure(conf=None):
    """Use ``conf`` (None: XSEG_ALLOC_CONF) when the library starts on first
    use, without starting it now (no driver is touched until memory is asked
    for); as init(conf) if it has started already.  Raises XsegError for an
    invalid string, which then changes nothing."""
    _check(_fn("xseg_configure")(_conf_bytes(conf)))


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
