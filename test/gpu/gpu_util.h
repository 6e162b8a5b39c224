/* test/gpu/gpu_util.h: driver access for the GPU tests, loaded at run time.
 *
 * The test binaries, like the library, must start on machines without a
 * driver and then skip (exit XT_SKIP), so libcuda.so.1 is dlopen'ed here
 * too and the few calls a test needs to fill and read device memory are
 * resolved by their versioned names.  Include from one test file only:
 * everything is static.
 *
 *   int rc = gpu_open(0);           0: the device's primary context is
 *   if (rc != 0) return rc;         current on this thread; XT_SKIP: none
 *   GPU_CHECK(gpu.MemsetD8(p, 0xab, n));
 */
#ifndef XSEG_TEST_GPU_UTIL_H
#define XSEG_TEST_GPU_UTIL_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

#include "xtest.h"

#define GPU_ENTRY_POINTS(X)                           \
  X(Init, cuInit)                                     \
  X(GetErrorName, cuGetErrorName)                     \
  X(DeviceGetCount, cuDeviceGetCount)                 \
  X(DeviceGet, cuDeviceGet)                           \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain) \
  X(CtxSetCurrent, cuCtxSetCurrent)                   \
  X(CtxGetCurrent, cuCtxGetCurrent)                   \
  X(CtxSynchronize, cuCtxSynchronize)                 \
  X(MemsetD8, cuMemsetD8_v2)                          \
  X(MemcpyDtoH, cuMemcpyDtoH_v2)                      \
  X(MemcpyHtoD, cuMemcpyHtoD_v2)                      \
  X(StreamCreate, cuStreamCreate)                     \
  X(StreamDestroy, cuStreamDestroy_v2)                \
  X(StreamSynchronize, cuStreamSynchronize)           \
  X(MemsetD32, cuMemsetD32_v2)                        \
  X(MemsetD8Async, cuMemsetD8Async)                   \
  X(MemcpyDtoD, cuMemcpyDtoD_v2)                      \
  X(MemGetInfo, cuMemGetInfo_v2)                      \
  X(CtxPushCurrent, cuCtxPushCurrent_v2)              \
  X(CtxPopCurrent, cuCtxPopCurrent_v2)               \
  X(MemAlloc, cuMemAlloc_v2)                          \
  X(MemFree, cuMemFree_v2)                            \
  X(ModuleLoadData, cuModuleLoadData)                 \
  X(ModuleGetFunction, cuModuleGetFunction)           \
  X(LaunchKernel, cuLaunchKernel)

#define GPU_DECLARE(field, sym) __typeof__(&sym) field;
static struct {
  GPU_ENTRY_POINTS(GPU_DECLARE)
  CUcontext ctx; /* primary context made current by gpu_open */
} gpu;
#undef GPU_DECLARE

/* The driver's name for an error code ("CUDA_ERROR_..."). */
static inline const char *gpu_errname(CUresult r) {
  const char *name = NULL;
  if (gpu.GetErrorName == NULL || gpu.GetErrorName(r, &name) != CUDA_SUCCESS || name == NULL)
    return "unknown CUresult";
  return name;
}

/* A driver call in a test: a failure counts as a failed check and names
 * the call and the error. */
#define GPU_CHECK(call)                                                              \
  do {                                                                               \
    CUresult gr_ = (call);                                                           \
    XT_CHECK_MSG(gr_ == CUDA_SUCCESS, "%s returned %d (%s)", #call, (int)gr_,       \
                 gpu_errname(gr_));                                                  \
  } while (0)

/* 0 with the device's primary context current on this thread; XT_SKIP
 * after saying why when there is no driver or no such device; 1 when a
 * driver is there but fails (a broken GPU machine must not pass as
 * skipped). */
static inline int gpu_open(int dev) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *e = dlerror();
    printf("skip: libcuda.so.1 could not be loaded (%s): no NVIDIA driver\n", e ? e : "?");
    return XT_SKIP;
  }
  const char *missing = NULL;
#define GPU_RESOLVE(field, sym)                          \
  gpu.field = (__typeof__(gpu.field))dlsym(lib, #sym);   \
  if (gpu.field == NULL && missing == NULL) missing = #sym;
  GPU_ENTRY_POINTS(GPU_RESOLVE)
#undef GPU_RESOLVE
  if (missing != NULL) {
    printf("skip: libcuda.so.1 has no %s: the driver is too old\n", missing);
    return XT_SKIP;
  }
  CUresult r = gpu.Init(0);
  if (r == CUDA_ERROR_NO_DEVICE) {
    printf("skip: cuInit: CUDA_ERROR_NO_DEVICE: a driver but no GPU\n");
    return XT_SKIP;
  }
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed: %s\n", gpu_errname(r));
    return 1;
  }
  int n = 0;
  if ((r = gpu.DeviceGetCount(&n)) != CUDA_SUCCESS) {
    fprintf(stderr, "cuDeviceGetCount failed: %s\n", gpu_errname(r));
    return 1;
  }
  if (dev < 0 || dev >= n) {
    printf("skip: device %d asked, %d present\n", dev, n);
    return XT_SKIP;
  }
  CUdevice d;
  if ((r = gpu.DeviceGet(&d, dev)) != CUDA_SUCCESS ||
      (r = gpu.DevicePrimaryCtxRetain(&gpu.ctx, d)) != CUDA_SUCCESS ||
      (r = gpu.CtxSetCurrent(gpu.ctx)) != CUDA_SUCCESS) {
    fprintf(stderr, "cannot make device %d's primary context current: %s\n", dev, gpu_errname(r));
    return 1;
  }
  return 0;
}

#endif /* XSEG_TEST_GPU_UTIL_H */
