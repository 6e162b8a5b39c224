"""xseg.torch: use xseg as PyTorch's CUDA memory allocator.

    import xseg.torch
    xseg.torch.enable()          # before the first CUDA tensor is created

enable() wraps torch.cuda.memory.CUDAPluggableAllocator with the library's
xseg_torch_alloc / xseg_torch_free entry points and makes it the current
allocator.  PyTorch only lets the allocator be swapped before its own one
has been initialised, which happens when CUDA is first used.

torch.cuda.memory.CUDAPluggableAllocator forwards only malloc and free.
Its C++ object has slots for a few more hooks, settable through the
(private) pybind object that CUDAPluggableAllocator.allocator() returns;
enable() fills three of them when this PyTorch has the setters:
record_stream (Tensor.record_stream -> xseg_record_stream), reset
(torch.cuda.empty_cache -> xseg_empty_cache) and memory fraction
(torch.cuda.set_per_process_memory_fraction -> xseg_set_memory_fraction).
Statistics, summaries and snapshots have no slot: torch.cuda.memory_stats() and friends raise, so use
the functions of this module (or of the xseg package).  See docs/pytorch.md.

torch is imported inside the functions, so ``import xseg.torch`` works on a
machine without PyTorch.
"""

import ctypes
import os
import sys
import threading

import xseg as _xseg
from xseg import XsegError

__all__ = [
    "enable",
    "is_enabled",
    "hooks",
    "record_stream",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "empty_cache",
    "snapshot",
    "check_heap",
]

_ALLOC_FN = "xseg_torch_alloc"
_FREE_FN = "xseg_torch_free"
# libxseg_torch.so (python/native/xseg_torch.cc): the same entry points, but
# a failed allocation throws, so PyTorch raises RuntimeError("CUDA out of
# memory. xseg: ...") instead of handing out a tensor with no memory.
_SHIM_NAMES = ("libxseg_torch.so", "libxseg_torch.so.0")
_SHIM_ALLOC_FN = "xseg_torch_alloc_raising"
_SHIM_FREE_FN = "xseg_torch_free_raising"

_lock = threading.Lock()
_enabled = False
_allocator = None  # keeps the CUDAPluggableAllocator object alive
_hooks = {}  # hook name -> what was installed
_callbacks = []  # ctypes callbacks handed to PyTorch: must stay alive


def _empty_cache_hook():
    # Called by PyTorch (torch.cuda.empty_cache) through a ctypes callback.
    try:
        _xseg.empty_cache(-1)
    except Exception as e:  # an exception cannot cross back into C++
        print("xseg.torch: empty_cache hook: %s" % e, file=sys.stderr)


def _fn_address(cdll, name):
    try:
        fn = getattr(cdll, name)
    except AttributeError:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


def _set_hook(native, setter, cdll, names):
    """Hand native.<setter> the address of the first of `names` the library
    exports; that name, or None (no such setter in this PyTorch, or none of
    the functions in this library)."""
    fn = getattr(native, setter, None)
    if not callable(fn):
        return None
    for name in names:
        addr = _fn_address(cdll, name)
        if addr:
            fn(addr)
            return name
    return None


def _install_hooks(native):
    """Fill the pluggable allocator's optional slots that this PyTorch lets us set.

    ``native`` is the torch._C._CUDAPluggableAllocator behind
    CUDAPluggableAllocator.allocator().  Its setters take a C function
    address.  Returns {hook: description}.
    """
    cdll = _xseg.lib()
    installed = {}

    # record_stream: PyTorch calls void fn(void *ptr, cudaStream_t stream)
    # with the storage's base pointer.  A dedicated void entry point is used
    # if the library has one; otherwise xseg_record_stream itself, whose int
    # result the caller ignores (harmless in the x86-64 and AArch64 calling
    # conventions, where the result is only a register).
    name = _set_hook(native, "set_record_stream_fn", cdll, ("xseg_torch_record_stream", "xseg_record_stream"))
    if name:
        installed["record_stream"] = name

    # reset: PyTorch calls void fn(void) from torch.cuda.empty_cache().
    name = _set_hook(native, "set_reset_fn", cdll, ("xseg_torch_empty_cache",))
    if name:
        installed["empty_cache"] = name
    elif callable(getattr(native, "set_reset_fn", None)):
        cb = ctypes.CFUNCTYPE(None)(_empty_cache_hook)
        _callbacks.append(cb)
        native.set_reset_fn(ctypes.cast(cb, ctypes.c_void_p).value)
        installed["empty_cache"] = "xseg_empty_cache(-1) through a Python callback"

    # memory fraction: torch.cuda.set_per_process_memory_fraction(f, device)
    # calls void fn(double fraction, int device).
    name = _set_hook(native, "set_memory_fraction_fn", cdll, ("xseg_torch_set_memory_fraction",))
    if name:
        installed["memory_fraction"] = name
    return installed


def shim_path():
    """The libxseg_torch.so beside the loaded libxseg, or None.

    Its allocation entry point raises on failure; it links to libxseg by
    soname, which resolves to the copy already loaded, so both share one
    allocator."""
    d = os.path.dirname(os.path.realpath(_xseg.library_path()))
    for name in _SHIM_NAMES:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


def _import_torch(what):
    try:
        import torch  # noqa: F401  (lazy: the package must import without torch)
    except ImportError as e:
        raise XsegError(
            None,
            "%s needs PyTorch, which cannot be imported here (%s); "
            "install a CUDA build of torch, or use the xseg module without it" % (what, e),
        ) from None
    return torch


def enable(conf=None, hooks=True):
    """Install xseg as PyTorch's CUDA caching allocator.

    Call it before anything touches CUDA (the first CUDA tensor,
    torch.cuda.init(), torch.cuda.current_device(), ...).

    ``conf``: an XSEG_ALLOC_CONF string.  It is applied with xseg.init(conf)
    and so replaces the environment variable (which is not merged).  With
    None the library reads XSEG_ALLOC_CONF.  Either way the configuration is
    checked here, so a mistake raises now and not as a failed allocation
    inside PyTorch, which cannot report it.

    ``hooks``: also route torch.cuda.empty_cache() and Tensor.record_stream()
    to xseg where this PyTorch lets us (see hooks()).

    Calling enable() again after it succeeded does nothing (a different
    ``conf`` is then an error: the allocator is in use).
    """
    global _enabled, _allocator, _hooks
    torch = _import_torch("xseg.torch.enable()")
    with _lock:
        if _enabled:
            if conf is not None:
                raise XsegError(
                    None,
                    "xseg.torch.enable(conf) called again after xseg was installed; "
                    "the configuration can only be chosen by the first call",
                )
            return
        cuda = getattr(torch, "cuda", None)
        memory = getattr(cuda, "memory", None)
        if memory is None or not hasattr(memory, "CUDAPluggableAllocator") or not hasattr(
            torch._C, "_cuda_customAllocator"
        ):
            raise XsegError(
                None,
                "this PyTorch (%s) has no CUDA pluggable-allocator support "
                "(a CPU-only build, or older than 2.0)" % getattr(torch, "__version__", "?"),
            )
        if torch.cuda.is_initialized():
            raise XsegError(
                None,
                "PyTorch has already initialised CUDA and its own allocator, which can no longer "
                "be swapped; call xseg.torch.enable() before the first CUDA tensor is created "
                "(and before torch.cuda.init(), current_device(), mem_get_info(), ...)",
            )

        # Load the library and check the configuration now.
        path = _xseg.library_path()
        if conf is not None:
            _xseg.init(conf)
        else:
            _xseg.config()  # initialises from XSEG_ALLOC_CONF; raises if it is invalid

        try:
            shim, shim_note = shim_path(), ""
            if shim is not None:
                try:
                    ctypes.CDLL(shim)  # PyTorch's own load would only say "failed"
                except OSError as e:
                    shim, shim_note = None, "; %s does not load: %s" % (shim, e)
            if shim is not None:
                alloc = memory.CUDAPluggableAllocator(shim, _SHIM_ALLOC_FN, _SHIM_FREE_FN)
            else:
                alloc = memory.CUDAPluggableAllocator(path, _ALLOC_FN, _FREE_FN)
            installed = {}
            if hooks:
                try:
                    installed = _install_hooks(alloc.allocator())
                except Exception as e:  # optional: never fail enable() for a hook
                    installed = {"error": "hooks not installed: %r" % (e,)}
            memory.change_current_allocator(alloc)
        except RuntimeError as e:
            if "already initialized" in str(e) or "swap" in str(e):
                raise XsegError(
                    None,
                    "PyTorch refused to swap its CUDA allocator because it has already allocated "
                    "CUDA memory (%s); call xseg.torch.enable() before the first CUDA tensor is "
                    "created" % str(e).strip().splitlines()[0],
                ) from None
            raise
        _allocator = alloc
        installed["out_of_memory"] = (
            "raises RuntimeError('CUDA out of memory. ...') (%s)" % shim
            if shim is not None
            else "a tensor without memory, diagnosis on stderr (no libxseg_torch.so beside %s%s)"
            % (path, shim_note)
        )
        _hooks = installed
        _enabled = True


def is_enabled():
    """True once enable() has installed xseg in this process."""
    return _enabled


def hooks():
    """The optional PyTorch hooks enable() installed: {"record_stream": ..., "empty_cache": ...}.

    A missing key means this PyTorch does not let that call reach xseg; use
    this module's record_stream() / empty_cache() then.
    """
    return dict(_hooks)


# ---- what PyTorch's pluggable interface does not forward -----------------


def _device_index(device):
    if device is None:
        torch = _import_torch("xseg.torch")
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)  # torch.device
    if index is not None:
        return index
    if isinstance(device, str):
        torch = _import_torch("xseg.torch")
        d = torch.device(device)
        return d.index if d.index is not None else torch.cuda.current_device()
    torch = _import_torch("xseg.torch")
    return torch.cuda.current_device()


def record_stream(tensor, stream):
    """xseg's tensor.record_stream(stream).

    Tensor.record_stream() reaches xseg only if enable() could install the
    record_stream hook (see hooks()); otherwise PyTorch drops it silently.
    This function always works: it declares that ``stream`` (a
    torch.cuda.Stream) uses the tensor's storage, so xseg delays reusing its
    memory until the work queued on ``stream`` is done.  The storage's base
    address is used, so views work.
    """
    base = tensor.untyped_storage().data_ptr()
    if base == 0:
        return  # empty tensor: nothing was allocated
    _xseg.record_stream(base, stream)


def memory_stats_as_nested_dict(device=None):
    """xseg's statistics as nested dicts (torch.cuda.memory_stats_as_nested_dict)."""
    return _xseg.stats(_device_index(device))


def memory_stats(device=None):
    """xseg's statistics with torch.cuda.memory_stats()'s dotted keys."""
    return _xseg.memory_stats(_device_index(device))


def memory_summary(device=None):
    """xseg's counterpart of torch.cuda.memory_summary()."""
    return _xseg.summary(_device_index(device))


def memory_allocated(device=None):
    return _xseg.stats(_device_index(device))["allocated_bytes"]["all"]["current"]


def max_memory_allocated(device=None):
    return _xseg.stats(_device_index(device))["allocated_bytes"]["all"]["peak"]


def memory_reserved(device=None):
    return _xseg.stats(_device_index(device))["reserved_bytes"]["all"]["current"]


def max_memory_reserved(device=None):
    return _xseg.stats(_device_index(device))["reserved_bytes"]["all"]["peak"]


def reset_peak_memory_stats(device=None):
    _xseg.reset_peak_stats(_device_index(device))


def empty_cache(device=-1):
    """Release xseg's cached memory (torch.cuda.empty_cache() does it only with the hook)."""
    _xseg.empty_cache(device if device == -1 else _device_index(device))


def snapshot(device=None):
    return _xseg.snapshot(_device_index(device))


def check_heap(device=-1):
    return _xseg.check_heap(device if device == -1 else _device_index(device))
