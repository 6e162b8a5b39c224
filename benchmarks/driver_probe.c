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
 * thread.  With "limit [MiB [fd]]" it asks what a create costs as the device's
 * free memory runs out (a raw allocation leaves MiB free, 1024 if not
 * given) and just after memory was released there; "fd": handles
 * shareable as POSIX descriptors, as xseg makes them.  With "tables [MiB
 * [GiB]]" it asks where a budget others leave goes: how many 2 MiB handles
 * the driver gives when a raw allocation leaves MiB free (64 if not
 * given), created only, mapped back to back, and mapped each in an address
 * reservation of its own of GiB (256 if not given).  With "idle" it asks
 * what a handle's calls cost after the driver has had no call for a while
 * (0.1-1000 ms, the thread sleeping or spinning), and what reserving
 * address space costs.  With "live [fd]" it asks whether a handle's calls
 * cost more while thousands of others are mapped.  Needs a GPU:
 *
 *   cc -O2 -I/usr/local/cuda/include benchmarks/driver_probe.c \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lpthread -o /tmp/driver_probe &&
 * /tmp/driver_probe [meminfo|overlap|idle|live [fd]|fresh [0|1|2]|limit [MiB [fd]]|tables [MiB [GiB]]]
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

/* Device memory on device 0, shareable as `types` says. */
static CUmemAllocationProp dev_prop(CUmemAllocationHandleType types) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = types;
  return prop;
}
static CUmemAccessDesc acc;
static CUmemGenericAllocationHandle hs[512];

static void cycle(CUdeviceptr va, int nh, size_t hsz, int fd, int one_access,
                  int one_unmap) {
  const CUmemAllocationProp prop =
      dev_prop(fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE);
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
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
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
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
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

/* ---- idle: a call after the driver has had none for a while ---- */

/* One handle of sz bytes created, mapped at va, given access, unmapped and
 * released: each call's microseconds into t[0..4], in that order. */
static void handle_life(CUdeviceptr va, size_t sz, const CUmemAllocationProp *prop, double t[5]) {
  CUmemGenericAllocationHandle h;
  double t0 = now();
  CK(cuMemCreate(&h, sz, prop, 0));
  double t1 = now();
  CK(cuMemMap(va, sz, 0, h, 0));
  double t2 = now();
  CK(cuMemSetAccess(va, sz, &acc, 1));
  double t3 = now();
  CK(cuMemUnmap(va, sz));
  double t4 = now();
  CK(cuMemRelease(h));
  t[0] = t1 - t0, t[1] = t2 - t1, t[2] = t3 - t2, t[3] = t4 - t3, t[4] = now() - t4;
}

/* A warm pass calls the driver a few times, far apart: the driver's times
 * there (xseg-bench passes on an H200) were 20-50 times those of the same
 * calls in a first pass.  Times one 64 MiB handle's create, map and set
 * access, and then its unmap and release, after the thread has made no
 * driver call for `gap` ms (sleeping, or spinning on the CPU), five times
 * per gap, medians; then reserve_probe. */
static int dcmp(const void *a, const void *b);
static void reserve_probe(void);
static void idle_probe(CUdeviceptr va) {
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
  const size_t sz = (size_t)64 << 20;
  static const double gaps[] = {0, 0.1, 1, 10, 100, 1000};
  for (int spin = 0; spin < 2; spin++)
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
      double cr[5], mp[5], ac[5], dn[5];
      for (int r = 0; r < 5; r++) {
        double until = now() + gaps[g] * 1e3;
        if (spin) {
          while (now() < until) {
          }
        } else if (gaps[g] > 0) {
          struct timespec ts = {(time_t)(gaps[g] / 1e3), 0};
          ts.tv_nsec = (long)((gaps[g] - (double)ts.tv_sec * 1e3) * 1e6);
          nanosleep(&ts, NULL);
        }
        double lt[5];
        handle_life(va, sz, &prop, lt);
        cr[r] = lt[0], mp[r] = lt[1], ac[r] = lt[2], dn[r] = lt[3] + lt[4];
      }
      qsort(cr, 5, sizeof cr[0], dcmp), qsort(mp, 5, sizeof mp[0], dcmp);
      qsort(ac, 5, sizeof ac[0], dcmp), qsort(dn, 5, sizeof dn[0], dcmp);
      printf("idle %7.1f ms (%s): create %7.1f us  map %6.1f  access %7.1f  unmap+release %7.1f (medians of 5)\n",
             gaps[g], spin ? "spinning" : "sleeping", cr[2], mp[2], ac[2], dn[2]);
    }
  reserve_probe();
}

/* What a fresh process's first handles cost against later ones: rounds
 * of n 64 MiB handles (create, map and set access each, then unmap and
 * release all), in a fresh address reservation, in that one again, in
 * another fresh one, and in the first again; then the same rounds with
 * cuMemAlloc and cuMemFree (what PyTorch's default allocator calls).
 * warm: before the rounds, nothing (0), one 2 MiB handle's calls (1), or
 * sixteen 64 MiB handles' (2) at an address of their own. */
static void fresh_round(CUdeviceptr va, int n, size_t sz, double t[4]) {
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
  for (int i = 0; i < n; i++) {
    double t0 = now();
    CK(cuMemCreate(&hs[i], sz, &prop, 0));
    double t1 = now();
    CK(cuMemMap(va + i * sz, sz, 0, hs[i], 0));
    double t2 = now();
    CK(cuMemSetAccess(va + i * sz, sz, &acc, 1));
    double t3 = now();
    t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
  }
  double t4 = now();
  for (int i = 0; i < n; i++) {
    CK(cuMemUnmap(va + i * sz, sz));
    CK(cuMemRelease(hs[i]));
  }
  t[3] += now() - t4;
}

static void fresh_probe(int warm) {
  const int n = 48;
  const size_t sz = (size_t)64 << 20;
  CUdeviceptr w, a, b;
  CK(cuMemAddressReserve(&w, (size_t)2 << 30, 0, 0, 0));
  if (warm) {
    double t[4] = {0};
    if (warm == 1) fresh_round(w, 1, (size_t)2 << 20, t);
    else fresh_round(w, 16, sz, t);
  }
  CK(cuMemAddressReserve(&a, n * sz, 0, 0, 0));
  CK(cuMemAddressReserve(&b, n * sz, 0, 0, 0));
  const CUdeviceptr at[4] = {a, a, b, a};
  const char *what[4] = {"fresh va", "same va", "other fresh va", "first va again"};
  for (int r = 0; r < 4; r++) {
    double t[4] = {0};
    double t0 = now();
    fresh_round(at[r], n, sz, t);
    printf("fresh warm %d round %d (%-14s): %d x 64 MiB, per handle: create %6.1f us  map %5.1f  access %6.1f  "
           "unmap+release %6.1f  all %7.1f\n", warm, r, what[r], n, t[0] / n, t[1] / n, t[2] / n, t[3] / n,
           (now() - t0) / n);
  }
  for (int r = 0; r < 3; r++) {
    CUdeviceptr p[48];
    double t0 = now();
    for (int i = 0; i < n; i++) CK(cuMemAlloc(&p[i], sz));
    double t1 = now();
    for (int i = 0; i < n; i++) CK(cuMemFree(p[i]));
    printf("fresh warm %d round %d (cuMemAlloc    ): %d x 64 MiB, per allocation: alloc %6.1f us  free %6.1f\n",
           warm, r, n, (t1 - t0) / n, (now() - t1) / n);
  }
}

/* What reserving address space costs: xseg reserves the device's whole
 * size for each pool's segment (vmm/segment.c) and frees it when an
 * empty cache leaves the segment with nothing mapped. */
static void reserve_probe(void) {
  size_t total = 0;
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CK(cuDeviceTotalMem(&total, dev));
  const size_t gran = (size_t)2 << 20; /* the H100's and H200's granularity */
  const size_t sizes[] = {gran, (size_t)8 << 30, (size_t)64 << 30, (total + gran - 1) / gran * gran};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    double rs[5], fr[5];
    for (int r = 0; r < 5; r++) {
      CUdeviceptr va;
      double t0 = now();
      CK(cuMemAddressReserve(&va, sizes[s], 0, 0, 0));
      double t1 = now();
      CK(cuMemAddressFree(va, sizes[s]));
      rs[r] = t1 - t0, fr[r] = now() - t1;
    }
    qsort(rs, 5, sizeof rs[0], dcmp), qsort(fr, 5, sizeof fr[0], dcmp);
    printf("reserve %8zu MiB: cuMemAddressReserve %7.1f us, cuMemAddressFree %7.1f us (medians of 5)\n",
           sizes[s] >> 20, rs[2], fr[2]);
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
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
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


/* ---- near the device's limit ------------------------------------------------------------- */

static CUmemGenericAllocationHandle lim_h[4096];
static CUmemAllocationHandleType lim_types = CU_MEM_HANDLE_TYPE_NONE;

static CUresult lim_make(CUdeviceptr va, int i, size_t sz) {
  const CUmemAllocationProp prop = dev_prop(lim_types);
  CUresult r = cuMemCreate(&lim_h[i], sz, &prop, 0);
  if (r != CUDA_SUCCESS) return r;
  CK(cuMemMap(va + (size_t)i * sz, sz, 0, lim_h[i], 0));
  CK(cuMemSetAccess(va + (size_t)i * sz, sz, &acc, 1));
  return CUDA_SUCCESS;
}

static void lim_drop(CUdeviceptr va, int i, size_t sz) {
  CK(cuMemUnmap(va + (size_t)i * sz, sz));
  CK(cuMemRelease(lim_h[i]));
}

static int dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median and largest of n creates, in us. */
static void lim_report(const char *what, double *us, int n) {
  qsort(us, n, sizeof *us, dcmp);
  printf("  %-58s n=%4d  median %8.1f  p90 %8.1f  max %8.1f us\n", what, n, us[n / 2], us[n * 9 / 10], us[n - 1]);
}

/* At the limit (n 2 MiB handles of lim_h mapped at va), memory released as
 * scattered 2 MiB handles (every eighth), then asked for as one handle of
 * their sum, as a coalescing or a large growth does; then one such handle
 * released and asked for as small ones, as a conversion does. */
static void scattered_probe(CUdeviceptr va, int n, size_t sz) {
  static double us[32];
  static CUmemGenericAllocationHandle big[8];
  CUdeviceptr bva;
  const size_t bsz = (size_t)32 * sz;
  CK(cuMemAddressReserve(&bva, 8 * bsz, 0, 0, 0));
  int nb = 0;
  double bus[8];
  const CUmemAllocationProp prop = dev_prop(lim_types);
  for (int r = 0; r < 8 && (r + 1) * 32 * 8 <= n; r++) {
    for (int i = 0; i < 32; i++) lim_drop(va, r * 256 + i * 8, sz);
    double t0 = now();
    CUresult cr = cuMemCreate(&big[nb], bsz, &prop, 0);
    if (cr != CUDA_SUCCESS) {
      printf("  a 64 MiB create refused after releasing 32 scattered pages\n");
      for (int i = 0; i < 32; i++) CK(lim_make(va, r * 256 + i * 8, sz));
      break;
    }
    CK(cuMemMap(bva + nb * bsz, bsz, 0, big[nb], 0));
    CK(cuMemSetAccess(bva + nb * bsz, bsz, &acc, 1));
    bus[nb++] = now() - t0;
  }
  if (nb) lim_report("full: 32 scattered 2 MiB released, one 64 MiB created", bus, nb);
  if (nb) {
    CK(cuMemUnmap(bva + (nb - 1) * bsz, bsz));
    CK(cuMemRelease(big[nb - 1]));
    for (int i = 0; i < 32; i++) {
      double t0 = now();
      CK(lim_make(va, (nb - 1) * 256 + i * 8, sz));
      us[i] = now() - t0;
    }
    nb--;
    lim_report("full: one 64 MiB released, 32 x 2 MiB created", us, 32);
  }
  for (int r = 0; r < nb; r++) {
    CK(cuMemUnmap(bva + r * bsz, bsz));
    CK(cuMemRelease(big[r]));
    for (int i = 0; i < 32; i++) CK(lim_make(va, r * 256 + i * 8, sz));
  }
  CK(cuMemAddressFree(bva, 8 * bsz));
}

/* ---- with many handles mapped ------------------------------------------------------------ */

/* Whether a handle's calls cost more while many others are mapped: n
 * 2 MiB handles of lim_h mapped back to back in one reservation, as xseg
 * maps a segment's pages, then 256 rounds of one 2 MiB handle created,
 * mapped, given access, unmapped and released in a reservation of its own;
 * medians of each call, for n = 0, 1024, 2048 and 4095. */
static void live_probe(void) {
  const size_t sz = (size_t)2 << 20;
  const int counts[] = {0, 1024, 2048, 4095}, rounds = 256;
  static double t[5][256];
  CUdeviceptr va, one;
  CK(cuMemAddressReserve(&va, 4096 * sz, 0, 0, 0));
  CK(cuMemAddressReserve(&one, sz, 0, 0, 0));
  const CUmemAllocationProp prop = dev_prop(lim_types);
  printf("live: one 2 MiB handle's calls with n others mapped (handles %s), medians of %d, us\n",
         lim_types == CU_MEM_HANDLE_TYPE_NONE ? "plain" : "shareable as POSIX descriptors", rounds);
  int have = 0;
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    while (have < counts[k]) {
      CK(lim_make(va, have, sz));
      have++;
    }
    for (int r = 0; r < rounds; r++) {
      double lt[5];
      handle_life(one, sz, &prop, lt);
      for (int c = 0; c < 5; c++) t[c][r] = lt[c];
    }
    for (int c = 0; c < 5; c++) qsort(t[c], rounds, sizeof t[c][0], dcmp);
    printf("  n=%5d  create %6.1f  map %5.1f  set access %6.1f  unmap %6.1f  release %6.1f  sum %6.1f\n", counts[k],
           t[0][rounds / 2], t[1][rounds / 2], t[2][rounds / 2], t[3][rounds / 2], t[4][rounds / 2],
           t[0][rounds / 2] + t[1][rounds / 2] + t[2][rounds / 2] + t[3][rounds / 2] + t[4][rounds / 2]);
  }
  for (int i = 0; i < have; i++) lim_drop(va, i, sz);
  CK(cuMemAddressFree(one, sz));
  CK(cuMemAddressFree(va, 4096 * sz));
}

/* What a create costs as the device's free memory runs out, and just after
 * memory was released there: a raw cuMemAlloc (the filler) leaves
 * `left` MiB free, 2 MiB handles are made (mapped, given access) until the
 * driver refuses, then released and made again one at a time, at once and
 * after a pause, with the device full and with room. */
static void limit_probe(size_t left_mib) {
  const size_t sz = (size_t)2 << 20;
  size_t fr, to;
  CK(cuMemGetInfo(&fr, &to));
  CUdeviceptr filler = 0, va;
  size_t fill = fr > (left_mib << 20) ? fr - (left_mib << 20) : 0;
  if (fill) CK(cuMemAlloc(&filler, fill));
  CK(cuMemGetInfo(&fr, &to));
  printf("limit: filler %zu MiB, %zu MiB free of %zu; handles %s\n", fill >> 20, fr >> 20, to >> 20,
         lim_types == CU_MEM_HANDLE_TYPE_NONE ? "plain" : "shareable as POSIX descriptors");
  CK(cuMemAddressReserve(&va, (size_t)4096 * sz, 0, 0, 0));
  static double us[4096], free_at[4096];
  int n = 0;
  for (; n < 4096; n++) {
    CK(cuMemGetInfo(&fr, &to));
    free_at[n] = (double)(fr >> 20);
    double t0 = now();
    CUresult r = lim_make(va, n, sz);
    us[n] = now() - t0;
    if (r != CUDA_SUCCESS) {
      printf("  refused after %d handles (%zu MiB free by cuMemGetInfo), the refusal took %.1f us\n", n, fr >> 20,
             us[n]);
      break;
    }
  }
  /* Creates by the free memory before them. */
  static const double bands[] = {1e9, 1024, 256, 64, 16, 0};
  for (int b = 0; b + 1 < (int)(sizeof bands / sizeof *bands); b++) {
    static double sel[4096];
    int k = 0;
    for (int i = 0; i < n; i++)
      if (free_at[i] <= bands[b] && free_at[i] > bands[b + 1]) sel[k++] = us[i];
    char what[96];
    snprintf(what, sizeof what, "create+map+access, %g < free <= %g MiB", bands[b + 1], bands[b]);
    if (k) lim_report(what, sel, k);
  }
  /* At the limit: drop one, make one; then the same after a 20 ms pause. */
  int m = n < 64 ? n : 64;
  for (int pause = 0; pause < 2; pause++) {
    for (int i = 0; i < m; i++) {
      lim_drop(va, n - 1 - i, sz);
      if (pause) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
      }
      double t0 = now();
      CK(lim_make(va, n - 1 - i, sz));
      us[i] = now() - t0;
    }
    lim_report(pause ? "full: release one, 20 ms, create one" : "full: release one, create one at once", us, m);
  }
  /* Release 64 at once, then make them again. */
  for (int i = 0; i < m; i++) lim_drop(va, n - 1 - i, sz);
  for (int i = 0; i < m; i++) {
    double t0 = now();
    CK(lim_make(va, n - 1 - i, sz));
    us[i] = now() - t0;
  }
  lim_report("full: release 64, then create 64", us, m);
  scattered_probe(va, n, sz);
  /* With room: half released, then the same churn. */
  int half = n / 2;
  for (int i = half; i < n; i++) lim_drop(va, i, sz);
  CK(cuMemGetInfo(&fr, &to));
  for (int i = 0; i < m; i++) {
    lim_drop(va, half - 1 - i, sz);
    double t0 = now();
    CK(lim_make(va, half - 1 - i, sz));
    us[i] = now() - t0;
  }
  char what[96];
  snprintf(what, sizeof what, "room (%zu MiB free): release one, create one at once", fr >> 20);
  lim_report(what, us, m);
  for (int i = 0; i < half; i++) lim_drop(va, i, sz);
  CK(cuMemAddressFree(va, (size_t)4096 * sz));
  if (filler) CK(cuMemFree(filler));
}

/* Where a budget others leave goes: a raw allocation leaves `left` MiB
 * free, then 2 MiB handles are made until the driver refuses, (a) created
 * only, (b) created and mapped back to back in one address reservation,
 * (c) each mapped in a reservation of its own of `spread` GiB, as far apart
 * as xseg's segments lie.  Each line counts the handles made and the free
 * memory cuMemGetInfo showed before the first and after the last; where a
 * map (not a create) took free memory, the driver spent device memory on
 * its own tables for the new mapping. */
static void tables_probe(size_t left_mib, size_t spread_gib) {
  const size_t sz = (size_t)2 << 20, mib = (size_t)1 << 20;
  size_t fr, to;
  CK(cuMemGetInfo(&fr, &to));
  CUdeviceptr filler = 0;
  size_t fill = fr > (left_mib << 20) ? fr - (left_mib << 20) : 0;
  if (fill) CK(cuMemAlloc(&filler, fill));
  CK(cuMemGetInfo(&fr, &to));
  printf("tables: filler %zu MiB, %zu MiB free (asked to leave %zu) of %zu\n", fill >> 20, fr >> 20, left_mib,
         to >> 20);
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
  static CUdeviceptr vas[1024];
  for (int how = 0; how < 3; how++) {
    const int cap = 1024;
    int n = 0, nva = 0, map_took = 0;
    size_t map_bytes = 0, fr0;
    CK(cuMemGetInfo(&fr0, &to));
    if (how == 1) CK(cuMemAddressReserve(&vas[nva++], (size_t)cap * sz, 0, 0, 0));
    for (; n < cap; n++) {
      if (cuMemCreate(&lim_h[n], sz, &prop, 0) != CUDA_SUCCESS) break;
      if (how == 0) continue;
      CUdeviceptr at;
      if (how == 1) {
        at = vas[0] + (size_t)n * sz;
      } else {
        CK(cuMemAddressReserve(&vas[nva], spread_gib << 30, 0, 0, 0));
        at = vas[nva++];
      }
      size_t before, after;
      CK(cuMemGetInfo(&before, &to));
      CK(cuMemMap(at, sz, 0, lim_h[n], 0));
      CK(cuMemSetAccess(at, sz, &acc, 1));
      CK(cuMemGetInfo(&after, &to));
      if (after < before) {
        map_took++;
        map_bytes += before - after;
      }
    }
    CK(cuMemGetInfo(&fr, &to));
    static const char *names[] = {"created only", "created, mapped back to back in one reservation",
                                  "created, each mapped in a reservation of its own"};
    printf("  %-52s %4d handles (%4zu MiB); free %zu -> %zu MiB; maps that took memory: %d (%zu KiB)\n",
           names[how], n, n * sz / mib, fr0 >> 20, fr >> 20, map_took, map_bytes >> 10);
    for (int i = 0; i < n; i++) {
      if (how == 1) CK(cuMemUnmap(vas[0] + (size_t)i * sz, sz));
      if (how == 2) CK(cuMemUnmap(vas[i], sz));
      CK(cuMemRelease(lim_h[i]));
    }
    for (int i = 0; i < nva; i++) CK(cuMemAddressFree(vas[i], how == 1 ? (size_t)cap * sz : spread_gib << 30));
  }
  if (filler) CK(cuMemFree(filler));
}

/* A handle of `asz` MiB released at the limit and its memory asked for again
 * at once: as one handle of the same size, as a slightly smaller one and a
 * page (what a conversion makes), as 16 MiB or 2 MiB handles, after a
 * pause, after cuCtxSynchronize, and after cuMemGetInfo shows the memory
 * free again.  The filler leaves `left` MiB free; a 512 MiB handle is held
 * beside, so about left - 512 - asz MiB stay free besides the released. */
static void release_probe(size_t left_mib, size_t asz_mib) {
  const size_t mib = (size_t)1 << 20, asz = asz_mib * mib, keep_sz = 512 * mib;
  size_t fr, to;
  CK(cuMemGetInfo(&fr, &to));
  CUdeviceptr filler = 0, va;
  size_t fill = fr > left_mib * mib ? fr - left_mib * mib : 0;
  if (fill) CK(cuMemAlloc(&filler, fill));
  CK(cuMemAddressReserve(&va, asz + keep_sz, 0, 0, 0));
  const CUmemAllocationProp prop = dev_prop(lim_types);
  CUmemGenericAllocationHandle keep, a, parts[1024];
  CK(cuMemCreate(&keep, keep_sz, &prop, 0));
  CK(cuMemMap(va + asz, keep_sz, 0, keep, 0));
  CK(cuMemSetAccess(va + asz, keep_sz, &acc, 1));
  CK(cuMemGetInfo(&fr, &to));
  size_t beside = fr > asz ? fr - asz : 0;
  printf("release: a %zu MiB handle released and made again, %zu MiB free beside\n", asz_mib, beside >> 20);
  /* way: 0 none, 1 sleep pause_us, 2 cuCtxSynchronize, 3 poll cuMemGetInfo */
  static const struct {
    const char *what;
    size_t first, rest;
    int way, pause_us;
  } v[] = {{"the same size", 0, 0, 0, 0},         {"all but 16 MiB + 16 MiB", 1, 16, 0, 0},
           {"16 MiB handles", 16, 16, 0, 0},      {"2 MiB handles", 2, 2, 0, 0},
           {"the same after 100 us", 0, 0, 1, 100}, {"the same after 250 us", 0, 0, 1, 250},
           {"the same after 500 us", 0, 0, 1, 500}, {"the same after 1 ms", 0, 0, 1, 1000},
           {"the same after 2 ms", 0, 0, 1, 2000},  {"the same after cuCtxSynchronize", 0, 0, 2, 0},
           {"the same once cuMemGetInfo shows it", 0, 0, 3, 0}};
  for (unsigned k = 0; k < sizeof v / sizeof *v; k++) {
    double us[8], first[8], waited[8];
    int polls = 0;
    for (int rep = 0; rep < 8; rep++) {
      CK(cuMemCreate(&a, asz, &prop, 0));
      CK(cuMemMap(va, asz, 0, a, 0));
      CK(cuMemSetAccess(va, asz, &acc, 1));
      CK(cuMemUnmap(va, asz));
      CK(cuMemRelease(a));
      double w0 = now();
      if (v[k].way == 1) {
        struct timespec ts = {0, v[k].pause_us * 1000L};
        nanosleep(&ts, NULL);
      } else if (v[k].way == 2) {
        CK(cuCtxSynchronize());
      } else if (v[k].way == 3) {
        do {
          CK(cuMemGetInfo(&fr, &to));
          polls++;
        } while (fr < beside + asz && now() - w0 < 50000);
      }
      waited[rep] = now() - w0;
      int np = 0;
      double t0 = now();
      for (size_t off = 0; off < asz; np++) {
        size_t sz = v[k].first == 0 ? asz : v[k].first == 1 ? (np == 0 ? asz - 16 * mib : 16 * mib)
                                                            : (np == 0 ? v[k].first : v[k].rest) * mib;
        CK(cuMemCreate(&parts[np], sz, &prop, 0));
        if (np == 0) first[rep] = now() - t0;
        off += sz;
      }
      us[rep] = now() - t0;
      for (int i = 0; i < np; i++) CK(cuMemRelease(parts[i]));
      struct timespec ts = {0, 20 * 1000L * 1000L}; /* let the parts' release finish */
      nanosleep(&ts, NULL);
    }
    qsort(us, 8, sizeof *us, dcmp);
    qsort(first, 8, sizeof *first, dcmp);
    qsort(waited, 8, sizeof *waited, dcmp);
    printf("  made again as %-36s median %8.1f us (first create %8.1f), max %8.1f; waited %7.1f us%s\n", v[k].what,
           us[4], first[4], us[7], waited[4], v[k].way == 3 ? "" : "");
    if (v[k].way == 3) printf("    (%d cuMemGetInfo calls in 8 rounds)\n", polls);
  }
  CK(cuMemUnmap(va + asz, keep_sz));
  CK(cuMemRelease(keep));
  CK(cuMemAddressFree(va, asz + keep_sz));
  if (filler) CK(cuMemFree(filler));
}

/* Whether access survives an unmap and a map of another handle, then the
 * conversion probes (convert_probe). */
static void remap_and_convert_probes(CUdeviceptr va) {
  /* Access after an unmap and a map of another handle, no new set access. */
  const CUmemAllocationProp prop = dev_prop(CU_MEM_HANDLE_TYPE_NONE);
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
  if (r2 != CUDA_SUCCESS) return;
  int offsets = offset_probe(va) == CUDA_SUCCESS;
  for (int rep = 0; rep < 3; rep++) {
    convert_probe(va, 16, 2, offsets);
    convert_probe(va, 16, 4, offsets);
    convert_probe(va, 16, 16, offsets);
    convert_probe(va, 64, 4, offsets);
    convert_probe(va, 256, 4, offsets);
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
  if (argc > 1 && !strcmp(argv[1], "release")) {
    if (argc > 3 && !strcmp(argv[3], "fd")) lim_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    release_probe(argc > 2 ? strtoul(argv[2], NULL, 10) : 1100, argc > 4 ? strtoul(argv[4], NULL, 10) : 512);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "tables")) {
    tables_probe(argc > 2 ? strtoul(argv[2], NULL, 10) : 64, argc > 3 ? strtoul(argv[3], NULL, 10) : 256);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "limit")) {
    if (argc > 3 && !strcmp(argv[3], "fd")) lim_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    limit_probe(argc > 2 ? strtoul(argv[2], NULL, 10) : 1024);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "live")) {
    if (argc > 2 && !strcmp(argv[2], "fd")) lim_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    live_probe();
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "fresh")) {
    fresh_probe(argc > 2 ? atoi(argv[2]) : 0);
    return 0;
  }
  CUdeviceptr va;
  CK(cuMemAddressReserve(&va, (size_t)8 << 30, 0, 0, 0));
  if (argc > 1 && !strcmp(argv[1], "idle")) {
    idle_probe(va); /* and reserve_probe */
    return 0;
  }
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
  remap_and_convert_probes(va);
  return 0;
}
