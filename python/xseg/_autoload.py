"""xseg._autoload: selecting xseg with an environment variable alone.

The package declares this module's install() as a ``torch.backends`` entry
point, which ``import torch`` runs (PyTorch's device-backend autoload,
unless TORCH_DEVICE_BACKEND_AUTOLOAD=0).  With XSEG_ALLOC_CONF set - even
to an empty string, for the defaults - xseg becomes PyTorch's CUDA
allocator before anything touches CUDA; without it nothing happens.

A configuration that is wrong stops ``import torch`` with xseg's message,
which names the key and the accepted values: running on another allocator
than the one asked for would be a silent fall-back.
"""

import os


def install():
    if os.environ.get("XSEG_ALLOC_CONF") is None:
        return
    from . import torch as xseg_torch  # noqa: PLC0415  (only when asked for)

    xseg_torch.enable()
