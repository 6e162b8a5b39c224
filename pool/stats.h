/* pool/stats.h: every statistic of a device allocator, declared once.
 *
 * Three X-macro lists declare the fields; the struct, the JSON writer, the
 * summary, peak reset and the tests' reference model all expand them, so no
 * output can miss a field (STYLE.md item 5).  The physical layer's counters
 * are declared the same way in vmm/vmm.h.  Names follow
 * torch.cuda.memory_stats() where the concept is the same; docs/metrics.md
 * defines each one.
 */
#ifndef XSEG_POOL_STATS_H
#define XSEG_POOL_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"

/* The allocator's own statistics.  The physical layer declares its
 * counters the same way (vmm/vmm.h: XS_VMM_POOLED, _GAUGES, _COUNTERS:
 * reserved bytes, segments, held and mapped bytes, handles, driver calls
 * and their times); every writer below expands both sets of lists.
 *
 * Torch-style: each is an array over .all / .small_pool / .large_pool, of
 * .current / .peak / .allocated / .freed. */
#define XS_STATS_POOLED(X)                                                                   \
  X(allocation, "live allocations (blocks handed out and not freed)")                        \
  X(active, "blocks live or freed but still waiting for other streams")                      \
  X(inactive_split, "free mapped blocks that are part of a larger segment")                  \
  X(allocated_bytes, "bytes of live blocks (after rounding)")                                \
  X(active_bytes, "bytes of active blocks")                                                  \
  X(inactive_split_bytes, "bytes of inactive split blocks")                                  \
  X(requested_bytes, "bytes the user asked for, of live blocks")

/* Torch-style single statistics (not split by pool): .current / .peak /
 * .allocated / .freed. */
#define XS_STATS_SINGLE(X)                                                                   \
  X(oversize_allocations, "live blocks of max_split_size or more")                           \
  X(oversize_segments, "binned segments of max_split_size or more")

/* xseg's gauges: .current / .peak. */
#define XS_STATS_GAUGES(X)                                                                   \
  X(free_mapped_bytes, "bytes of mapped free blocks (the cache inside segments)")            \
  X(pending_frees, "blocks freed but waiting for events of other streams")

/* Counters: only ever increase (until the allocator is re-initialised). */
#define XS_STATS_COUNTERS(X)                                                                 \
  X(num_alloc_retries, "allocations that released cache or remapped pages and retried")      \
  X(num_ooms, "allocations that failed for lack of memory")                                  \
  X(num_grows, "requests that mapped new memory (expandable) or a new segment (binned)")     \
  X(num_conversions, "large handles re-made as page-sized handles before a partial reuse")   \
  X(converted_bytes, "bytes of large handles converted to page-sized handles")               \
  X(num_fence_waits, "times the host waited for a stream before unmapping")                  \
  X(num_trims, "release-policy trims (release_threshold_mb, gc threshold)")                  \
  X(trimmed_bytes, "bytes unmapped and released by trims")

typedef struct xs_stats_s {
#define XS_DECL_POOLED(name, help) xs_stat_t name[XS_STAT_NTYPES];
  XS_STATS_POOLED(XS_DECL_POOLED)
#undef XS_DECL_POOLED
#define XS_DECL_SINGLE(name, help) xs_stat_t name;
  XS_STATS_SINGLE(XS_DECL_SINGLE)
#undef XS_DECL_SINGLE
#define XS_DECL_GAUGE(name, help) xs_gauge_t name;
  XS_STATS_GAUGES(XS_DECL_GAUGE)
#undef XS_DECL_GAUGE
#define XS_DECL_COUNTER(name, help) uint64_t name;
  XS_STATS_COUNTERS(XS_DECL_COUNTER)
#undef XS_DECL_COUNTER
} xs_stats_t;

/* Derived figures, computed from the stats and a walk of the free sets. */
typedef struct xs_derived_s {
  uint64_t largest_free_block;   /* largest mapped free block */
  double external_fragmentation; /* 1 - largest_free_block / free_mapped_bytes */
  double utilization;            /* peak allocated / peak reserved */
  int64_t rounding_waste_bytes;  /* allocated - requested (current) */
  /* Expandable segments: free bytes that no page move can give out. */
  uint64_t free_in_shared_pages_bytes;   /* in pages that live or pending blocks hold in part */
  uint64_t free_in_pinned_handles_bytes; /* whole free pages of handles that hold live or pending data */
} xs_derived_t;

void xs_stats_reset_peaks(xs_stats_t *s);
/* .allocated and .freed of every statistic, and every counter, to 0. */
void xs_stats_reset_accumulated(xs_stats_t *s);

/* An snprintf-like text builder (len counts what the full text needs; at
 * most cap bytes are written), shared by every JSON writer. */
typedef struct xs_sbuf_s {
  char *p;
  size_t len, cap;
} xs_sbuf_t;
void xs_sbuf_put(xs_sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t xs_sbuf_finish(xs_sbuf_t *b); /* NUL-terminates; returns len */

/* Writers over one device (the caller holds its lock). */
struct xs_device_s;
void xs_stats_oom_message(struct xs_device_s *d, size_t size, size_t rounded, char *buf, size_t len);
size_t xs_stats_json_device(struct xs_device_s *d, const char *backend, char *buf, size_t len);
void xs_stats_summary(struct xs_device_s *d, const char *backend, FILE *out);

#endif /* XSEG_POOL_STATS_H */
