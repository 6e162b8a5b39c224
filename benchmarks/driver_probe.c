/* benchmarks/driver_probe.c: what the CUDA driver's virtual memory calls cost
 * per handle, by phase (create, map, set access, unmap, release), for
 * 2 MiB, 32 MiB and 512 MiB handles; whether one cuMemSetAccess or one
 * cuMemUnmap over many adjacent handles costs less than one call each;
 * whether handles created shareable as POSIX descriptors cost more; and
 * whether access survives unmapping a handle and mapping another at the
 * same address.  The figures behind docs/design.md's driver costs
 * (benchmarks/results/gpu-h100-driver-probe.txt).  Needs a GPU:
 *
 *   cc -O2 -I/usr/local/cuda/include benchmarks/driver_probe.c \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -o /tmp/driver_probe &&
 * /tmp/driver_probe
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CK(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *s;                                                           \
      cuGetErrorString(r_, &s);                                                \
      printf("%s:%d %s -> %s\n", __FILE__, __LINE__, #x, s);                   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static CUmemAccessDesc acc;
static CUmemGenericAllocationHandle hs[512];

static void cycle(CUdeviceptr va, int nh, size_t hsz, int fd, int one_access,
                  int one_unmap) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes =
      fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  double t0 = now();
  for (int i = 0; i < nh; i++)
    CK(cuMemCreate(&hs[i], hsz, &prop, 0));
  double t1 = now();
  for (int i = 0; i < nh; i++)
    CK(cuMemMap(va + i * hsz, hsz, 0, hs[i], 0));
  double t2 = now();
  if (one_access)
    CK(cuMemSetAccess(va, nh * hsz, &acc, 1));
  else
    for (int i = 0; i < nh; i++)
      CK(cuMemSetAccess(va + i * hsz, hsz, &acc, 1));
  double t3 = now();
  CK(cuMemsetD8(va, 1, nh * hsz));
  CK(cuCtxSynchronize());
  double t4 = now();
  if (one_unmap)
    CK(cuMemUnmap(va, nh * hsz));
  else
    for (int i = 0; i < nh; i++)
      CK(cuMemUnmap(va + i * hsz, hsz));
  double t5 = now();
  for (int i = 0; i < nh; i++)
    CK(cuMemRelease(hs[i]));
  double t6 = now();
  printf("%4zu MiB x %3d fd=%d access:%s unmap:%s | per handle us: create "
         "%6.1f map %5.1f access %6.1f unmap %6.1f release %6.1f | sum %6.1f\n",
         hsz >> 20, nh, fd, one_access ? "one " : "each",
         one_unmap ? "one " : "each", (t1 - t0) / nh, (t2 - t1) / nh,
         (t3 - t2) / nh, (t5 - t4) / nh, (t6 - t5) / nh,
         ((t3 - t0) + (t6 - t4)) / nh);
}

int main(void) {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va;
  CK(cuMemAddressReserve(&va, (size_t)8 << 30, 0, 0, 0));
  struct {
    size_t sz;
    int n;
  } shapes[] = {
      {(size_t)2 << 20, 128}, {(size_t)32 << 20, 32}, {(size_t)512 << 20, 8}};
  for (int rep = 0; rep < 3; rep++)
    for (int s = 0; s < 3; s++)
      for (int fd = 0; fd < 2; fd++)
        for (int mode = 0; mode < 3; mode++)
          cycle(va, shapes[s].n, shapes[s].sz, fd, mode >= 1, mode >= 2);
  /* Access after an unmap and a map of another handle, no new set access. */
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle a, b;
  CK(cuMemCreate(&a, (size_t)2 << 20, &prop, 0));
  CK(cuMemCreate(&b, (size_t)2 << 20, &prop, 0));
  CK(cuMemMap(va, (size_t)2 << 20, 0, a, 0));
  CK(cuMemSetAccess(va, (size_t)2 << 20, &acc, 1));
  CK(cuMemUnmap(va, (size_t)2 << 20));
  CK(cuMemMap(va, (size_t)2 << 20, 0, b, 0));
  CUresult r = cuMemsetD8(va, 1, (size_t)2 << 20);
  CUresult r2 = cuCtxSynchronize();
  printf("remap without set access: memset %d, sync %d (0 = access kept)\n",
         (int)r, (int)r2);
  return 0;
}
