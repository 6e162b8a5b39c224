/* test_framework.c: the API a framework allocator builds on (include/xseg.h,
 * "For framework allocators"): statistics as a struct, accumulated resets,
 * cache info, base allocations, the segment walk, private pools and
 * captures.  Host backend. */
#include "testutil.h"

static xseg_device_stats_t stats_of(int dev) {
  xseg_device_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  int rc = xseg_device_stats(dev, &s);
  XT_CHECK_MSG(rc == 0, "xseg_device_stats: %s", xseg_last_error());
  return s;
}

/* The struct says what the JSON says, name for name. */
static void same_as_json(int dev) {
  xseg_device_stats_t s = stats_of(dev);
  static const char *const types[3] = {"all", "small_pool", "large_pool"};
  char path[128];
#define POOLED(f)                                                                                  \
  for (int t = 0; t < 3; t++) {                                                                    \
    snprintf(path, sizeof path, "%s.%s.current", #f, types[t]);                                    \
    XT_CHECK_MSG(s.f[t].current == t_stat(dev, path), "%s: %lld", path, (long long)s.f[t].current); \
    snprintf(path, sizeof path, "%s.%s.peak", #f, types[t]);                                       \
    XT_CHECK_MSG(s.f[t].peak == t_stat(dev, path), "%s", path);                                    \
    snprintf(path, sizeof path, "%s.%s.allocated", #f, types[t]);                                  \
    XT_CHECK_MSG(s.f[t].allocated == t_stat(dev, path), "%s", path);                               \
  }
  POOLED(allocation)
  POOLED(segment)
  POOLED(active)
  POOLED(inactive_split)
  POOLED(allocated_bytes)
  POOLED(reserved_bytes)
  POOLED(active_bytes)
  POOLED(inactive_split_bytes)
  POOLED(requested_bytes)
#undef POOLED
  XT_CHECK_EQ(s.num_ooms, (uint64_t)t_stat(dev, "num_ooms"));
  XT_CHECK_EQ(s.num_alloc_retries, (uint64_t)t_stat(dev, "num_alloc_retries"));
  XT_CHECK_EQ(s.num_device_alloc, (uint64_t)t_stat(dev, "num_device_alloc"));
  XT_CHECK_EQ(s.num_device_free, (uint64_t)t_stat(dev, "num_device_free"));
  XT_CHECK_EQ(s.held_bytes, t_stat(dev, "held_bytes.current"));
  XT_CHECK_EQ(s.oversize_allocations.current, t_stat(dev, "oversize_allocations.current"));
  XT_CHECK_EQ(s.num_sync_all_streams, 0);
}

XT_TEST(stats_struct_matches_the_json) {
  for (int mode = 0; mode < 2; mode++) {
    char conf[128];
    snprintf(conf, sizeof conf, "host_capacity_mb:256,%s", t_modes[mode]);
    XT_REQUIRE(t_init(conf) == 0);
    void *p[6];
    size_t sizes[6] = {1000, 300 * KiB, 3 * MiB, 5 * MiB + 7, 512, 70 * MiB};
    for (int i = 0; i < 6; i++) XT_REQUIRE((p[i] = xseg_malloc(sizes[i], 0, NULL)) != NULL);
    xseg_device_stats_t s = stats_of(0);
    XT_CHECK_EQ(s.allocation[XSEG_POOL_ALL].current, 6);
    XT_CHECK_EQ(s.allocation[XSEG_POOL_SMALL].current, 3);
    XT_CHECK_EQ(s.requested_bytes[XSEG_POOL_ALL].current, (int64_t)(1000 + 300 * KiB + 3 * MiB + 5 * MiB + 7 + 512 + 70 * MiB));
    /* binned: max_split_size:auto is 64 MiB, so the 70 MiB block is oversize */
    XT_CHECK_EQ(s.oversize_allocations.current, mode == 1 ? 1 : 0);
    XT_CHECK_EQ(s.max_split_size, mode == 1 ? (uint64_t)64 * MiB : UINT64_MAX);
    same_as_json(0);
    XT_CHECK_EQ(xseg_free(p[1]), 0);
    XT_CHECK_EQ(xseg_free(p[5]), 0);
    same_as_json(0);
    s = stats_of(0);
    XT_CHECK_EQ(s.oversize_allocations.current, 0);
    XT_CHECK_EQ(s.oversize_allocations.allocated, mode == 1 ? 1 : 0);
    for (int i = 0; i < 6; i++)
      if (i != 1 && i != 5) XT_CHECK_EQ(xseg_free(p[i]), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
  /* A caller built against a smaller struct is refused, not overrun. */
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  xseg_device_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = 8;
  XT_CHECK_EQ(xseg_device_stats(0, &s), XSEG_EINVAL);
  XT_CHECK(strstr(xseg_last_error(), "struct_size") != NULL);
  XT_CHECK_EQ(xseg_device_stats(0, NULL), XSEG_EINVAL);
  s.struct_size = sizeof s;
  XT_CHECK_EQ(xseg_device_stats(7, &s), XSEG_ENODEV);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* Where a sequence of requests lands, after `reset` (0: none). */
static void addresses(int reset, uintptr_t out[64]) {
  XT_REQUIRE(t_init("host_capacity_mb:512") == 0);
  void *p[64];
  t_rng = 42;
  for (int i = 0; i < 64; i++) {
    p[i] = xseg_malloc((size_t)(t_below(8 * MiB) + 1), 0, NULL);
    XT_REQUIRE(p[i] != NULL);
    if (reset && i == 20) XT_CHECK_EQ(xseg_reset_accumulated_stats(0), 0);
    if (i % 3 == 2) XT_CHECK_EQ(xseg_free(p[i - 1]), 0);
  }
  for (int i = 0; i < 64; i++) out[i] = (uintptr_t)p[i];
  for (int i = 0; i < 64; i++)
    if (i % 3 != 1) XT_CHECK_EQ(xseg_free(p[i]), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

XT_TEST(accumulated_reset_changes_counts_not_behaviour) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  void *a = xseg_malloc(3 * MiB, 0, NULL), *b = xseg_malloc(4096, 0, NULL);
  XT_REQUIRE(a && b);
  XT_CHECK_EQ(xseg_free(b), 0);
  XT_CHECK_EQ(xseg_reset_accumulated_stats(-1), 0);
  xseg_device_stats_t s = stats_of(0);
  XT_CHECK_EQ(s.allocated_bytes[XSEG_POOL_ALL].current, (int64_t)(3 * MiB));
  XT_CHECK_EQ(s.allocated_bytes[XSEG_POOL_ALL].allocated, 0);
  XT_CHECK_EQ(s.allocated_bytes[XSEG_POOL_ALL].freed, 0);
  XT_CHECK_EQ(s.allocated_bytes[XSEG_POOL_ALL].peak, (int64_t)(3 * MiB + 4096));
  XT_CHECK_EQ(s.num_device_alloc, 0);
  XT_CHECK_EQ(t_stat(0, "num_map"), 0);
  XT_CHECK_EQ(t_stat(0, "reserved_bytes.all.allocated"), 0);
  XT_CHECK_EQ(xseg_free(a), 0);
  XT_CHECK_EQ(stats_of(0).allocated_bytes[XSEG_POOL_ALL].freed, (int64_t)(3 * MiB));
  XT_CHECK_EQ(xseg_shutdown(), 0);
  /* Placement reads the allocator's own counts, not the user's. */
  uintptr_t x[64], y[64];
  addresses(0, x);
  addresses(1, y);
  int same = 1;
  for (int i = 0; i < 64; i++) same &= x[i] == y[i];
  XT_CHECK_MSG(same, "a reset of the accumulated statistics moved later allocations");
}

XT_TEST(cache_info_and_base_allocation) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  size_t largest = 0;
  XT_CHECK_EQ(xseg_cache_info(0, &largest), 0);
  XT_CHECK(largest > 0 && largest <= 64 * MiB); /* nothing cached: what could be mapped */
  char *p = xseg_malloc(5 * MiB, 0, NULL), *q = xseg_malloc(6 * MiB, 0, NULL);
  XT_REQUIRE(p && q);
  void *base = NULL;
  size_t size = 0;
  XT_CHECK_EQ(xseg_base_allocation(p + 12345, &base, &size), 0);
  XT_CHECK(base == p && size == 5 * MiB);
  XT_CHECK_EQ(xseg_base_allocation(q, &base, &size), 0);
  XT_CHECK(base == q && size == 6 * MiB);
  XT_CHECK_EQ(xseg_free(p), 0);
  XT_CHECK_EQ(xseg_base_allocation(p + 12345, &base, &size), XSEG_EINVAL); /* freed */
  XT_CHECK_EQ(xseg_base_allocation((void *)0x1000, &base, &size), XSEG_EINVAL);
  XT_CHECK_EQ(xseg_base_allocation(q, NULL, &size), XSEG_EINVAL);
  XT_CHECK_EQ(xseg_cache_info(0, &largest), 0);
  XT_CHECK(largest >= 5 * MiB); /* the freed block is cached */
  XT_CHECK_EQ(xseg_cache_info(0, NULL), XSEG_EINVAL);
  XT_CHECK_EQ(xseg_free(q), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* ---- the walk ------------------------------------------------------------------------- */

typedef struct walk_s {
  size_t segs, blocks, live, seg_bytes, live_bytes, requested;
  uintptr_t next;   /* where the next block of the current segment must start */
  uintptr_t end;    /* the current segment's end */
  int broken, stop_after;
} walk_t;

static int on_seg(void *arg, const xseg_segment_info_t *s) {
  walk_t *w = arg;
  if (w->next != w->end) w->broken = 1; /* the previous segment's blocks did not tile it */
  w->segs++;
  w->seg_bytes += s->size;
  w->next = s->address;
  w->end = s->address + s->size;
  return w->stop_after && w->segs == (size_t)w->stop_after ? 99 : 0;
}

static int on_block(void *arg, const xseg_block_info_t *b) {
  walk_t *w = arg;
  if (b->address != w->next || b->size == 0) w->broken = 1;
  w->next = b->address + b->size;
  w->blocks++;
  if (b->state == XSEG_BLOCK_LIVE) {
    w->live++;
    w->live_bytes += b->size;
    w->requested += b->requested;
  }
  return 0;
}

XT_TEST(walk_shows_mapped_runs_and_their_blocks) {
  for (int mode = 0; mode < 2; mode++) {
    char conf[128];
    snprintf(conf, sizeof conf, "host_capacity_mb:256,%s", t_modes[mode]);
    XT_REQUIRE(t_init(conf) == 0);
    void *p[40];
    t_rng = 7 + (uint64_t)mode;
    for (int i = 0; i < 40; i++) {
      size_t n = (size_t)t_below(i % 2 ? 4 * MiB : 200 * KiB) + 1;
      XT_REQUIRE((p[i] = xseg_malloc(n, 0, i % 3 ? NULL : (xseg_stream_t)0x10)) != NULL);
    }
    for (int i = 0; i < 40; i += 4) XT_CHECK_EQ(xseg_free(p[i]), 0);
    walk_t w = {0};
    xseg_walker_t wk = {on_seg, on_block};
    XT_CHECK_EQ(xseg_walk(0, &wk, &w), 0);
    XT_CHECK_MSG(!w.broken && w.next == w.end, "blocks do not tile their segments");
    XT_CHECK_EQ(w.live, 30);
    XT_CHECK_EQ((int64_t)w.seg_bytes, t_stat(0, "reserved_bytes.all.current"));
    XT_CHECK_EQ((int64_t)w.live_bytes, t_stat(0, "allocated_bytes.all.current"));
    XT_CHECK_EQ((int64_t)w.requested, t_stat(0, "requested_bytes.all.current"));
    /* A callback's non-zero return stops the walk and comes back. */
    walk_t w2 = {0};
    w2.stop_after = 1;
    XT_CHECK_EQ(xseg_walk(0, &wk, &w2), 99);
    XT_CHECK_EQ(w2.segs, 1);
    XT_CHECK_EQ(xseg_walk(0, NULL, &w2), XSEG_EINVAL);
    for (int i = 0; i < 40; i++)
      if (i % 4) XT_CHECK_EQ(xseg_free(p[i]), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

/* ---- private pools ------------------------------------------------------------------------- */

XT_TEST(private_pool_keeps_its_memory) {
  for (int mode = 0; mode < 2; mode++) {
    char conf[128];
    snprintf(conf, sizeof conf, "host_capacity_mb:64,%s", t_modes[mode]);
    XT_REQUIRE(t_init(conf) == 0);
    int pool = 0, other = 0;
    XT_CHECK_EQ(xseg_pool_create(0, &pool), 0);
    XT_CHECK_EQ(xseg_pool_create(0, &other), 0);
    XT_CHECK(pool > 0 && other > 0 && pool != other);
    /* A block freed in the pool is reused by the pool, never by the device's own pools. */
    void *a = xseg_malloc_in_pool(12 * MiB, 0, NULL, pool);
    XT_REQUIRE(a != NULL);
    t_fill(a, 12 * MiB, 1);
    size_t live = 0;
    XT_CHECK_EQ(xseg_pool_live(0, pool, &live), 0);
    XT_CHECK_EQ(live, 12 * MiB);
    XT_CHECK_EQ(xseg_free(a), 0);
    void *g = xseg_malloc(12 * MiB, 0, NULL);
    XT_REQUIRE(g != NULL);
    XT_CHECK(g != a);
    void *o = xseg_malloc_in_pool(12 * MiB, 0, NULL, other);
    XT_CHECK(o != NULL && o != a);
    void *a2 = xseg_malloc_in_pool(12 * MiB, 0, NULL, pool);
    XT_CHECK(a2 == a);
    XT_CHECK_EQ(xseg_free(a2), 0);
    /* While open, neither empty_cache nor memory pressure takes its pages:
     * the device's own pool cannot get those 12 MiB back (24 MiB live + 40 MiB asked = the
     * device; blocks over 10 MiB get binned segments of their own size). */
    XT_CHECK_EQ(xseg_empty_cache(0), 0);
    int64_t held = t_stat(0, "held_bytes.current");
    XT_CHECK(held >= (int64_t)(3 * 12 * MiB));
    void *big = xseg_malloc(40 * MiB, 0, NULL);
    XT_CHECK_MSG(big == NULL, "a 40 MiB allocation took a private pool's pages (mode %d)", mode);
    XT_CHECK_EQ(xseg_last_error_code(), XSEG_ENOMEM);
    T_CHECK_HEAP();
    /* Closed: it takes no allocations, and its memory is the device's again. */
    XT_CHECK_EQ(xseg_pool_release(0, pool), 0);
    XT_CHECK(xseg_malloc_in_pool(4096, 0, NULL, pool) == NULL);
    XT_CHECK_EQ(xseg_last_error_code(), XSEG_EINVAL);
    XT_CHECK(strstr(xseg_last_error(), "private pool") != NULL);
    XT_CHECK_EQ(xseg_pool_release(0, pool), XSEG_EINVAL);
    big = xseg_malloc(40 * MiB, 0, NULL);
    XT_CHECK_MSG(big != NULL, "the closed pool's memory was not reused: %s", xseg_last_error());
    T_CHECK_HEAP();
    XT_CHECK_EQ(xseg_free(big), 0);
    XT_CHECK_EQ(xseg_free(g), 0);
    XT_CHECK_EQ(xseg_free(o), 0);
    XT_CHECK_EQ(xseg_pool_release(0, other), 0);
    XT_CHECK_EQ(xseg_empty_cache(0), 0);
    XT_CHECK_EQ(t_stat(0, "held_bytes.current"), 0);
    XT_CHECK_EQ(xseg_shutdown(), 0);
  }
}

XT_TEST(capture_makes_no_event_calls) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  xs_backend_t *be = t_backend();
  xseg_stream_t s1 = (xseg_stream_t)0x100, s2 = (xseg_stream_t)0x200;
  xs_host_stream_hold(be, s2);
  void *p = xseg_malloc(3 * MiB, 0, s1);
  XT_REQUIRE(p != NULL);
  XT_CHECK_EQ(xseg_record_stream(p, s2), 0);
  XT_CHECK_EQ(xseg_capture_begin(0), 0);
  XT_CHECK_EQ(xseg_capture_begin(0), 0); /* nests */
  xs_host_counters_t c0 = t_counters();
  XT_CHECK_EQ(xseg_free(p), 0); /* would record an event on s2 */
  void *q = xseg_malloc(3 * MiB, 0, s1);
  XT_CHECK(q != NULL && q != p); /* still pending: not reused */
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  xs_host_counters_t c1 = t_counters();
  for (int k = XS_CALL_EVENT_CREATE; k <= XS_CALL_EVENT_SYNC; k++)
    XT_CHECK_MSG(c1.calls[k] == c0.calls[k], "%s called during a capture", xs_call_names[k]);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 1);
  XT_CHECK_EQ(xseg_capture_end(0), 0);
  XT_CHECK_EQ(xseg_capture_end(0), 0);
  XT_CHECK_EQ(xseg_capture_end(0), XSEG_EINVAL);
  /* After the capture the deferred event is recorded, and the block comes
   * back once s2 finishes. */
  XT_CHECK_EQ(xseg_free(q), 0);
  void *r = xseg_malloc(4096, 0, s1);
  XT_CHECK(t_counters().calls[XS_CALL_EVENT_RECORD] > c1.calls[XS_CALL_EVENT_RECORD]);
  xs_host_stream_release(be, s2);
  XT_CHECK_EQ(xseg_free(r), 0);
  XT_CHECK_EQ(xseg_empty_cache(0), 0);
  XT_CHECK_EQ(t_stat(0, "pending_frees.current"), 0);
  T_CHECK_HEAP();
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* The blocks of one pool, as the walk reports them (a checkpoint). */
typedef struct layout_s {
  int pool;
  size_t n;
  uintptr_t addr[64];
  size_t size[64];
  int live[64], in_pool;
} layout_t;

static int lay_seg(void *arg, const xseg_segment_info_t *s) {
  layout_t *l = arg;
  l->in_pool = s->pool == l->pool;
  return 0;
}

static int lay_block(void *arg, const xseg_block_info_t *b) {
  layout_t *l = arg;
  if (l->in_pool && l->n < 64) {
    l->addr[l->n] = b->address;
    l->size[l->n] = b->size;
    l->live[l->n++] = b->state == XSEG_BLOCK_LIVE;
  }
  return 0;
}

XT_TEST(malloc_at_restores_a_pool_layout) {
  XT_REQUIRE(t_init("host_capacity_mb:128,host_devices:2") == 0);
  XT_CHECK_EQ(xseg_device_active(1), 0);
  XT_CHECK(xseg_device_active(5) < 0);
  int pool;
  XT_REQUIRE(xseg_pool_create(1, &pool) == 0);
  XT_CHECK_EQ(xseg_device_active(1), 1);
  xseg_stream_t s = (xseg_stream_t)0x40;
  void *p[6];
  size_t sizes[6] = {3 * MiB, 100 * KiB, 7 * MiB + 3, 512, 2 * MiB, 900 * KiB};
  for (int i = 0; i < 6; i++) XT_REQUIRE((p[i] = xseg_malloc_in_pool(sizes[i], 1, s, pool)) != NULL);
  XT_CHECK_EQ(xseg_free(p[1]), 0);
  layout_t before = {pool, 0, {0}, {0}, {0}, 0};
  xseg_walker_t wk = {lay_seg, lay_block};
  XT_CHECK_EQ(xseg_walk(1, &wk, &before), 0);
  XT_CHECK(before.n >= 5);
  for (int i = 0; i < 6; i++)
    if (i != 1) XT_CHECK_EQ(xseg_free(p[i]), 0);
  /* A live range, another stream's part of the pool, or a closed pool: refused. */
  void *q = xseg_malloc_in_pool(3 * MiB, 1, s, pool);
  XT_REQUIRE(q != NULL);
  XT_CHECK(xseg_malloc_at(q, 3 * MiB, 1, s, pool) == NULL);
  XT_CHECK_EQ(xseg_last_error_code(), XSEG_EINVAL);
  XT_CHECK_EQ(xseg_free(q), 0);
  XT_CHECK(xseg_malloc_at(q, 3 * MiB, 1, (xseg_stream_t)0x41, pool) == NULL);
  XT_CHECK(xseg_malloc_at(q, 3 * MiB, 1, s, pool + 7) == NULL);
  /* Every block that was live comes back at its address, with its size. */
  size_t restored = 0;
  void *back[64];
  for (size_t i = 0; i < before.n; i++) {
    back[i] = NULL;
    if (!before.live[i]) continue;
    back[i] = xseg_malloc_at((void *)before.addr[i], before.size[i], 1, s, pool);
    XT_CHECK_MSG(back[i] == (void *)before.addr[i], "block %zu (%#lx, %zu) not restored: %s", i,
                 (unsigned long)before.addr[i], before.size[i], xseg_last_error());
    restored += back[i] != NULL;
  }
  XT_CHECK_EQ(restored, 5);
  layout_t after = {pool, 0, {0}, {0}, {0}, 0};
  XT_CHECK_EQ(xseg_walk(1, &wk, &after), 0);
  int same = after.n == before.n;
  for (size_t i = 0; same && i < after.n; i++)
    same = after.addr[i] == before.addr[i] && after.size[i] == before.size[i] && after.live[i] == before.live[i];
  XT_CHECK_MSG(same, "the pool's layout differs after the restore");
  T_CHECK_HEAP();
  for (size_t i = 0; i < before.n; i++)
    if (back[i]) XT_CHECK_EQ(xseg_free(back[i]), 0);
  XT_CHECK_EQ(xseg_pool_release(1, pool), 0);
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

/* On the host backend sharing is refused with a reason; malformed handles
 * are named, never mapped.  (The GPU suite shares for real.) */
XT_TEST(ipc_refusals_are_clear) {
  XT_REQUIRE(t_init("host_capacity_mb:64") == 0);
  void *p = xseg_malloc(3 * MiB, 0, NULL);
  XT_REQUIRE(p != NULL);
  unsigned char buf[256];
  size_t len = sizeof buf, off = 0;
  XT_CHECK_EQ(xseg_ipc_export(p, buf, &len, &off), XSEG_ENOTSUP);
  XT_CHECK(strstr(xseg_last_error(), "cuda backend") != NULL);
  XT_CHECK_EQ(xseg_ipc_export((char *)p + 3 * MiB + 4096, buf, &len, &off), XSEG_EINVAL);
  XT_CHECK_EQ(xseg_ipc_export(p, NULL, &len, &off), XSEG_EINVAL);
  void *base = NULL;
  XT_CHECK_EQ(xseg_ipc_open("short", 5, 0, &base), XSEG_EINVAL);
  XT_CHECK(strstr(xseg_last_error(), "too short") != NULL);
  memset(buf, 0, sizeof buf);
  memcpy(buf, "NOTXSEG!", 8);
  XT_CHECK_EQ(xseg_ipc_open(buf, 24, 0, &base), XSEG_EINVAL);
  XT_CHECK(strstr(xseg_last_error(), "not a handle") != NULL);
  memcpy(buf, "XSEGIPC1", 8);
  buf[8] = 3; /* three chunks claimed, none present */
  XT_CHECK_EQ(xseg_ipc_open(buf, 24, 0, &base), XSEG_EINVAL);
  XT_CHECK(strstr(xseg_last_error(), "malformed") != NULL);
  XT_CHECK(base == NULL);
  XT_CHECK_EQ(xseg_ipc_close(p), XSEG_EINVAL);
  XT_CHECK_EQ(xseg_free(p), 0);
  T_CHECK_HEAP();
  XT_CHECK_EQ(xseg_shutdown(), 0);
}

int main(void) {
  XT_RUN(stats_struct_matches_the_json);
  XT_RUN(accumulated_reset_changes_counts_not_behaviour);
  XT_RUN(cache_info_and_base_allocation);
  XT_RUN(walk_shows_mapped_runs_and_their_blocks);
  XT_RUN(private_pool_keeps_its_memory);
  XT_RUN(capture_makes_no_event_calls);
  XT_RUN(malloc_at_restores_a_pool_layout);
  XT_RUN(ipc_refusals_are_clear);
  return XT_DONE();
}
