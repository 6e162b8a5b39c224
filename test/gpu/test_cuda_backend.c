/* test/gpu/test_cuda_backend.c: the CUDA driver backend against a real GPU.
 *
 * Drives every member of the backend table (vmm/backend.h) on device 0 and
 * checks the memory it maps byte by byte with the driver's own memset and
 * copies (test/gpu/gpu_util.h), including a handle moved to another offset
 * and a handle released while still mapped.  Also checks that the backend
 * leaves the caller's current context alone.  Without a driver or a GPU it
 * says why and exits XT_SKIP.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_util.h"
#include "xtest.h"

static xs_backend_t *be;
static xs_devinfo_t info;
static int ndev;
static size_t gran; /* device 0's granularity: every size below is a multiple */

/* Bytes in [addr, addr+size) that differ from `want`, read with
 * cuMemcpyDtoH; SIZE_MAX if the memory could not be read. */
static size_t mismatches(uintptr_t addr, size_t size, unsigned char want) {
  unsigned char *buf = malloc(size);
  if (buf == NULL) return SIZE_MAX;
  size_t bad = 0;
  CUresult r = gpu.MemcpyDtoH(buf, (CUdeviceptr)addr, size);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuMemcpyDtoH(%#lx, %zu bytes): %s\n", (unsigned long)addr, size,
            gpu_errname(r));
    bad = SIZE_MAX;
  } else {
    for (size_t i = 0; i < size; i++) bad += buf[i] != want;
  }
  free(buf);
  return bad;
}

static void fill(uintptr_t addr, size_t size, unsigned char pattern) {
  GPU_CHECK(gpu.MemsetD8((CUdeviceptr)addr, pattern, size));
  GPU_CHECK(gpu.CtxSynchronize());
}

XT_TEST(test_devices) {
  XT_CHECK_EQ(be->device_count(be, &ndev), 0);
  XT_REQUIRE(ndev >= 1);
  XT_REQUIRE(be->device_info(be, 0, &info) == 0);
  gran = info.granularity;
  printf("device 0: %s, vmm %d, granularity %zu bytes, total %zu MiB, %d device%s\n", info.name,
         info.vmm, gran, info.total >> 20, ndev, ndev == 1 ? "" : "s");
  XT_CHECK_EQ(info.vmm, 1); /* every GPU the suite runs on (H100, H200) has VMM */
  XT_CHECK(gran > 0 && (gran & (gran - 1)) == 0);
  XT_CHECK(info.total > 0);
  XT_CHECK(info.name[0] != '\0');

  /* Cached after the first query: the same answer again. */
  xs_devinfo_t again;
  XT_CHECK_EQ(be->device_info(be, 0, &again), 0);
  XT_CHECK(memcmp(&again, &info, sizeof info) == 0);

  size_t fr = 0, to = 0;
  XT_CHECK_EQ(be->mem_info(be, 0, &fr, &to), 0);
  printf("mem_info: %zu MiB free of %zu MiB\n", fr >> 20, to >> 20);
  XT_CHECK(to > 0);
  XT_CHECK(fr > 0 && fr <= to);

  int can = -1;
  XT_CHECK_EQ(be->can_access_peer(be, 0, 0, &can), 0);
  XT_CHECK_EQ(can, 0);
  if (ndev > 1) {
    XT_CHECK_EQ(be->can_access_peer(be, 0, 1, &can), 0);
    printf("device 0 can access device 1: %d\n", can);
  }

  uint64_t t0 = be->now_ns(be), t1 = be->now_ns(be);
  XT_CHECK(t1 >= t0);
}

XT_TEST(test_mappings) {
  XT_REQUIRE(gran > 0);
  const size_t g = gran;
  const int self[1] = {0};
  uintptr_t base = 0;
  XT_REQUIRE(be->reserve(be, 0, 8 * g, 0, &base) == 0);
  XT_CHECK(base != 0);
  XT_CHECK_EQ(base % g, 0);

  /* Two handles of one granule and one of two, mapped with holes between:
   * h[0] at 0, h[1] at 2g, h[2] at 4g..6g. */
  xs_handle_t h[3] = {0, 0, 0};
  const size_t size[3] = {g, g, 2 * g};
  size_t off[3] = {0, 2 * g, 4 * g};
  const unsigned char pat[3] = {0x11, 0xa2, 0x3c};
  int created = 1;
  for (int i = 0; i < 3; i++) {
    int rc = be->create(be, 0, size[i], &h[i]);
    XT_CHECK_MSG(rc == 0, "create #%d of %zu bytes: %d (%s)", i, size[i], rc, be->error_string(be));
    if (rc != 0) created = 0;
  }
  if (!created) {
    for (int i = 0; i < 3; i++)
      if (h[i] != 0) be->release(be, 0, h[i]);
    be->unreserve(be, 0, base, 8 * g);
    return;
  }
  for (int i = 0; i < 3; i++) {
    int rc = be->map(be, 0, base + off[i], size[i], h[i]);
    XT_CHECK_MSG(rc == 0, "map #%d at +%zu: %d (%s)", i, off[i], rc, be->error_string(be));
    rc = be->set_access(be, 0, base + off[i], size[i], self, 1);
    XT_CHECK_MSG(rc == 0, "set_access #%d: %d (%s)", i, rc, be->error_string(be));
  }
  for (int i = 0; i < 3; i++) fill(base + off[i], size[i], pat[i]);
  for (int i = 0; i < 3; i++) XT_CHECK_EQ(mismatches(base + off[i], size[i], pat[i]), 0);

  /* Move h[1] from 2g to 6g: its memory keeps its content, the others are
   * untouched. */
  XT_CHECK_EQ(be->unmap(be, 0, base + off[1], size[1]), 0);
  off[1] = 6 * g;
  XT_CHECK_EQ(be->map(be, 0, base + off[1], size[1], h[1]), 0);
  XT_CHECK_EQ(be->set_access(be, 0, base + off[1], size[1], self, 1), 0);
  for (int i = 0; i < 3; i++) XT_CHECK_EQ(mismatches(base + off[i], size[i], pat[i]), 0);

  /* A handle released while mapped lives until it is unmapped. */
  XT_CHECK_EQ(be->release(be, 0, h[2]), 0);
  XT_CHECK_EQ(mismatches(base + off[2], size[2], pat[2]), 0);
  fill(base + off[2], size[2], 0x77);
  XT_CHECK_EQ(mismatches(base + off[2], size[2], 0x77), 0);

  for (int i = 0; i < 3; i++) XT_CHECK_EQ(be->unmap(be, 0, base + off[i], size[i]), 0);
  XT_CHECK_EQ(be->release(be, 0, h[0]), 0);
  XT_CHECK_EQ(be->release(be, 0, h[1]), 0);
  XT_CHECK_EQ(be->unreserve(be, 0, base, 8 * g), 0);

  /* An aligned reservation, returned at once. */
  uintptr_t a = 0;
  XT_CHECK_EQ(be->reserve(be, 0, 2 * g, 4 * g, &a), 0);
  XT_CHECK_EQ(a % (4 * g), 0);
  if (a != 0) XT_CHECK_EQ(be->unreserve(be, 0, a, 2 * g), 0);
}

XT_TEST(test_events) {
  xs_event_t ev = NULL;
  XT_REQUIRE(be->event_create(be, 0, &ev) == 0);
  XT_CHECK(ev != NULL);
  XT_CHECK_EQ(be->event_query(be, 0, ev), 0); /* never recorded: complete */

  /* The legacy NULL stream. */
  XT_CHECK_EQ(be->event_record(be, 0, ev, NULL), 0);
  int q = be->event_query(be, 0, ev);
  XT_CHECK_MSG(q == 0 || q == XSEG_ENOTREADY, "query after record: %d (%s)", q, be->error_string(be));
  XT_CHECK_EQ(be->event_sync(be, 0, ev), 0);
  XT_CHECK_EQ(be->event_query(be, 0, ev), 0);

  /* A stream of our own. */
  CUstream s = NULL;
  GPU_CHECK(gpu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (s != NULL) {
    XT_CHECK_EQ(be->event_record(be, 0, ev, (xseg_stream_t)s), 0);
    q = be->event_query(be, 0, ev);
    XT_CHECK_MSG(q == 0 || q == XSEG_ENOTREADY, "query on stream: %d (%s)", q, be->error_string(be));
    XT_CHECK_EQ(be->event_sync(be, 0, ev), 0);
    XT_CHECK_EQ(be->event_query(be, 0, ev), 0);
    GPU_CHECK(gpu.StreamDestroy(s));
  }
  XT_CHECK_EQ(be->event_destroy(be, 0, ev), 0);
}

XT_TEST(test_mem_alloc) {
  XT_REQUIRE(gran > 0);
  const size_t n = gran;
  uintptr_t p = 0;
  int rc = be->mem_alloc(be, 0, n, &p);
  XT_CHECK_MSG(rc == 0, "mem_alloc(%zu): %d (%s)", n, rc, be->error_string(be));
  if (rc != 0) return;
  XT_CHECK(p != 0);
  fill(p, n, 0x5a);
  XT_CHECK_EQ(mismatches(p, n, 0x5a), 0);

  /* And a host-to-device copy of a varied pattern, read back whole. */
  unsigned char *src = malloc(n), *dst = malloc(n);
  if (src != NULL && dst != NULL) {
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 131u + 7u);
    GPU_CHECK(gpu.MemcpyHtoD((CUdeviceptr)p, src, n));
    GPU_CHECK(gpu.MemcpyDtoH(dst, (CUdeviceptr)p, n));
    XT_CHECK(memcmp(src, dst, n) == 0);
  }
  free(src);
  free(dst);
  XT_CHECK_EQ(be->mem_free(be, 0, p, n), 0);
}

/* The backend pushes the primary context only for the call: a thread with
 * no current context still has none afterwards, and a thread with the
 * primary context current keeps it. */
XT_TEST(test_context_untouched) {
  CUcontext cur = (CUcontext)1;
  GPU_CHECK(gpu.CtxGetCurrent(&cur));
  XT_CHECK(cur == gpu.ctx);

  GPU_CHECK(gpu.CtxSetCurrent(NULL));
  size_t fr = 0, to = 0;
  XT_CHECK_EQ(be->mem_info(be, 0, &fr, &to), 0);
  XT_CHECK(to > 0);
  xs_event_t ev = NULL;
  XT_CHECK_EQ(be->event_create(be, 0, &ev), 0);
  if (ev != NULL) {
    XT_CHECK_EQ(be->event_record(be, 0, ev, NULL), 0);
    XT_CHECK_EQ(be->event_sync(be, 0, ev), 0);
    XT_CHECK_EQ(be->event_destroy(be, 0, ev), 0);
  }
  cur = (CUcontext)1;
  GPU_CHECK(gpu.CtxGetCurrent(&cur));
  XT_CHECK(cur == NULL);

  GPU_CHECK(gpu.CtxSetCurrent(gpu.ctx));
  XT_CHECK_EQ(be->mem_info(be, 0, &fr, &to), 0);
  cur = NULL;
  GPU_CHECK(gpu.CtxGetCurrent(&cur));
  XT_CHECK(cur == gpu.ctx);
}

XT_TEST(test_errors) {
  XT_REQUIRE(gran > 0 && info.total > 0);
  /* Far more than the device holds. */
  size_t huge = (info.total / gran + 1) * gran * 4;
  xs_handle_t h = 0;
  int rc = be->create(be, 0, huge, &h);
  const char *msg = be->error_string(be);
  printf("create of %zu MiB returned %d: %s\n", huge >> 20, rc, rc ? msg : "(success?)");
  XT_CHECK(rc != 0);
  if (rc == 0) {
    be->release(be, 0, h);
  } else {
    if (rc != XSEG_ENOMEM) printf("note: expected XSEG_ENOMEM (%d), got %d\n", XSEG_ENOMEM, rc);
    XT_CHECK(msg != NULL && msg[0] != '\0');
    XT_CHECK_MSG(msg != NULL && strstr(msg, "cuMemCreate") != NULL, "message: %s", msg);
  }

  /* Devices out of range, for the device and for an accessor. */
  xs_devinfo_t di;
  XT_CHECK_EQ(be->device_info(be, ndev, &di), XSEG_ENODEV);
  XT_CHECK(be->error_string(be)[0] != '\0');
  XT_CHECK_EQ(be->device_info(be, -1, &di), XSEG_ENODEV);
  uintptr_t a = 0;
  XT_CHECK_EQ(be->reserve(be, ndev, gran, 0, &a), XSEG_ENODEV);
  XT_CHECK_EQ(be->event_query(be, ndev, NULL), XSEG_ENODEV);
  const int bad[2] = {0, ndev};
  XT_CHECK_EQ(be->set_access(be, 0, 0, gran, bad, 2), XSEG_ENODEV);
  printf("out of range: %s\n", be->error_string(be));
}

int main(void) {
  int rc = gpu_open(0);
  if (rc == XT_SKIP) {
    printf("skip: test_cuda_backend needs an NVIDIA GPU and driver\n");
    return XT_SKIP;
  }
  if (rc != 0) return 1;
  if ((rc = xs_cuda_backend_create(&be)) != 0) {
    fprintf(stderr, "xs_cuda_backend_create: %d\n", rc);
    return 1;
  }
  XT_RUN(test_devices);
  XT_RUN(test_mappings);
  XT_RUN(test_events);
  XT_RUN(test_mem_alloc);
  XT_RUN(test_context_untouched);
  XT_RUN(test_errors);
  be->destroy(be);
  printf("cuda backend on %s: granularity %zu bytes, %zu MiB, %d checks, %d failed\n", info.name, gran,
         info.total >> 20, xt_checks, xt_failures);
  return XT_DONE();
}
