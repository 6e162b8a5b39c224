/* test_gpu_alloc.c: the allocator through the CUDA backend on a real GPU.
 *
 * The integrity tests of test/test_alloc.c, with device memory written by
 * the driver (cuMemsetD32) and read back (cuMemcpyDtoH): every live block
 * carries its own 32-bit pattern, checked before its free and after every
 * grow, shrink or remap; a memory cap (max_memory_mb) forces the remap path
 * with real cuMemUnmap/cuMemMap calls, and remapped blocks are written and
 * read in full.  Also: real streams with record_stream, empty_cache giving
 * the memory back to the driver, a kernel reading xseg's memory, and -
 * where there are two GPUs - peer access to pages mapped before and after
 * it was enabled, through copies and through a kernel on the other GPU.
 */
#include <stdlib.h>

#include "count_other_ptx.h"
#include "gpu_util.h"
#include "testutil.h"

/* Statistics by dotted path: t_stat from testutil.h. */
static long long stat_of(const char *path) { return t_stat(0, path); }

static uint32_t *host; /* read-back buffer */

/* Fill the block with its tag (32-bit words); the tail bytes with 0x5a. */
static void fill(void *p, size_t n, uint32_t tag) {
  if (n >= 4) GPU_CHECK(gpu.MemsetD32((CUdeviceptr)p, tag, n / 4));
  if (n % 4) GPU_CHECK(gpu.MemsetD8((CUdeviceptr)p + n / 4 * 4, 0x5a, n % 4));
}

/* Check every byte of [p, p+n), in 64 MiB pieces. */
static int verify(void *p, size_t n, uint32_t tag) {
  size_t done = 0;
  while (done < n) {
    size_t k = n - done < 64 * MiB ? n - done : 64 * MiB;
    if (gpu.MemcpyDtoH(host, (CUdeviceptr)p + done, k) != CUDA_SUCCESS) return 0;
    size_t words = k / 4;
    for (size_t i = 0; i < words; i++)
      if (host[i] != tag) return 0;
    const unsigned char *t = (const unsigned char *)(host + words);
    if (done + k == n)
      for (size_t i = 0; i < k % 4; i++)
        if (t[i] != 0x5a) return 0;
    done += k;
  }
  return 1;
}

/* The 32-bit words of [p, p + 4 n) that differ from `want`, counted by a
 * kernel (count_other.cu) launched in context ctx, which may be another
 * GPU's: then every load is a peer load.  -1 if the kernel did not run. */
static long kernel_count_other(CUcontext ctx, const void *p, size_t n, uint32_t want) {
  static CUcontext ctxs[4];
  static CUfunction fns[4];
  static int nfns;
  CUcontext popped;
  if (gpu.CtxPushCurrent(ctx) != CUDA_SUCCESS) return -1;
  CUfunction fn = NULL;
  for (int i = 0; i < nfns; i++)
    if (ctxs[i] == ctx) fn = fns[i];
  CUmodule mod;
  if (!fn && nfns < 4 && gpu.ModuleLoadData(&mod, count_other_ptx) == CUDA_SUCCESS &&
      gpu.ModuleGetFunction(&fn, mod, "xseg_count_other") == CUDA_SUCCESS) {
    ctxs[nfns] = ctx;
    fns[nfns++] = fn;
  }
  long out = -1;
  CUdeviceptr bad = 0;
  if (fn && gpu.MemAlloc(&bad, 4) == CUDA_SUCCESS) {
    const void *src = p;
    unsigned long long words = n;
    unsigned w = want;
    void *args[] = {&src, &words, &w, &bad};
    uint32_t count = 0;
    if (gpu.MemsetD32(bad, 0, 1) == CUDA_SUCCESS &&
        gpu.LaunchKernel(fn, 264, 1, 1, 256, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS &&
        gpu.CtxSynchronize() == CUDA_SUCCESS && gpu.MemcpyDtoH(&count, bad, 4) == CUDA_SUCCESS)
      out = count;
    gpu.MemFree(bad);
  }
  gpu.CtxPopCurrent(&popped);
  return out;
}

/* A kernel sees what the driver wrote, in every block, and the check can
 * fail: asked for another value it counts every word. */
static void kernel_sees(CUcontext ctx, void *p, size_t n, uint32_t tag, const char *what) {
  long same = kernel_count_other(ctx, p, n / 4, tag), other = kernel_count_other(ctx, p, n / 4, tag ^ 1u);
  XT_CHECK_MSG(same == 0, "%s: a kernel found %ld of %zu words of %p wrong", what, same, n / 4, p);
  XT_CHECK_MSG(other == (long)(n / 4), "%s: asked for another value, the kernel counted %ld of %zu words", what,
               other, n / 4);
}

typedef struct live_s {
  void *p;
  size_t n;
  uint32_t tag;
} live_t;

static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void integrity(const char *mode) {
  char conf[256];
  snprintf(conf, sizeof conf, "backend:cuda,%s,max_memory_mb:512", mode);
  XT_REQUIRE(xseg_init(conf) == 0);
  static live_t v[1024];
  int n = 0, ooms = 0;
  uint32_t tag = 1;
  rng = 0xC0FFEE;
  long long last = -1;
  for (int step = 0; step < 1500 && !xt_failures; step++) {
    int op = (int)(rnd() % 100);
    if (op < 55 && n < 1024) {
      size_t sz;
      switch (rnd() % 3) {
      case 0: sz = 1 + rnd() % (64 * 1024); break;
      case 1: sz = 1 + rnd() % (2 * MiB); break;
      default: sz = 1 + rnd() % (48 * MiB); break;
      }
      void *p = xseg_malloc(sz, 0, NULL);
      if (!p) {
        XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENOMEM);
        ooms++;
        continue;
      }
      fill(p, sz, tag);
      v[n++] = (live_t){p, sz, tag++};
    } else if (op < 97 && n > 0) {
      int i = (int)(rnd() % (uint64_t)n);
      XT_CHECK_MSG(verify(v[i].p, v[i].n, v[i].tag), "block %p (%zu bytes) lost its pattern", v[i].p, v[i].n);
      XT_CHECK_EQ(xseg_free(v[i].p), 0);
      v[i] = v[--n];
    } else {
      XT_CHECK_EQ(xseg_empty_cache(0), 0);
    }
    long long moves = stat_of("num_map") + stat_of("num_unmap");
    if (moves != last) { /* after every grow, shrink or remap */
      GPU_CHECK(gpu.CtxSynchronize());
      for (int i = 0; i < n; i++)
        XT_CHECK_MSG(verify(v[i].p, v[i].n, v[i].tag), "block %p lost its pattern after a map/unmap", v[i].p);
      last = moves;
    }
    if (step % 25 == 0) XT_CHECK_MSG(xseg_check_heap(0) == 0, "%s", xseg_last_error());
  }
  printf("  %s: %lld maps, %lld unmaps, %lld remapped MiB, %d OOMs at the 512 MiB cap\n", mode, stat_of("num_map"),
         stat_of("num_unmap"), stat_of("remapped_bytes") >> 20, ooms);
  for (int i = 0; i < n; i++) XT_CHECK_EQ(xseg_free(v[i].p), 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  XT_CHECK_EQ(stat_of("held_bytes.current"), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(integrity_expandable) { integrity("expandable_segments:True"); }
XT_TEST(integrity_binned) { integrity("expandable_segments:False"); }

/* Fill 64 MiB with 2 MiB blocks and free every other.  Four 4 MiB
 * requests are served by moving the freed pages' handles (a request of two
 * pages moves them, no handle is created); a 16 MiB one then finds its
 * eight pages in holes and gets one new handle made of their memory
 * (vmm/segment.c, coalesce).  Every byte of each is usable, and the live
 * blocks keep theirs. */
XT_TEST(remap_touches_every_byte) {
  XT_REQUIRE(xseg_init("backend:cuda,max_memory_mb:64") == 0);
  live_t v[32];
  for (int i = 0; i < 32; i++) {
    v[i].p = xseg_malloc(2 * MiB, 0, NULL);
    XT_REQUIRE(v[i].p != NULL);
    v[i].n = 2 * MiB;
    v[i].tag = 0x1000u + (uint32_t)i;
    fill(v[i].p, v[i].n, v[i].tag);
  }
  XT_CHECK(xseg_malloc(2 * MiB, 0, NULL) == NULL);
  for (int i = 1; i < 32; i += 2) XT_CHECK_EQ(xseg_free(v[i].p), 0);
  void *q[5];
  for (int k = 0; k < 4; k++) {
    XT_REQUIRE((q[k] = xseg_malloc(4 * MiB, 0, NULL)) != NULL);
    fill(q[k], 4 * MiB, 0xB16B0000u + (uint32_t)k);
  }
  /* The first takes a freed page in place and moves one; the others move
   * both of theirs. */
  XT_CHECK(stat_of("remapped_bytes") >= (long long)(14 * MiB));
  XT_CHECK_EQ(stat_of("num_device_alloc"), 32);
  long long moved = stat_of("remapped_bytes"), freed = stat_of("num_device_free");
  XT_REQUIRE((q[4] = xseg_malloc(16 * MiB, 0, NULL)) != NULL);
  fill(q[4], 16 * MiB, 0xB16B0004u);
  XT_CHECK_EQ(stat_of("num_device_alloc"), 33);
  XT_CHECK_EQ(stat_of("num_device_free") - freed, 8);
  XT_CHECK_EQ(stat_of("remapped_bytes"), moved);
  GPU_CHECK(gpu.CtxSynchronize());
  for (int k = 0; k < 5; k++) XT_CHECK(verify(q[k], k < 4 ? 4 * MiB : 16 * MiB, 0xB16B0000u + (uint32_t)k));
  for (int i = 0; i < 32; i += 2) XT_CHECK(verify(v[i].p, v[i].n, v[i].tag));
  XT_CHECK_EQ(xseg_check_heap(0), 0);
  printf("  remapped %lld MiB in %lld moves, %lld creates\n", stat_of("remapped_bytes") >> 20, stat_of("num_remaps"),
         stat_of("num_device_alloc"));
  for (int k = 0; k < 5; k++) XT_CHECK_EQ(xseg_free(q[k]), 0);
  for (int i = 0; i < 32; i += 2) XT_CHECK_EQ(xseg_free(v[i].p), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* Real streams: a block used on a second stream is not reused before that
 * stream's work is done, and nothing is lost. */
XT_TEST(streams_and_record_stream) {
  XT_REQUIRE(xseg_init("backend:cuda") == 0);
  CUstream s1, s2;
  GPU_CHECK(gpu.StreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  GPU_CHECK(gpu.StreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  for (int round = 0; round < 50; round++) {
    void *a = xseg_malloc(8 * MiB, 0, (xseg_stream_t)s1);
    XT_REQUIRE(a != NULL);
    GPU_CHECK(gpu.MemsetD8Async((CUdeviceptr)a, (unsigned char)round, 8 * MiB, s2));
    XT_CHECK_EQ(xseg_record_stream(a, (xseg_stream_t)s2), 0);
    XT_CHECK_EQ(xseg_free(a), 0);
    void *b = xseg_malloc(8 * MiB, 0, (xseg_stream_t)s1);
    XT_REQUIRE(b != NULL);
    XT_CHECK_EQ(xseg_free(b), 0);
  }
  GPU_CHECK(gpu.StreamSynchronize(s2));
  void *c = xseg_malloc(4096, 0, (xseg_stream_t)s1); /* processes the completed events */
  XT_CHECK_EQ(xseg_free(c), 0);
  XT_CHECK_EQ(stat_of("pending_frees.current"), 0);
  XT_CHECK_EQ(xseg_check_heap(0), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  gpu.StreamDestroy(s1);
  gpu.StreamDestroy(s2);
}

/* empty_cache gives the memory back to the driver. */
XT_TEST(empty_cache_returns_memory) {
  size_t free0, free1, free2, total;
  XT_REQUIRE(xseg_init("backend:cuda") == 0);
  GPU_CHECK(gpu.MemGetInfo(&free0, &total));
  void *p[8];
  for (int i = 0; i < 8; i++) XT_REQUIRE((p[i] = xseg_malloc(256 * MiB, 0, NULL)) != NULL);
  GPU_CHECK(gpu.MemGetInfo(&free1, &total));
  XT_CHECK(free0 - free1 >= 2048 * MiB);
  for (int i = 0; i < 8; i++) XT_CHECK_EQ(xseg_free(p[i]), 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  GPU_CHECK(gpu.MemGetInfo(&free2, &total));
  XT_CHECK_MSG(free2 + 64 * MiB >= free0, "free %zu MiB before, %zu MiB after empty_cache", free0 >> 20, free2 >> 20);
  XT_CHECK_EQ(stat_of("handles_live.current"), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* A kernel reads blocks of every size class, on pages mapped by growth,
 * and again after empty_cache gave them back and growth mapped new ones. */
static void kernel_reads(const char *mode) {
  char conf[128];
  snprintf(conf, sizeof conf, "backend:cuda,%s", mode);
  XT_REQUIRE(xseg_init(conf) == 0);
  size_t sizes[] = {4 * KiB, 700 * KiB, 20 * MiB + 12345 * 4, 300 * MiB};
  for (int round = 0; round < 2; round++) {
    void *p[4];
    for (int i = 0; i < 4; i++) {
      XT_REQUIRE((p[i] = xseg_malloc(sizes[i], 0, NULL)) != NULL);
      fill(p[i], sizes[i], 0x7100u + (unsigned)(round * 4 + i));
    }
    GPU_CHECK(gpu.CtxSynchronize());
    for (int i = 0; i < 4; i++) kernel_sees(gpu.ctx, p[i], sizes[i], 0x7100u + (unsigned)(round * 4 + i), mode);
    for (int i = 0; i < 4; i++) XT_CHECK_EQ(xseg_free(p[i]), 0);
    XT_CHECK_EQ(xseg_empty_cache(0), 0);
  }
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(kernel_reads_expandable) { kernel_reads("expandable_segments:True"); }
XT_TEST(kernel_reads_binned) { kernel_reads("expandable_segments:False"); }

/* Two GPUs: memory of GPU 0 written and read from GPU 1, for pages mapped
 * before peer access was enabled and after. */
XT_TEST(peer_access) {
  int n = 0;
  if (gpu.DeviceGetCount(&n) != CUDA_SUCCESS || n < 2) {
    printf("  peer access: %d GPU(s), needs 2: not run\n", n);
    return;
  }
  XT_REQUIRE(xseg_init("backend:cuda") == 0);
  void *bufs[2];
  size_t sizes[2] = {64 * MiB, 96 * MiB};
  XT_REQUIRE((bufs[0] = xseg_malloc(sizes[0], 0, NULL)) != NULL);
  XT_REQUIRE(xseg_enable_peer_access(0, 1) == 0);
  XT_REQUIRE((bufs[1] = xseg_malloc(sizes[1], 0, NULL)) != NULL);
  CUdevice d1;
  CUcontext c1, popped;
  GPU_CHECK(gpu.DeviceGet(&d1, 1));
  GPU_CHECK(gpu.DevicePrimaryCtxRetain(&c1, d1));
  for (int k = 0; k < 2; k++) {
    uint32_t a = 0xAB00u + (unsigned)k, b = 0xCD00u + (unsigned)k;
    /* GPU 1 writes GPU 0's memory ... */
    GPU_CHECK(gpu.CtxPushCurrent(c1));
    GPU_CHECK(gpu.MemsetD32((CUdeviceptr)bufs[k], a, sizes[k] / 4));
    GPU_CHECK(gpu.CtxSynchronize());
    GPU_CHECK(gpu.CtxPopCurrent(&popped));
    /* ... GPU 0 sees it, writes it again ... */
    XT_CHECK(verify(bufs[k], sizes[k], a));
    fill(bufs[k], sizes[k], b);
    GPU_CHECK(gpu.CtxSynchronize());
    /* ... and GPU 1 reads it into its own memory. */
    CUdeviceptr tmp = 0;
    GPU_CHECK(gpu.CtxPushCurrent(c1));
    GPU_CHECK(gpu.MemAlloc(&tmp, sizes[k]));
    GPU_CHECK(gpu.MemcpyDtoD(tmp, (CUdeviceptr)bufs[k], sizes[k]));
    GPU_CHECK(gpu.CtxSynchronize());
    XT_CHECK(verify((void *)tmp, sizes[k], b));
    GPU_CHECK(gpu.MemFree(tmp));
    GPU_CHECK(gpu.CtxPopCurrent(&popped));
  }
  /* A kernel on GPU 1 reads GPU 0's memory itself (peer loads, not copies). */
  for (int k = 0; k < 2; k++) {
    fill(bufs[k], sizes[k], 0xEF00u + (unsigned)k);
    GPU_CHECK(gpu.CtxSynchronize());
    kernel_sees(c1, bufs[k], sizes[k], 0xEF00u + (unsigned)k, k ? "peer, mapped after enabling" : "peer, mapped before");
  }
  printf("  peer access: GPU 1 wrote and read GPU 0's memory mapped before and after enabling it, by copies and by a kernel\n");
  XT_CHECK_EQ(xseg_free(bufs[0]), 0);
  XT_CHECK_EQ(xseg_free(bufs[1]), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

int main(void) {
  int rc = gpu_open(0);
  if (rc != 0) return rc;
  host = malloc(64 * MiB);
  XT_RUN(integrity_expandable);
  XT_RUN(integrity_binned);
  XT_RUN(remap_touches_every_byte);
  XT_RUN(streams_and_record_stream);
  XT_RUN(empty_cache_returns_memory);
  XT_RUN(kernel_reads_expandable);
  XT_RUN(kernel_reads_binned);
  XT_RUN(peer_access);
  free(host);
  return XT_DONE();
}
