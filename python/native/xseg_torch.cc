/* python/native/xseg_torch.cc: PyTorch pluggable-allocator entry points that
 * raise instead of returning NULL.
 *
 * PyTorch's CUDAPluggableAllocator does not check what its allocation
 * function returns: a NULL becomes a tensor with no memory behind it, and
 * the first kernel that touches it faults.  PyTorch's own allocator throws
 * on failure, and every caller (torch.empty, autograd, cuBLAS workspaces)
 * turns that into a Python exception.  These entry points throw too, so an
 * out-of-memory under xseg is a RuntimeError whose message is xseg's
 * diagnosis, prefixed "CUDA out of memory." as PyTorch's own is (tools that
 * retry with smaller batches look for that text).
 *
 * This is the only C++ in the project: a C function cannot throw.  It is a
 * library of its own, libxseg_torch.so, linked to libxseg.so, so the
 * allocator itself stays C with no C++ runtime; xseg.torch.enable() uses it
 * when it lies beside libxseg.so (docs/pytorch.md).
 */
#include <stdexcept>
#include <string>
#include <sys/types.h>

#include "xseg.h"

#define XSEG_TORCH_API extern "C" __attribute__((visibility("default")))

XSEG_TORCH_API void *xseg_torch_alloc_raising(ssize_t size, int device, xseg_stream_t stream);
XSEG_TORCH_API void xseg_torch_free_raising(void *ptr, ssize_t size, int device, xseg_stream_t stream);

void *xseg_torch_alloc_raising(ssize_t size, int device, xseg_stream_t stream) {
  if (size == 0) return nullptr; /* an empty tensor: PyTorch never frees its NULL */
  if (size < 0) throw std::invalid_argument("xseg: allocation of a negative size (" + std::to_string(size) + " bytes)");
  void *p = xseg_malloc(static_cast<size_t>(size), device, stream);
  if (p) return p;
  const std::string why = xseg_last_error();
  if (xseg_last_error_code() == XSEG_ENOMEM) throw std::runtime_error("CUDA out of memory. " + why);
  throw std::runtime_error(why);
}

void xseg_torch_free_raising(void *ptr, ssize_t size, int device, xseg_stream_t stream) {
  /* A free cannot fail in PyTorch's interface (it runs in destructors):
   * xseg_torch_free reports an error on stderr and returns. */
  xseg_torch_free(ptr, size, device, stream);
}
