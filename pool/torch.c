/* pool/torch.c: entry points with the signatures PyTorch's pluggable
 * allocator calls (torch.cuda.memory.CUDAPluggableAllocator), part of the
 * design's public contract.  PyTorch cannot be told of a failure through
 * them, so each prints xseg's diagnosis to stderr.  The native PyTorch
 * allocator (python/) calls the C API directly instead.
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

void xseg_torch_record_stream(void *ptr, xseg_stream_t stream) {
  if (xseg_record_stream(ptr, stream) != 0) fprintf(stderr, "%s\n", xseg_last_error());
}

void xseg_torch_empty_cache(void) {
  if (xseg_empty_cache(-1) != 0) fprintf(stderr, "%s\n", xseg_last_error());
}

void xseg_torch_set_memory_fraction(double fraction, int device) {
  if (xseg_set_memory_fraction(fraction, device) != 0) fprintf(stderr, "%s\n", xseg_last_error());
}

