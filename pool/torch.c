/* pool/torch.c: entry points with the signatures PyTorch's pluggable
 * allocator calls (torch.cuda.memory.CUDAPluggableAllocator), part of the
 * design's public contract, for C++ programs that make their own pluggable
 * allocator.  PyTorch cannot be told of a failure through them, so each
 * prints xseg's diagnosis to stderr.  The Python package does not use them:
 * it installs xseg as PyTorch's native allocator (python/native), which
 * raises torch.OutOfMemoryError instead.
 */
#include <stdio.h>

#include "error.h"
#include "xseg.h"

void *xseg_torch_alloc(ssize_t size, int device, xseg_stream_t stream) {
  if (size < 0) {
    xs_error(XSEG_EINVAL, "xseg: xseg_torch_alloc: negative size %zd", size);
    return NULL;
  }
  if (size == 0) {
    xs_error_clear();
    return NULL; /* PyTorch keeps a NULL data pointer for empty tensors and never frees it */
  }
  void *p = xseg_malloc((size_t)size, device, stream);
  if (!p) fprintf(stderr, "%s\n", xseg_last_error()); /* PyTorch does not check, so say it */
  return p;
}

void xseg_torch_free(void *ptr, ssize_t size, int device, xseg_stream_t stream) {
  (void)size;
  (void)device;
  (void)stream;
  if (xseg_free(ptr) != 0) fprintf(stderr, "%s\n", xseg_last_error()); /* no way to return it to PyTorch */
}
