"""xseg.torch: xseg as PyTorch's CUDA allocator.

With the package installed, setting XSEG_ALLOC_CONF is enough: ``import
torch`` then installs xseg (see xseg._autoload).  In code:

    import xseg.torch
    xseg.torch.enable()          # before anything touches CUDA

xseg is then PyTorch's native allocator (a C++
c10::cuda::CUDACachingAllocator::CUDAAllocator, python/native/xseg_torch.cc)
and every torch.cuda memory call reaches it: memory_stats(),
memory_summary(), memory_allocated(), reset_peak_memory_stats(),
empty_cache(), _record_memory_history() and _snapshot(), CUDA graphs,
MemPool, Tensor.record_stream(), sharing through torch.multiprocessing, and
out of memory raises torch.OutOfMemoryError with xseg's diagnosis.
docs/pytorch.md lists every call and what it means under xseg.

xseg's own figures - mapped versus reserved address space, handles,
fragmentation - are in ``xseg_stats()``, ``summary()`` and ``snapshot()``
here, or the xseg module itself.

torch is imported inside the functions, so ``import xseg.torch`` works
without PyTorch.
"""

import os
import threading

import xseg as _xseg
from xseg import XsegError

__all__ = ["enable", "is_enabled", "xseg_stats", "summary", "snapshot", "check_heap"]

_lock = threading.Lock()
_enabled = False

_REINSTALL = (
    "reinstall xseg where torch is installed, building against it: "
    "pip install --no-build-isolation <xseg>/python"
)


def _import_torch(what):
    try:
        import torch
    except ImportError as e:
        raise XsegError(
            None,
            "%s needs PyTorch, which cannot be imported here (%s); install a CUDA build of torch" % (what, e),
        ) from None
    return torch


def _binding(torch):
    """The compiled binding, checked against the running torch."""
    try:
        from xseg import _torch
    except ImportError as e:
        raise XsegError(
            None,
            "xseg was installed without its PyTorch binding (torch could not be imported when it was built, "
            "or the binding does not load: %s); %s" % (e, _REINSTALL),
        ) from None
    if _torch.TORCH_VERSION != torch.__version__:
        raise XsegError(
            None,
            "xseg's PyTorch binding was built against torch %s, but this is torch %s (a binding works with "
            "the torch it was built against only); %s" % (_torch.TORCH_VERSION, torch.__version__, _REINSTALL),
        )
    return _torch


def _refuse_conflicts(torch):
    if torch.cuda.is_initialized():
        raise XsegError(
            None,
            "PyTorch has already initialised CUDA with its own allocator, which can no longer be swapped; "
            "enable xseg before the first CUDA tensor (or set XSEG_ALLOC_CONF, which enables it at import torch)",
        )
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        text = os.environ.get(var, "")
        keys = [pair.split(":")[0].strip() for pair in text.split(",")]
        if "backend" in keys:
            # torch checks that key against the allocator in use and would fail later
            raise XsegError(
                None,
                "%s=%r chooses a PyTorch allocator backend, which conflicts with xseg; remove its backend key"
                % (var, text),
            )


def enable(conf=None):
    """Install xseg as PyTorch's CUDA allocator.

    Call it before anything touches CUDA (the first CUDA tensor,
    torch.cuda.init(), current_device(), mem_get_info(), ...).

    ``conf``: an XSEG_ALLOC_CONF string, used in place of the environment
    variable (xseg.configure).  With None the library reads XSEG_ALLOC_CONF.
    Either way it is checked here, so a mistake raises now, naming the key;
    the driver is first touched by the first CUDA allocation.

    Calling enable() again after it succeeded does nothing (a different
    ``conf`` is then an error: the allocator is in use).
    """
    global _enabled
    torch = _import_torch("xseg.torch.enable()")
    with _lock:
        if _enabled:
            if conf is not None:
                raise XsegError(
                    None, "xseg.torch.enable(conf) called again after xseg was installed; the first call chooses"
                )
            return
        _refuse_conflicts(torch)
        # Checked now, so a mistake stops here naming the key; started on
        # the first allocation, so a machine without a GPU can still import
        # torch and run on the CPU.
        described = _xseg.check_config(conf)
        if conf is not None:
            _xseg.configure(conf)
        if "backend:host" in described.replace(" ", ""):
            raise XsegError(
                None,
                "XSEG_ALLOC_CONF selects backend:host, which simulates a GPU in host memory: PyTorch's "
                "kernels cannot run on it.  Use backend:cuda (the default) for PyTorch; backend:host is for "
                "xseg's C API and tests",
            )
        binding = _binding(torch)
        try:
            binding.install()
        except RuntimeError as e:
            raise XsegError(None, "PyTorch refused xseg as its CUDA allocator: %s" % e) from None
        _enabled = True


def is_enabled():
    """True once xseg is PyTorch's CUDA allocator in this process."""
    if _enabled:
        return True
    try:
        from xseg import _torch
    except ImportError:
        return False
    return bool(_torch.installed())


def _device_index(device):
    if device is None or not isinstance(device, int):
        torch = _import_torch("xseg.torch")
        if device is None:
            return torch.cuda.current_device()
        return torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()
    return device


def xseg_stats(device=None):
    """xseg's own statistics for the device, as nested dicts (docs/metrics.md):
    mapped bytes, handles, driver calls, fragmentation, beside torch's names."""
    return _xseg.stats(_device_index(device))


def summary(device=None):
    """xseg's summary table, with its fragmentation and driver lines."""
    return _xseg.summary(_device_index(device))


def snapshot(device=None):
    """Every segment, page and block of the device, as xseg sees them."""
    return _xseg.snapshot(_device_index(device))


def check_heap(device=-1):
    """Walk the device's heap and check xseg's invariants."""
    return _xseg.check_heap(device if device == -1 else _device_index(device))
