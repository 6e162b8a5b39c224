/* pool/stats.h: every statistic of a device allocator, declared once.
 *
 * Three X-macro lists declare the fields; the struct, the JSON writer, the
 * summary, peak reset and the tests' reference model all expand them, so no
 * output can miss a field (STYLE.md item 5).  Names follow
 * torch.cuda.memory_stats() where the concept is the same; docs/metrics.md
 * defines each one.
 */
#ifndef XSEG_POOL_STATS_H
#define XSEG_POOL_STATS_H

#include <stdint.h>

/* Torch-style: each is an array over .all / .small_pool / .large_pool, of
 * .current / .peak / .allocated / .freed. */
#define XS_STATS_POOLED(X)                                                                   \
  X(allocation, "live allocations (blocks handed out and not freed)")                        \
  X(segment, "physical allocations backing the pool: mapped chunks or binned segments")      \
  X(active, "blocks live or freed but still waiting for other streams")                      \
  X(inactive_split, "free mapped blocks that are part of a larger segment")                  \
  X(allocated_bytes, "bytes of live blocks (after rounding)")                                \
  X(reserved_bytes, "bytes of device memory mapped into the pool's segments")                \
  X(active_bytes, "bytes of active blocks")                                                  \
  X(inactive_split_bytes, "bytes of inactive split blocks")                                  \
  X(requested_bytes, "bytes the user asked for, of live blocks")

/* xseg's gauges: .current / .peak. */
#define XS_STATS_GAUGES(X)                                                                   \
  X(held_bytes, "device memory held: mapped plus cached chunks (binned: segments)")          \
  X(mapped_bytes, "bytes mapped into segments")                                              \
  X(reserved_address_bytes, "virtual address space reserved")                                \
  X(handles_live, "physical handles created and not released")                              \
  X(handles_cached, "physical handles held unmapped, ready to map")                          \
  X(cached_handle_bytes, "bytes of cached handles")                                          \
  X(free_mapped_bytes, "bytes of mapped free blocks (the cache inside segments)")            \
  X(pending_frees, "blocks freed but waiting for events of other streams")

/* Counters: only ever increase (until the allocator is re-initialised). */
#define XS_STATS_COUNTERS(X)                                                                 \
  X(num_alloc_retries, "allocations that released cache or remapped pages and retried")      \
  X(num_ooms, "allocations that failed for lack of memory")                                  \
  X(num_device_alloc, "physical allocations (cuMemCreate or cuMemAlloc)")                    \
  X(num_device_free, "physical releases (cuMemRelease or cuMemFree)")                        \
  X(num_map, "cuMemMap calls")                                                               \
  X(num_unmap, "cuMemUnmap calls")                                                           \
  X(num_set_access, "cuMemSetAccess calls")                                                  \
  X(num_reserve, "address ranges reserved")                                                  \
  X(num_unreserve, "address ranges freed")                                                   \
  X(time_create_ns, "time in cuMemCreate / cuMemAlloc")                                      \
  X(time_release_ns, "time in cuMemRelease / cuMemFree")                                     \
  X(time_map_ns, "time in cuMemMap")                                                         \
  X(time_unmap_ns, "time in cuMemUnmap")                                                     \
  X(time_set_access_ns, "time in cuMemSetAccess")                                            \
  X(remapped_bytes, "bytes of handles unmapped from holes and mapped elsewhere (stitched)")  \
  X(num_remaps, "handles moved from one address to another")                                 \
  X(num_conversions, "large handles re-made as page-sized handles before a partial reuse")   \
  X(converted_bytes, "bytes of large handles converted to page-sized handles")               \
  X(num_fence_waits, "times the host waited for a stream before unmapping")                  \
  X(num_trims, "release-policy trims (release_threshold_mb, gc threshold)")                  \
  X(trimmed_bytes, "bytes unmapped and released by trims")

enum { XS_STAT_ALL = 0, XS_STAT_SMALL = 1, XS_STAT_LARGE = 2, XS_STAT_NTYPES = 3 };

typedef struct xs_stat_s {
  int64_t current, peak, allocated, freed;
} xs_stat_t;

typedef struct xs_gauge_s {
  int64_t current, peak;
} xs_gauge_t;

typedef struct xs_stats_s {
#define XS_DECL_POOLED(name, help) xs_stat_t name[XS_STAT_NTYPES];
  XS_STATS_POOLED(XS_DECL_POOLED)
#undef XS_DECL_POOLED
#define XS_DECL_GAUGE(name, help) xs_gauge_t name;
  XS_STATS_GAUGES(XS_DECL_GAUGE)
#undef XS_DECL_GAUGE
#define XS_DECL_COUNTER(name, help) uint64_t name;
  XS_STATS_COUNTERS(XS_DECL_COUNTER)
#undef XS_DECL_COUNTER
} xs_stats_t;

/* Add n (may be negative) to a pooled stat for class cls (XS_SMALL/XS_LARGE). */
static inline void xs_stat_one(xs_stat_t *s, int64_t n) {
  s->current += n;
  if (n > 0) {
    s->allocated += n;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed += -n;
  }
}
static inline void xs_stat_add(xs_stat_t s[XS_STAT_NTYPES], int cls, int64_t n) {
  xs_stat_one(&s[XS_STAT_ALL], n);
  xs_stat_one(&s[1 + cls], n);
}
static inline void xs_gauge_add(xs_gauge_t *g, int64_t n) {
  g->current += n;
  if (g->current > g->peak) g->peak = g->current;
}

/* Derived figures, computed from the stats and a walk of the free sets. */
typedef struct xs_derived_s {
  uint64_t largest_free_block;   /* largest mapped free block */
  double external_fragmentation; /* 1 - largest_free_block / free_mapped_bytes */
  double utilization;            /* peak allocated / peak reserved */
  int64_t rounding_waste_bytes;  /* allocated - requested (current) */
} xs_derived_t;

void xs_stats_reset_peaks(xs_stats_t *s);

#endif /* XSEG_POOL_STATS_H */
