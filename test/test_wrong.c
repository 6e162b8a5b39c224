/* test_wrong.c: misuse must be caught (as mimalloc's test-wrong.c).
 *
 * Every case runs in both modes on the host backend.  A misused call must
 * return a defined error with a message, and leave the allocator usable
 * and unchanged: live blocks keep their data, the statistics do not move
 * where nothing should have happened, the heap checker passes, and a
 * normal allocation still works.  Around each case a few "bystander"
 * blocks of both pools stay live, so that a misuse that scribbles on
 * allocator state or hands memory out twice shows up in their patterns.
 * Each case runs in a child process, so a crash fails that case only.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define CAP_MB 64
#define CAP ((size_t)CAP_MB * MiB)

static int g_mode; /* index into t_modes */

/* ---- statistics that must not move ---------------------------------------- */

static const char *const snap_keys[] = {
    "allocation.all.current",      "allocated_bytes.all.current", "requested_bytes.all.current",
    "active_bytes.all.current",    "reserved_bytes.all.current",  "segment.all.current",
    "held_bytes.current",          "mapped_bytes.current",        "pending_frees.current",
    "inactive_split_bytes.all.current"};
#define NSNAP (sizeof snap_keys / sizeof *snap_keys)

typedef struct snap_s {
  long long v[NSNAP];
} snap_t;

static snap_t snap(void) {
  static char buf[1 << 16];
  snap_t s;
  size_t n = xseg_stats_json(0, buf, sizeof buf);
  for (size_t i = 0; i < NSNAP; i++) s.v[i] = n > 0 && n < sizeof buf ? t_json_num(buf, snap_keys[i]) : LLONG_MIN;
  return s;
}

#define CHECK_SNAP_EQ(a, b)                                                                 \
  do {                                                                                      \
    for (size_t k_ = 0; k_ < NSNAP; k_++)                                                   \
      XT_CHECK_MSG((a).v[k_] == (b).v[k_], "[%s] %s changed: %lld -> %lld", t_modes[g_mode], \
                   snap_keys[k_], (a).v[k_], (b).v[k_]);                                    \
  } while (0)

/* An error was reported: the code and a non-empty message. */
#define CHECK_ERR(rc, code)                                                                  \
  do {                                                                                       \
    XT_CHECK_MSG((rc) == (code), "[%s] got code %d, want %d (%s)", t_modes[g_mode], (int)(rc), \
                 (int)(code), xseg_last_error());                                            \
    XT_CHECK_MSG(xseg_last_error()[0] != '\0', "[%s] no message for code %d", t_modes[g_mode], \
                 (int)(code));                                                               \
  } while (0)

#define CHECK_MSG_HAS(needle)                                                                \
  XT_CHECK_MSG(strstr(xseg_last_error(), (needle)) != NULL, "[%s] message lacks \"%s\": %s", \
               t_modes[g_mode], (needle), xseg_last_error())

/* ---- bystanders ------------------------------------------------------------- */

typedef struct blk_s {
  void *p;
  size_t n;
  uint64_t tag;
} blk_t;

#define NBY 5
static blk_t by[NBY];
static int nby;
static uint64_t next_tag = 1;

static void by_alloc(void) {
  static const size_t sizes[NBY] = {1000, 300 * KiB, 1 * MiB, 3 * MiB + 512, 9 * MiB};
  nby = 0;
  for (int i = 0; i < NBY; i++) {
    void *p = xseg_malloc(sizes[i], 0, NULL);
    XT_CHECK_MSG(p != NULL, "[%s] bystander of %zu bytes: %s", t_modes[g_mode], sizes[i], xseg_last_error());
    if (!p) continue;
    by[nby] = (blk_t){p, sizes[i], next_tag++};
    t_fill(p, sizes[i], by[nby].tag);
    nby++;
  }
}

static void by_verify(const char *when) {
  for (int i = 0; i < nby; i++)
    XT_CHECK_MSG(t_verify(by[i].p, by[i].n, by[i].tag), "[%s] %s: bystander %p (%zu bytes) lost its pattern",
                 t_modes[g_mode], when, by[i].p, by[i].n);
}

static void by_free(void) {
  for (int i = 0; i < nby; i++) XT_CHECK_EQ(xseg_free(by[i].p), 0);
  nby = 0;
}

/* Is [p, p+n) clear of every bystander? */
static int by_disjoint(const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p, b = a + (n ? n : 1);
  for (int i = 0; i < nby; i++) {
    uintptr_t x = (uintptr_t)by[i].p, y = x + by[i].n;
    if (a < y && x < b) return 0;
  }
  return 1;
}

/* ---- helpers ---------------------------------------------------------------- */

/* The segments of device 0, from the public snapshot. */
static int segments(uintptr_t *base, size_t *size, int max) {
  static char buf[1 << 20];
  size_t len = xseg_snapshot_json(0, buf, sizeof buf);
  if (len == 0 || len >= sizeof buf) return 0;
  int n = 0;
  for (const char *p = strstr(buf, "{\"address\":"); p && n < max; p = strstr(p + 1, "{\"address\":")) {
    uintmax_t a, st;
    size_t sz;
    char c;
    /* Segments carry a stream and a pool; pages and blocks do not follow
     * their size with a stream. */
    if (sscanf(p, "{\"address\":%ju,\"size\":%zu,\"stream\":%ju,\"pool\":%c", &a, &sz, &st, &c) == 4) {
      base[n] = (uintptr_t)a;
      size[n] = sz;
      n++;
    }
  }
  return n;
}

/* Run fn with stderr going to a temporary file; return what it printed. */
static const char *capture_stderr(void (*fn)(void *), void *arg) {
  static char out[4096];
  out[0] = '\0';
  fflush(stderr);
  FILE *tmp = tmpfile();
  if (!tmp) return out;
  int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  fn(arg);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(tmp);
  size_t n = fread(out, 1, sizeof out - 1, tmp);
  out[n] = '\0';
  fclose(tmp);
  return out;
}

static void conf_for(char *buf, size_t len, const char *extra) {
  snprintf(buf, len, "backend:host,%s,host_capacity_mb:%d%s%s", t_modes[g_mode], CAP_MB, extra ? "," : "",
           extra ? extra : "");
}

/* ---- the cases ----------------------------------------------------------------- */

/* Pointers xseg never returned. */
static void case_foreign_free(void) {
  int on_stack = 0;
  char *heap = malloc(64);
  snap_t s0 = snap();
  void *bad[16];
  int nbad = 0;
  bad[nbad++] = &on_stack;
  bad[nbad++] = heap;
  bad[nbad++] = (void *)(uintptr_t)512;
  bad[nbad++] = (void *)(uintptr_t)-512;
  uintptr_t base[16];
  size_t size[16];
  int ns = segments(base, size, 16);
  XT_CHECK(ns > 0);
  for (int i = 0; i < ns && nbad + 4 <= 16; i++) {
    bad[nbad++] = (void *)(base[i] - 1);
    bad[nbad++] = (void *)(base[i] - 512);
    bad[nbad++] = (void *)(base[i] + size[i]);
    bad[nbad++] = (void *)(base[i] + size[i] + 512);
  }
  for (int i = 0; i < nbad; i++) {
    int live = 0;
    for (int k = 0; k < nby; k++) live |= bad[i] == by[k].p; /* an adjacent segment's block: skip */
    if (live) continue;
    xs_error_clear();
    CHECK_ERR(xseg_free(bad[i]), XSEG_EINVAL);
    CHECK_MSG_HAS("xseg_free");
  }
  /* Inside a segment, but where no block starts: the free space after the
   * last bystander of the small pool and the last of the large pool. */
  for (int k = 0; k < nby; k++) {
    char *p = (char *)by[k].p + (by[k].n + 511) / 512 * 512 + 64 * KiB;
    if (!by_disjoint(p, 1)) continue;
    int live = 0;
    for (int j = 0; j < nby; j++) live |= (void *)p == by[j].p;
    if (live) continue;
    CHECK_ERR(xseg_free(p), XSEG_EINVAL);
  }
  /* NULL is a no-op. */
  XT_CHECK_EQ(xseg_free(NULL), 0);
  snap_t s1 = snap();
  CHECK_SNAP_EQ(s0, s1);
  free(heap);
}

/* Interior pointers of live blocks. */
static void case_interior_free(void) {
  void *q = xseg_malloc(5000, 0, NULL);
  XT_REQUIRE(q);
  t_fill(q, 5000, 4242);
  snap_t s0 = snap();
  for (int i = 0; i <= nby; i++) {
    char *p = i < nby ? by[i].p : q;
    size_t n = i < nby ? by[i].n : 5000;
    size_t offs[3] = {1, 512, n - 1};
    for (int k = 0; k < 3; k++) {
      xs_error_clear();
      CHECK_ERR(xseg_free(p + offs[k]), XSEG_EINVAL);
      CHECK_MSG_HAS("interior");
      xs_error_clear();
      CHECK_ERR(xseg_record_stream(p + offs[k], (xseg_stream_t)0x77), XSEG_EINVAL);
    }
  }
  snap_t s1 = snap();
  CHECK_SNAP_EQ(s0, s1);
  XT_CHECK(t_verify(q, 5000, 4242));
  XT_CHECK_EQ(xseg_free(q), 0); /* the block itself is still freeable */
}

static int is_double_free_msg(void) {
  const char *m = xseg_last_error();
  return strstr(m, "freed") || strstr(m, "not allocated") || strstr(m, "double free");
}

/* Allocate n blocks of `size` and check every live block is distinct. */
static void realloc_distinct(size_t size, blk_t *extra, int nextra) {
  blk_t v[8];
  int n = 0;
  for (int i = 0; i < 8; i++) {
    void *p = xseg_malloc(size, 0, NULL);
    if (!p) {
      XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENOMEM);
      break;
    }
    XT_CHECK_MSG(by_disjoint(p, size), "[%s] %p (+%zu) overlaps a live bystander", t_modes[g_mode], p, size);
    for (int k = 0; k < n; k++)
      XT_CHECK_MSG((uintptr_t)p + size <= (uintptr_t)v[k].p || (uintptr_t)v[k].p + size <= (uintptr_t)p,
                   "[%s] %p handed out twice (with %p)", t_modes[g_mode], p, v[k].p);
    for (int k = 0; k < nextra; k++)
      XT_CHECK_MSG((uintptr_t)p + size <= (uintptr_t)extra[k].p ||
                       (uintptr_t)extra[k].p + extra[k].n <= (uintptr_t)p,
                   "[%s] %p overlaps live block %p", t_modes[g_mode], p, extra[k].p);
    v[n] = (blk_t){p, size, next_tag++};
    t_fill(p, size, v[n].tag);
    n++;
  }
  for (int k = 0; k < n; k++) XT_CHECK(t_verify(v[k].p, size, v[k].tag));
  for (int k = 0; k < nextra; k++) XT_CHECK(t_verify(extra[k].p, extra[k].n, extra[k].tag));
  for (int k = 0; k < n; k++) XT_CHECK_EQ(xseg_free(v[k].p), 0);
}

static void double_free_of(size_t size) {
  void *a = xseg_malloc(size, 0, NULL);
  XT_REQUIRE(a);
  XT_CHECK_EQ(xseg_free(a), 0);
  snap_t s0 = snap();
  for (int k = 0; k < 2; k++) { /* double and triple */
    xs_error_clear();
    CHECK_ERR(xseg_free(a), XSEG_EINVAL);
    XT_CHECK_MSG(is_double_free_msg(), "[%s] double free of %zu bytes: %s", t_modes[g_mode], size,
                 xseg_last_error());
  }
  snap_t s1 = snap();
  CHECK_SNAP_EQ(s0, s1);
  T_CHECK_HEAP();
  realloc_distinct(size, NULL, 0);
}

static void case_double_free(void) {
  double_free_of(1000);
  double_free_of(200 * KiB);
  double_free_of(2 * MiB);
  double_free_of(7 * MiB + 3);
  /* Between neighbours, so that the freed block merged with free space on
   * both sides; the neighbours stay live and keep their data. */
  blk_t nb[3];
  for (int i = 0; i < 3; i++) {
    nb[i].n = 4096;
    nb[i].p = xseg_malloc(nb[i].n, 0, NULL);
    XT_REQUIRE(nb[i].p);
    nb[i].tag = next_tag++;
    t_fill(nb[i].p, nb[i].n, nb[i].tag);
  }
  XT_CHECK_EQ(xseg_free(nb[1].p), 0);
  XT_CHECK_EQ(xseg_free(nb[0].p), 0);
  snap_t s0 = snap();
  CHECK_ERR(xseg_free(nb[1].p), XSEG_EINVAL);
  XT_CHECK(is_double_free_msg());
  CHECK_ERR(xseg_free(nb[0].p), XSEG_EINVAL);
  XT_CHECK(is_double_free_msg());
  CHECK_SNAP_EQ(s0, snap());
  realloc_distinct(4096, &nb[2], 1);
  XT_CHECK_EQ(xseg_free(nb[2].p), 0);
  /* After empty_cache the freed memory may be unmapped (expandable) or gone
   * (binned): still an error, never a crash. */
  void *c = xseg_malloc(6 * MiB, 0, NULL);
  XT_REQUIRE(c);
  XT_CHECK_EQ(xseg_free(c), 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  s0 = snap();
  CHECK_ERR(xseg_free(c), XSEG_EINVAL);
  CHECK_SNAP_EQ(s0, snap());
  realloc_distinct(6 * MiB, NULL, 0);
}

/* A block freed while another stream still uses it is pending: freeing it
 * again is an error, and its memory comes back exactly once. */
static void case_double_free_pending(void) {
  xs_backend_t *be = t_backend();
  xseg_stream_t s1 = (xseg_stream_t)0x10, s2 = (xseg_stream_t)0x20;
  xs_host_stream_hold(be, s2);
  void *a = xseg_malloc(64 * KiB, 0, s1);
  XT_REQUIRE(a);
  XT_CHECK_EQ(xseg_record_stream(a, s2), 0);
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 1);
  snap_t s0 = snap();
  CHECK_ERR(xseg_free(a), XSEG_EINVAL);
  XT_CHECK(is_double_free_msg());
  CHECK_ERR(xseg_record_stream(a, s2), XSEG_EINVAL);
  CHECK_SNAP_EQ(s0, snap());
  /* Not reused while s2 runs. */
  void *b = xseg_malloc(64 * KiB, 0, s1);
  XT_CHECK(b != NULL && b != a);
  xs_host_stream_release(be, s2);
  void *c = xseg_malloc(64 * KiB, 0, s1);
  XT_CHECK(c == a); /* back, once */
  void *d = xseg_malloc(64 * KiB, 0, s1);
  XT_CHECK(d != NULL && d != a && d != b);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 0);
  XT_CHECK_EQ(xseg_free(b), 0);
  XT_CHECK_EQ(xseg_free(c), 0);
  XT_CHECK_EQ(xseg_free(d), 0);
}

static void case_record_stream_misuse(void) {
  xs_backend_t *be = t_backend();
  xseg_stream_t s2 = (xseg_stream_t)0x20;
  int on_stack = 0;
  char *heap = malloc(64);
  void *a = xseg_malloc(128 * KiB, 0, NULL);
  XT_REQUIRE(a);
  XT_CHECK_EQ(xseg_free(a), 0);
  xs_host_stream_hold(be, s2);
  snap_t s0 = snap();
  CHECK_ERR(xseg_record_stream(a, s2), XSEG_EINVAL); /* freed */
  XT_CHECK(is_double_free_msg());
  CHECK_MSG_HAS("xseg_record_stream");
  CHECK_ERR(xseg_record_stream(&on_stack, s2), XSEG_EINVAL);
  CHECK_ERR(xseg_record_stream(heap, s2), XSEG_EINVAL);
  CHECK_ERR(xseg_record_stream(NULL, s2), XSEG_EINVAL);
  CHECK_SNAP_EQ(s0, snap());
  /* The refused record attached nothing: the block, allocated again at the
   * same place, frees at once although s2 is held. */
  void *b = xseg_malloc(128 * KiB, 0, NULL);
  XT_REQUIRE(b);
  XT_CHECK_EQ(xseg_free(b), 0);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 0);
  xs_host_stream_release(be, s2);
  free(heap);
}

static void case_size_zero(void) {
  void *a = xseg_malloc(0, 0, NULL), *b = xseg_malloc(0, 0, NULL);
  XT_REQUIRE(a && b);
  XT_CHECK(a != b);
  XT_CHECK_EQ((uintptr_t)a % 512, 0);
  XT_CHECK(by_disjoint(a, 1) && by_disjoint(b, 1));
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(xseg_free(b), 0);
  CHECK_ERR(xseg_free(a), XSEG_EINVAL); /* a real block: a double free is caught */
}

/* Requests that cannot fit must fail cleanly, never wrap to a tiny block. */
static void case_huge_sizes(void) {
  /* 2^63 last: it reaches the undefined negation (a fixed bug, below), which the
   * sanitizer build turns into an abort. */
  const size_t sizes[] = {SIZE_MAX,     SIZE_MAX - 1,    SIZE_MAX - 511, SIZE_MAX - 512, SIZE_MAX / 2,
                          (size_t)1 << 62, CAP + MiB,    CAP + 1,        2 * CAP,        SIZE_MAX / 2 + 1};
  xs_host_counters_t c0 = t_counters();
  snap_t s0 = snap();
  char neg_msg[256] = "";
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    xs_error_clear();
    void *p = xseg_malloc(sizes[i], 0, NULL);
    XT_CHECK_MSG(p == NULL, "[%s] malloc(%zu) returned %p", t_modes[g_mode], sizes[i], p);
    if (p) xseg_free(p);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENOMEM);
    /* Regression test (fixed bug): pool/stats.c:xs_stats_oom_message formats the request with
     * fmt_bytes((int64_t)size): sizes above INT64_MAX print as negative
     * ("cannot allocate -1 B" for SIZE_MAX), and 2^63 makes fmt_bytes
     * negate INT64_MIN (stats.c:105, undefined behaviour: the sanitizer
     * build aborts; others print "--9223372036854775808 B"). */
    if (strstr(xseg_last_error(), "allocate -") != NULL && !neg_msg[0])
      snprintf(neg_msg, sizeof neg_msg, "malloc(%zu): %.100s", sizes[i], xseg_last_error());
  }
  XT_CHECK_MSG(neg_msg[0] == '\0', "[%s] a negative size in the message: %s", t_modes[g_mode], neg_msg);
  xs_error_clear();
  XT_CHECK(xseg_torch_alloc(SSIZE_MAX, 0, NULL) == NULL);
  CHECK_ERR(xseg_last_error_code(), XSEG_ENOMEM);
  CHECK_SNAP_EQ(s0, snap());
  xs_host_counters_t c1 = t_counters();
  XT_CHECK_EQ(c1.handles_live, c0.handles_live);
  XT_CHECK_EQ(c1.reservations_live, c0.reservations_live);
  XT_CHECK_EQ(c1.mem_allocs_live, c0.mem_allocs_live);
}

/* With the device empty, one request of exactly its size fits (the
 * physical limit); a byte more does not; nothing fits beside it. */
static void case_whole_device(void) {
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  void *p = xseg_malloc(CAP, 0, NULL);
  if (g_mode == 0) {
    XT_CHECK_MSG(p != NULL, "[%s] malloc of the whole device failed: %s", t_modes[g_mode], xseg_last_error());
  } else if (!p) {
    CHECK_ERR(xseg_last_error_code(), XSEG_ENOMEM);
  }
  if (p) {
    for (size_t off = 0; off < CAP; off += 64 * KiB) ((volatile char *)p)[off] = (char)off;
    ((volatile char *)p)[CAP - 1] = 1;
    XT_CHECK(xseg_malloc(1, 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENOMEM);
    XT_CHECK(xseg_malloc(2 * MiB, 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENOMEM);
    XT_CHECK_EQ(xseg_free(p), 0);
  }
  XT_CHECK(xseg_malloc(CAP + 1, 0, NULL) == NULL);
  CHECK_ERR(xseg_last_error_code(), XSEG_ENOMEM);
  XT_CHECK_EQ(t_stat(0, "allocation.all.current"), 0);
}

static void torch_free_stack(void *arg) {
  int x = 0;
  (void)arg;
  xseg_torch_free(&x, 4, 0, NULL);
}
static void torch_free_ptr(void *arg) { xseg_torch_free(arg, 1, 0, NULL); }

static void case_torch_misuse(void) {
  const ssize_t neg[] = {-1, -512, -(ssize_t)MiB, -SSIZE_MAX - 1};
  snap_t s0 = snap();
  for (size_t i = 0; i < sizeof neg / sizeof *neg; i++) {
    xs_error_clear();
    XT_CHECK(xseg_torch_alloc(neg[i], 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_EINVAL);
    CHECK_MSG_HAS("negative");
  }
  XT_CHECK(xseg_torch_alloc(0, 0, NULL) == NULL); /* no block for 0: PyTorch never frees it */
  XT_CHECK(xseg_torch_alloc(16, 7, NULL) == NULL);
  CHECK_ERR(xseg_last_error_code(), XSEG_ENODEV);
  const char *out = capture_stderr(torch_free_stack, NULL);
  XT_CHECK_MSG(strstr(out, "xseg_free") != NULL, "[%s] torch_free of a stack pointer printed: '%s'",
               t_modes[g_mode], out);
  char *heap = malloc(32);
  out = capture_stderr(torch_free_ptr, heap);
  XT_CHECK(out[0] != '\0');
  free(heap);
  out = capture_stderr(torch_free_ptr, (char *)by[0].p + 1); /* interior */
  XT_CHECK(strstr(out, "interior") != NULL);
  out = capture_stderr(torch_free_ptr, NULL); /* nothing to say */
  XT_CHECK_EQ(out[0], '\0');
  CHECK_SNAP_EQ(s0, snap());
  /* A real block through the torch entries, then its double free. */
  void *t = xseg_torch_alloc(4096, 0, NULL);
  XT_REQUIRE(t);
  out = capture_stderr(torch_free_ptr, t);
  XT_CHECK_EQ(out[0], '\0');
  s0 = snap();
  out = capture_stderr(torch_free_ptr, t);
  XT_CHECK(out[0] != '\0');
  CHECK_SNAP_EQ(s0, snap());
}

static void print_summary_to(void *arg) { xseg_print_summary(*(int *)arg, stderr); }

static void case_bad_device(void) {
  const int devs[] = {-1, 1, 2, 64, INT_MAX, INT_MIN, -2};
  char buf[256];
  snap_t s0 = snap();
  for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) {
    int d = devs[i];
    xs_error_clear();
    XT_CHECK(xseg_malloc(4096, d, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENODEV);
    XT_CHECK(xseg_malloc(0, d, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENODEV);
    XT_CHECK(xseg_torch_alloc(4096, d, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENODEV);
    memset(buf, 'x', sizeof buf);
    XT_CHECK_EQ(xseg_stats_json(d, buf, sizeof buf), 0);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENODEV);
    XT_CHECK_EQ(xseg_stats_json(d, NULL, 0), 0);
    XT_CHECK_EQ(xseg_snapshot_json(d, buf, sizeof buf), 0);
    CHECK_ERR(xseg_last_error_code(), XSEG_ENODEV);
    XT_CHECK_EQ(xseg_snapshot_json(d, NULL, 0), 0);
    const char *out = capture_stderr(print_summary_to, &d);
    XT_CHECK_MSG(strstr(out, "out of range") != NULL, "[%s] print_summary(%d) printed '%s'", t_modes[g_mode], d,
                 out);
    if (d == -1) {
      /* -1 means every device for these three. */
      XT_CHECK_EQ(xseg_empty_cache(d), 0);
      XT_CHECK_EQ(xseg_reset_peak_stats(d), 0);
      XT_CHECK_EQ(xseg_check_heap(d), 0);
    } else {
      CHECK_ERR(xseg_empty_cache(d), XSEG_ENODEV);
      CHECK_ERR(xseg_reset_peak_stats(d), XSEG_ENODEV);
      CHECK_ERR(xseg_check_heap(d), XSEG_ENODEV);
      XT_CHECK(xseg_enable_peer_access(d, 0) != 0);
      XT_CHECK(xseg_enable_peer_access(0, d) != 0);
    }
  }
  XT_CHECK(xseg_enable_peer_access(0, 0) != 0); /* itself */
  XT_CHECK(xseg_last_error()[0] != '\0');
  CHECK_SNAP_EQ(s0, snap());
}

static void case_init_while_busy(void) {
  snap_t s0 = snap();
  char conf[256];
  conf_for(conf, sizeof conf, NULL);
  CHECK_ERR(xseg_init(conf), XSEG_EBUSY);
  CHECK_ERR(xseg_shutdown(), XSEG_EBUSY);
  CHECK_ERR(xseg_init(NULL), XSEG_EBUSY);
  /* A bad string while busy: refused, and the allocator keeps running. */
  int rc = xseg_init("backend:host,no_such_key:1");
  XT_CHECK_MSG(rc == XSEG_EBUSY || rc == XSEG_ECONFIG, "[%s] xseg_init(bad) while busy: %d", t_modes[g_mode], rc);
  XT_CHECK(xseg_last_error()[0] != '\0');
  CHECK_SNAP_EQ(s0, snap());
  by_verify("after xseg_init/xseg_shutdown refused");
  void *p = xseg_malloc(100, 0, NULL);
  XT_CHECK_MSG(p != NULL, "[%s] allocation after a refused init: %s", t_modes[g_mode], xseg_last_error());
  XT_CHECK_EQ(xseg_free(p), 0);
}

/* Only a pending block (freed, waiting for another stream): still busy. */
static void case_shutdown_while_pending(void) {
  xs_backend_t *be = t_backend();
  xseg_stream_t s2 = (xseg_stream_t)0x20;
  xs_host_stream_hold(be, s2);
  void *a = xseg_malloc(3 * MiB, 0, NULL);
  XT_REQUIRE(a);
  t_fill(a, 3 * MiB, 77);
  XT_CHECK_EQ(xseg_record_stream(a, s2), 0);
  XT_CHECK_EQ(xseg_free(a), 0);
  xs_host_counters_t c0 = t_counters();
  CHECK_ERR(xseg_shutdown(), XSEG_EBUSY);
  char conf[256];
  conf_for(conf, sizeof conf, NULL);
  CHECK_ERR(xseg_init(conf), XSEG_EBUSY);
  xs_host_counters_t c1 = t_counters();
  XT_CHECK_EQ(c1.mapped_bytes, c0.mapped_bytes); /* nothing released under s2's feet */
  XT_CHECK(t_verify(a, 3 * MiB, 77));
  /* Once s2 is done, nothing is allocated any more. */
  xs_host_stream_release(be, s2);
  /* Regression test (fixed bug): pool/api.c:busy() counts d->npending without polling the events
   * first (xs_process_events), so a block whose streams have all finished
   * keeps the library "busy" until some later malloc or empty_cache looks
   * at the events: xseg_shutdown and xseg_init return XSEG_EBUSY with
   * "0 live and 1 pending allocation(s)". */
  XT_CHECK_MSG(xseg_shutdown() == 0, "[%s] shutdown after the pending block's stream completed: %s",
               t_modes[g_mode], xseg_last_error());
  /* Leave the library initialised for the checks after the case. */
  if (xs_current_backend() == NULL) XT_CHECK(t_init(conf + strlen("backend:host,")) == 0);
}

static const char *const bad_confs[][2] = {
    /* value, the key the message must name */
    {"no_such_key:1", "no_such_key"},
    {"expandable_segments:maybe", "expandable_segments"},
    {"release_threshold_mb:-5", "release_threshold_mb"},
    {"host_capacity_mb:0", "host_capacity_mb"},
    {"garbage_collection_threshold:2", "garbage_collection_threshold"},
    {"max_split_size_mb", "max_split_size_mb"},
};

/* Calls before and after a failed initialisation. */
static void case_failed_init(void) {
  char good[256], bad[256];
  conf_for(good, sizeof good, NULL);
  int stack = 0;
  for (size_t i = 0; i < sizeof bad_confs / sizeof *bad_confs; i++) {
    const char *key = bad_confs[i][1];
    XT_REQUIRE(xseg_shutdown() == 0);
    snprintf(bad, sizeof bad, "backend:host,%s,%s", t_modes[g_mode], bad_confs[i][0]);
    setenv("XSEG_ALLOC_CONF", bad, 1);
    /* First use reads the environment: it must refuse, naming the key. */
    xs_error_clear();
    XT_CHECK(xseg_malloc(100, 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ECONFIG);
    CHECK_MSG_HAS(key);
    /* ...and keep refusing, whatever the call. */
    XT_CHECK(xseg_malloc(0, 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ECONFIG);
    CHECK_MSG_HAS(key);
    XT_CHECK(xseg_torch_alloc(100, 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ECONFIG);
    XT_CHECK_EQ(xseg_free(NULL), 0);
    XT_CHECK(xseg_free(&stack) != 0);
    XT_CHECK(xseg_record_stream(&stack, NULL) != 0);
    CHECK_ERR(xseg_empty_cache(0), XSEG_ECONFIG);
    CHECK_ERR(xseg_empty_cache(-1), XSEG_ECONFIG);
    CHECK_ERR(xseg_reset_peak_stats(0), XSEG_ECONFIG);
    XT_CHECK_EQ(xseg_stats_json(0, NULL, 0), 0);
    XT_CHECK_EQ(xseg_snapshot_json(0, NULL, 0), 0);
    XT_CHECK(xseg_device_count() < 0);
    XT_CHECK(t_backend() == NULL);
    /* xseg_init(NULL) reads the same bad environment. */
    CHECK_ERR(xseg_init(NULL), XSEG_ECONFIG);
    CHECK_MSG_HAS(key);
    /* Shutting down a failed library is harmless; so is doing it twice. */
    XT_CHECK_EQ(xseg_shutdown(), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
    XT_CHECK(xseg_malloc(100, 0, NULL) == NULL); /* the environment is read again */
    CHECK_ERR(xseg_last_error_code(), XSEG_ECONFIG);
    /* A valid string repairs it; the environment plays no part. */
    XT_CHECK_EQ(xseg_init(good), 0);
    void *p = xseg_malloc(100, 0, NULL);
    XT_CHECK_MSG(p != NULL, "[%s] after init: %s", t_modes[g_mode], xseg_last_error());
    XT_CHECK_EQ(xseg_free(p), 0);
    /* A bad string given to a running, idle library: refused, then every
     * call refuses until a good one comes. */
    snprintf(bad, sizeof bad, "backend:host,%s", bad_confs[i][0]);
    CHECK_ERR(xseg_init(bad), XSEG_ECONFIG);
    CHECK_MSG_HAS(key);
    XT_CHECK(xseg_malloc(100, 0, NULL) == NULL);
    CHECK_ERR(xseg_last_error_code(), XSEG_ECONFIG);
    XT_CHECK_EQ(xseg_init(good), 0);
  }
  /* The environment, made valid, works through xseg_init(NULL). */
  setenv("XSEG_ALLOC_CONF", good, 1);
  XT_CHECK_EQ(xseg_init(NULL), 0);
  void *p = xseg_malloc(100, 0, NULL);
  XT_CHECK(p != NULL);
  XT_CHECK_EQ(xseg_free(p), 0);
  unsetenv("XSEG_ALLOC_CONF");
  XT_CHECK_EQ(xseg_init(good), 0);
}

/* ---- the driver ------------------------------------------------------------------ */

typedef struct case_s {
  const char *name;
  void (*fn)(void);
  int bystanders; /* 0: the case needs the allocator idle (init, whole device) */
  int unchanged;  /* 1: the statistics must be as before */
  const char *extra; /* more configuration, or NULL */
} case_t;

static const case_t cases[] = {
    {"foreign_free", case_foreign_free, 1, 1, NULL},
    {"interior_free", case_interior_free, 1, 1, NULL},
    {"double_free", case_double_free, 1, 0, NULL},
    {"double_free_pending", case_double_free_pending, 1, 0, NULL},
    {"record_stream_misuse", case_record_stream_misuse, 1, 0, NULL},
    {"size_zero", case_size_zero, 1, 0, NULL},
    {"huge_sizes", case_huge_sizes, 1, 1, NULL},
    {"huge_sizes_rounded", case_huge_sizes, 1, 1, "roundup_power2_divisions:8,max_split_size_mb:20"},
    {"huge_sizes_pages", case_huge_sizes, 1, 1, "page_size_mb:2,release_threshold_mb:0"},
    {"whole_device", case_whole_device, 0, 0, NULL},
    {"torch_misuse", case_torch_misuse, 1, 0, NULL},
    {"bad_device", case_bad_device, 1, 1, NULL},
    {"init_while_busy", case_init_while_busy, 1, 1, NULL},
    {"shutdown_while_pending", case_shutdown_while_pending, 0, 0, NULL},
    {"failed_init", case_failed_init, 0, 0, NULL},
};

static void run_case(const case_t *c) {
  char conf[256];
  snprintf(conf, sizeof conf, "%s,host_capacity_mb:%d%s%s", t_modes[g_mode], CAP_MB, c->extra ? "," : "",
           c->extra ? c->extra : "");
  int f0 = xt_failures;
  XT_REQUIRE(t_init(conf) == 0);
  nby = 0;
  if (c->bystanders) by_alloc();
  T_CHECK_HEAP();
  snap_t s0 = snap();
  c->fn();
  /* The allocator is usable and unchanged. */
  XT_REQUIRE(t_backend() != NULL);
  int rc = xseg_check_heap(-1);
  XT_CHECK_MSG(rc == 0, "[%s] %s: heap check: %s", t_modes[g_mode], c->name, xseg_last_error());
  by_verify(c->name);
  if (c->unchanged) CHECK_SNAP_EQ(s0, snap());
  void *p = xseg_malloc(1000, 0, NULL), *q = xseg_malloc(5 * MiB, 0, NULL);
  XT_CHECK_MSG(p && q, "[%s] %s: a normal allocation failed afterwards: %s", t_modes[g_mode], c->name,
               xseg_last_error());
  if (p && q) {
    XT_CHECK(by_disjoint(p, 1000) && by_disjoint(q, 5 * MiB));
    t_fill(p, 1000, 1);
    t_fill(q, 5 * MiB, 2);
    XT_CHECK(t_verify(p, 1000, 1) && t_verify(q, 5 * MiB, 2));
  }
  XT_CHECK_EQ(xseg_free(p), 0);
  XT_CHECK_EQ(xseg_free(q), 0);
  by_verify(c->name);
  by_free();
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  T_CHECK_HEAP();
  xs_host_counters_t cn = t_counters();
  XT_CHECK_EQ(cn.handles_live, 0);
  XT_CHECK_EQ(cn.mapped_bytes, 0);
  XT_CHECK_EQ(cn.mem_allocs_live, 0);
  XT_CHECK_EQ(t_stat(0, "allocation.all.current"), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
  if (xt_failures != f0) fprintf(stderr, "  ^ in case %s [%s]\n", c->name, t_modes[g_mode]);
}

/* Each case runs in a child (t_forked), so that a crash is reported as that
 * case's failure and the other cases still run. */
static void run_case_arg(void *c) { run_case(c); }

static void run_forked(const case_t *c) {
  char what[128];
  snprintf(what, sizeof what, "%s [%s]", c->name, t_modes[g_mode]);
  t_forked(run_case_arg, (void *)c, what);
}

static void run_all(int mode) {
  g_mode = mode;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int f0 = xt_failures;
    run_forked(&cases[i]);
    printf("  %-4s %s [%s]\n", f0 == xt_failures ? "ok" : "FAIL", cases[i].name, t_modes[mode]);
  }
}

XT_TEST(misuse_expandable) { run_all(0); }
XT_TEST(misuse_binned) { run_all(1); }

int main(void) {
  unsetenv("XSEG_ALLOC_CONF");
  XT_RUN(misuse_expandable);
  XT_RUN(misuse_binned);
  return XT_DONE();
}
