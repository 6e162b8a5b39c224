/* benchmarks/driver_probe.c: what the CUDA driver's virtual memory calls cost
 * per handle, by phase (create, map, set access, unmap, release), for
 * 2 MiB, 32 MiB and 512 MiB handles; whether one cuMemSetAccess or one
 * cuMemUnmap over many adjacent handles costs less than one call each;
 * whether handles created shareable as POSIX descriptors cost more; and
 * whether access survives unmapping a handle and mapping another at the
 * same address; and what re-making a mapped handle as k smaller mappings
 * costs, by a release and k new handles (what a conversion does) or, where
 * the driver allows a mapping to start inside its handle (driver 580 does
 * not), by k mappings of parts of the same handle, checking that the parts
 * address the handle's memory and that a part unmapped and mapped at
 * another address still holds its data.  The figures behind
 * docs/design.md's driver costs (benchmarks/results/gpu-h100-driver-probe.txt,
 * gpu-h100-driver-probe-convert.txt).  With the argument "meminfo" it only
 * times cuMemGetInfo, alone and inside a context push and pop as xseg's
 * backend calls it after every create (vmm/phys.c, xs_vmm_look).  With
 * "overlap" it asks whether cuMemRelease on a second thread runs beside
 * create, map and set access on the first, or waits for them (a lock in
 * the driver): the first thread's time to make n handles alone, with the
 * release of n others inline, and with those releases on the second
 * thread.  Needs a GPU:
 *
 *   cc -O2 -I/usr/local/cuda/include benchmarks/driver_probe.c \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lpthread -o /tmp/driver_probe &&
 * /tmp/driver_probe [meminfo|overlap]
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Fill pages [0, n) of the range at va with their index, 4 bytes each. */
static void fill_pages(CUdeviceptr va, int n, size_t page) {
  for (int i = 0; i < n; i++)
    CK(cuMemsetD32(va + (size_t)i * page, (unsigned)i + 1, page / 4));
  CK(cuCtxSynchronize());
}

/* The first word of page i of the range at va. */
static unsigned page_word(CUdeviceptr va, int i, size_t page) {
  unsigned w = 0;
  CK(cuMemcpyDtoH(&w, va + (size_t)i * page, sizeof w));
  return w;
}

/* A handle of npages pages, mapped with access at va and filled. */
static CUmemGenericAllocationHandle mapped_handle(CUdeviceptr va, int npages, size_t page,
                                                  const CUmemAllocationProp *prop) {
  CUmemGenericAllocationHandle h;
  CK(cuMemCreate(&h, npages * page, prop, 0));
  CK(cuMemMap(va, npages * page, 0, h, 0));
  CK(cuMemSetAccess(va, npages * page, &acc, 1));
  fill_pages(va, npages, page);
  return h;
}

/* Can a mapping start at an offset into its handle (cuMemMap's offset)?
 * Prints and returns the driver's answer. */
static CUresult offset_probe(CUdeviceptr va) {
  const size_t page = (size_t)2 << 20;
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h;
  CK(cuMemCreate(&h, 2 * page, &prop, 0));
  CUresult r = cuMemMap(va, page, page, h, 0);
  if (r == CUDA_SUCCESS) CK(cuMemUnmap(va, page));
  CK(cuMemRelease(h));
  const char *msg;
  cuGetErrorString(r, &msg);
  printf("mapping the second page of a 2-page handle (offset 2 MiB): %s\n", r == CUDA_SUCCESS ? "works" : msg);
  return r;
}

/* Re-make one mapped handle of npages pages as k mappings of equal parts:
 * (a) release it and create k handles (what a conversion does), and where
 * the driver allows mapping part of a handle, (b) k mappings of parts of
 * the same handle with set access each, (c) as (b) with one set access over
 * the range.  Checks that the parts address the handle's pages, and that a
 * part unmapped and mapped elsewhere keeps its data. */
static void convert_probe(CUdeviceptr va, int npages, int k, int offsets) {
  const size_t page = (size_t)2 << 20, size = npages * page, part = size / k;
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  double us[3] = {0, 0, 0};
  for (int m = 0; m < (offsets ? 3 : 1); m++) {
    CUmemGenericAllocationHandle h = mapped_handle(va, npages, page, &prop), parts[64];
    double t0 = now();
    CK(cuMemUnmap(va, size));
    if (m == 0) {
      CK(cuMemRelease(h));
      for (int i = 0; i < k; i++) CK(cuMemCreate(&parts[i], part, &prop, 0));
    }
    for (int i = 0; i < k; i++) CK(cuMemMap(va + i * part, part, m ? i * part : 0, m ? h : parts[i], 0));
    if (m == 2)
      CK(cuMemSetAccess(va, size, &acc, 1));
    else
      for (int i = 0; i < k; i++) CK(cuMemSetAccess(va + i * part, part, &acc, 1));
    us[m] = now() - t0;
    int bad = 0;
    if (m) /* the parts still show the handle's pages, in order */
      for (int i = 0; i < npages; i++) bad += page_word(va, i, page) != (unsigned)i + 1;
    if (m == 1) { /* the last part, moved 1 GiB up, keeps its data */
      CUdeviceptr far = va + ((size_t)1 << 30), src = va + (k - 1) * part;
      CK(cuMemUnmap(src, part));
      CK(cuMemMap(far, part, (k - 1) * part, h, 0));
      CK(cuMemSetAccess(far, part, &acc, 1));
      for (int i = 0; i < (int)(part / page); i++)
        bad += page_word(far, i, page) != (unsigned)(npages - part / page + i + 1);
      CK(cuMemUnmap(far, part));
      CK(cuMemMap(src, part, (k - 1) * part, h, 0));
      CK(cuMemSetAccess(src, part, &acc, 1));
    }
    for (int i = 0; i < k; i++) CK(cuMemUnmap(va + i * part, part));
    if (m)
      CK(cuMemRelease(h));
    else
      for (int i = 0; i < k; i++) CK(cuMemRelease(parts[i]));
    if (bad) printf("convert %d pages into %d (method %d): %d pages wrong\n", npages, k, m, bad);
  }
  printf("%4d MiB into %2d parts | us: unmap, release, create+map+access each %7.1f", (int)(size >> 20), k, us[0]);
  if (offsets) printf(" | parts of the same handle, access each %7.1f, one access %7.1f", us[1], us[2]);
  printf("\n");
}

/* cuMemGetInfo's cost, 1000 calls a round, alone and with a push and pop. */
static void meminfo_probe(CUcontext ctx) {
  for (int rep = 0; rep < 3; rep++) {
    size_t fr, to;
    double t0 = now();
    for (int i = 0; i < 1000; i++) CK(cuMemGetInfo(&fr, &to));
    double t1 = now();
    for (int i = 0; i < 1000; i++) {
      CUcontext old;
      CK(cuCtxPushCurrent(ctx));
      CK(cuMemGetInfo(&fr, &to));
      CK(cuCtxPopCurrent(&old));
    }
    double t2 = now();
    printf("cuMemGetInfo: %.2f us a call; with a context push and pop %.2f us (free %zu MiB of %zu)\n",
           (t1 - t0) / 1000, (t2 - t1) / 1000, fr >> 20, to >> 20);
  }
}

/* ---- overlap: releases on a second thread ---- */

typedef struct rel_s {
  CUmemGenericAllocationHandle *h;
  int n;
  CUcontext ctx;
  double us; /* the thread's own time */
} rel_t;

static void *release_all(void *arg) {
  rel_t *r = arg;
  CK(cuCtxSetCurrent(r->ctx));
  double t0 = now();
  for (int i = 0; i < r->n; i++) CK(cuMemRelease(r->h[i]));
  r->us = now() - t0;
  return NULL;
}

/* n handles of hsz created (and, with `used`, mapped, given access and
 * unmapped again, as a conversion's old handle is), ready to release. */
static void old_handles(CUmemGenericAllocationHandle *h, int n, size_t hsz, CUdeviceptr va,
                        const CUmemAllocationProp *prop) {
  for (int i = 0; i < n; i++) {
    CK(cuMemCreate(&h[i], hsz, prop, 0));
    CK(cuMemMap(va + i * hsz, hsz, 0, h[i], 0));
    CK(cuMemSetAccess(va + i * hsz, hsz, &acc, 1));
  }
  CK(cuMemUnmap(va, n * hsz));
}

/* Mode 0: make n handles at va (create, map, access) and nothing else;
 * 1: before each, release one old handle inline; 2: the old ones released
 * by a second thread meanwhile.  Returns the first thread's microseconds;
 * *rel_us the second thread's (mode 2). */
static double make_run(CUcontext ctx, CUdeviceptr va, CUdeviceptr old_va, int n, size_t hsz, size_t old_sz,
                       int mode, double *rel_us) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  static CUmemGenericAllocationHandle olds[512], news[512];
  if (mode) old_handles(olds, n, old_sz, old_va, &prop);
  CK(cuCtxSynchronize());
  rel_t r = {olds, n, ctx, 0};
  pthread_t th;
  double t0 = now();
  if (mode == 2 && pthread_create(&th, NULL, release_all, &r) != 0) exit(1);
  for (int i = 0; i < n; i++) {
    if (mode == 1) CK(cuMemRelease(olds[i]));
    CK(cuMemCreate(&news[i], hsz, &prop, 0));
    CK(cuMemMap(va + i * hsz, hsz, 0, news[i], 0));
    CK(cuMemSetAccess(va + i * hsz, hsz, &acc, 1));
  }
  double us = now() - t0;
  if (mode == 2) pthread_join(th, NULL);
  *rel_us = r.us;
  CK(cuMemUnmap(va, n * hsz));
  for (int i = 0; i < n; i++) CK(cuMemRelease(news[i]));
  return us;
}

static void overlap_probe(CUcontext ctx) {
  CUdeviceptr va, old_va;
  CK(cuMemAddressReserve(&va, (size_t)16 << 30, 0, 0, 0));
  CK(cuMemAddressReserve(&old_va, (size_t)16 << 30, 0, 0, 0));
  struct {
    size_t make, old;
    int n;
  } cases[] = {{(size_t)2 << 20, (size_t)2 << 20, 256},
               {(size_t)8 << 20, (size_t)64 << 20, 64},
               {(size_t)32 << 20, (size_t)32 << 20, 64},
               {(size_t)64 << 20, (size_t)512 << 20, 16}};
  for (int rep = 0; rep < 5; rep++)
    for (int c = 0; c < 4; c++) {
      double us[3], rel = 0, r;
      for (int m = 0; m < 3; m++) us[m] = make_run(ctx, va, old_va, cases[c].n, cases[c].make, cases[c].old, m, m == 2 ? &rel : &r);
      printf("overlap: make %3zu MiB x %3d, release %3zu MiB | us per handle made: alone %6.1f, "
             "releases inline %6.1f, releases on a second thread %6.1f (that thread %6.1f per release)\n",
             cases[c].make >> 20, cases[c].n, cases[c].old >> 20, us[0] / cases[c].n, us[1] / cases[c].n,
             us[2] / cases[c].n, rel / cases[c].n);
    }
}

int main(int argc, char **argv) {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  if (argc > 1 && !strcmp(argv[1], "meminfo")) {
    meminfo_probe(ctx);
    return 0;
  }
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (argc > 1 && !strcmp(argv[1], "overlap")) {
    overlap_probe(ctx);
    return 0;
  }
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
  CK(cuMemUnmap(va, (size_t)2 << 20));
  CK(cuMemRelease(a));
  CK(cuMemRelease(b));
  /* A failed memset above leaves the context usable: CUDA_ERROR_ILLEGAL_ADDRESS
   * would not, so the probe stops here in that case. */
  if (r2 != CUDA_SUCCESS) return 0;
  int offsets = offset_probe(va) == CUDA_SUCCESS;
  for (int rep = 0; rep < 3; rep++) {
    convert_probe(va, 16, 2, offsets);
    convert_probe(va, 16, 4, offsets);
    convert_probe(va, 16, 16, offsets);
    convert_probe(va, 64, 4, offsets);
    convert_probe(va, 256, 4, offsets);
  }
  return 0;
}
