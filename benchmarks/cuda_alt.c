/* benchmarks/cuda_alt.c: the allocators users would otherwise pick, on the
 * GPU, through the CUDA driver API: plain cuMemAlloc/cuMemFree (what
 * cudaMalloc/cudaFree do, no caching) and cuMemAllocAsync/cuMemFreeAsync
 * from the device's default memory pool (cudaMallocAsync), plus the filler
 * that imposes a memory budget on all of them alike.
 *
 * libcuda is loaded with dlopen, as the library does, so xseg-bench still
 * runs on machines without a GPU (gpu_open then fails and GPU sections are
 * skipped).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#if XSEG_HAVE_CUDA
#include <cuda.h>

static struct {
  int ok;
  CUcontext ctx;
  CUdevice dev;
  CUstream stream;
  CUmemoryPool pool;
  __typeof__(&cuInit) Init;
  __typeof__(&cuDeviceGet) DeviceGet;
  __typeof__(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain;
  __typeof__(&cuCtxSetCurrent) CtxSetCurrent;
  __typeof__(&cuMemAlloc_v2) MemAlloc;
  __typeof__(&cuMemFree_v2) MemFree;
  __typeof__(&cuMemGetInfo_v2) MemGetInfo;
  __typeof__(&cuMemAllocAsync) MemAllocAsync;
  __typeof__(&cuMemFreeAsync) MemFreeAsync;
  __typeof__(&cuStreamCreate) StreamCreate;
  __typeof__(&cuStreamSynchronize) StreamSynchronize;
  __typeof__(&cuDeviceGetDefaultMemPool) DeviceGetDefaultMemPool;
  __typeof__(&cuMemPoolSetAttribute) MemPoolSetAttribute;
  __typeof__(&cuMemPoolTrimTo) MemPoolTrimTo;
  __typeof__(&cuCtxSynchronize) CtxSynchronize;
  __typeof__(&cuDeviceGetName) DeviceGetName;
  __typeof__(&cuDriverGetVersion) DriverGetVersion;
} cu;

#define SYM(field, name)                                     \
  do {                                                       \
    *(void **)&cu.field = dlsym(h, name);                    \
    if (!cu.field) return -1;                                \
  } while (0)

int gpu_open(void) {
  if (cu.ok) return 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  SYM(Init, "cuInit");
  SYM(DeviceGet, "cuDeviceGet");
  SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(CtxSetCurrent, "cuCtxSetCurrent");
  SYM(MemAlloc, "cuMemAlloc_v2");
  SYM(MemFree, "cuMemFree_v2");
  SYM(MemGetInfo, "cuMemGetInfo_v2");
  SYM(MemAllocAsync, "cuMemAllocAsync");
  SYM(MemFreeAsync, "cuMemFreeAsync");
  SYM(StreamCreate, "cuStreamCreate");
  SYM(StreamSynchronize, "cuStreamSynchronize");
  SYM(DeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
  SYM(MemPoolSetAttribute, "cuMemPoolSetAttribute");
  SYM(MemPoolTrimTo, "cuMemPoolTrimTo");
  SYM(CtxSynchronize, "cuCtxSynchronize");
  SYM(DeviceGetName, "cuDeviceGetName");
  SYM(DriverGetVersion, "cuDriverGetVersion");
  if (cu.Init(0) != CUDA_SUCCESS || cu.DeviceGet(&cu.dev, 0) != CUDA_SUCCESS) return -1;
  if (cu.PrimaryCtxRetain(&cu.ctx, cu.dev) != CUDA_SUCCESS || cu.CtxSetCurrent(cu.ctx) != CUDA_SUCCESS) return -1;
  if (cu.StreamCreate(&cu.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return -1;
  if (cu.DeviceGetDefaultMemPool(&cu.pool, cu.dev) != CUDA_SUCCESS) return -1;
  cuuint64_t keep = UINT64_MAX; /* cache everything, as a training loop wants */
  cu.MemPoolSetAttribute(cu.pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
  cu.ok = 1;
  return 0;
}

void gpu_describe(char *buf, size_t len) {
  char name[128] = "?";
  int ver = 0;
  if (gpu_open() == 0) {
    cu.DeviceGetName(name, sizeof name, cu.dev);
    cu.DriverGetVersion(&ver);
  }
  snprintf(buf, len, "%s, CUDA driver API %d.%d", name, ver / 1000, ver % 1000 / 10);
}

size_t gpu_free_bytes(void) {
  size_t fr = 0, tot = 0;
  if (gpu_open() == 0) cu.MemGetInfo(&fr, &tot);
  return fr;
}

/* A new non-blocking stream (NULL without a GPU). */
void *gpu_new_stream(void) {
  CUstream s = NULL;
  if (gpu_open() != 0 || cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return NULL;
  return s;
}

/* Hold all but `budget` bytes of free device memory in one allocation. */
int gpu_fill(size_t budget, uint64_t *handle) {
  *handle = 0;
  if (gpu_open() != 0) return -1;
  cu.CtxSynchronize();
  cu.MemPoolTrimTo(cu.pool, 0);
  size_t fr = gpu_free_bytes();
  if (fr <= budget) return fr == budget ? 0 : -1;
  CUdeviceptr p;
  if (cu.MemAlloc(&p, fr - budget) != CUDA_SUCCESS) return -1;
  *handle = p;
  return 0;
}

void gpu_unfill(uint64_t handle) {
  if (handle) cu.MemFree((CUdeviceptr)handle);
}

double gpu_time_malloc_free(size_t size, int reps, double *free_s) {
  CUdeviceptr p;
  double a = 0, f = 0;
  for (int i = 0; i < reps; i++) {
    double t0 = now_s();
    if (cu.MemAlloc(&p, size) != CUDA_SUCCESS) return -1;
    double t1 = now_s();
    cu.MemFree(p);
    f += now_s() - t1;
    a += t1 - t0;
  }
  if (free_s) *free_s = f / reps;
  return a / reps;
}

/* kind 0: cuMemAlloc/cuMemFree; kind 1: cuMemAllocAsync/cuMemFreeAsync. */
replay_t replay_cuda(const trace_t *t, int kind) {
  replay_t r = {0};
  if (gpu_open() != 0) return r;
  CUdeviceptr *ptr = calloc(t->nslots, sizeof *ptr);
  r.ok = 1;
  double t0 = now_s();
  for (size_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    if (e->alloc) {
      CUresult rc = kind == 0 ? cu.MemAlloc(&ptr[e->slot], e->bytes)
                              : cu.MemAllocAsync(&ptr[e->slot], e->bytes, cu.stream);
      if (rc != CUDA_SUCCESS) {
        ptr[e->slot] = 0;
        r.ok = 0;
        r.failed_at = i;
        break;
      }
    } else if (ptr[e->slot]) {
      if (kind == 0)
        cu.MemFree(ptr[e->slot]);
      else
        cu.MemFreeAsync(ptr[e->slot], cu.stream);
      ptr[e->slot] = 0;
    }
  }
  if (kind == 1) cu.StreamSynchronize(cu.stream);
  r.seconds = now_s() - t0;
  for (size_t s = 0; s < t->nslots; s++) {
    if (!ptr[s]) continue;
    if (kind == 0)
      cu.MemFree(ptr[s]);
    else
      cu.MemFreeAsync(ptr[s], cu.stream);
  }
  if (kind == 1) {
    cu.StreamSynchronize(cu.stream);
    cu.MemPoolTrimTo(cu.pool, 0);
  }
  free(ptr);
  return r;
}

#else /* no CUDA headers at build time */

int gpu_open(void) { return -1; }
void gpu_describe(char *buf, size_t len) { snprintf(buf, len, "no GPU support in this build"); }
size_t gpu_free_bytes(void) { return 0; }
void *gpu_new_stream(void) { return NULL; }
int gpu_fill(size_t budget, uint64_t *handle) {
  (void)budget;
  *handle = 0;
  return -1;
}
void gpu_unfill(uint64_t handle) { (void)handle; }
double gpu_time_malloc_free(size_t size, int reps, double *free_s) {
  (void)size;
  (void)reps;
  (void)free_s;
  return -1;
}
replay_t replay_cuda(const trace_t *t, int kind) {
  (void)t;
  (void)kind;
  replay_t r = {0};
  return r;
}
#endif
