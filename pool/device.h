/* pool/device.h: the device allocator - segments, pools, streams, the
 * device, and the strategy interface its two memory sources implement.
 *
 * The data model, from the bottom up (blocks: pool/block.h; ranges and
 * chunks: vmm/vmm.h):
 *
 *   xs_segment_t  a range of device addresses (an xs_vseg_t) whose blocks
 *                 tile it exactly.  Expandable: a reservation whose pages
 *                 map on demand.  Binned: one allocation that never changes
 *                 size.
 *   xs_pool_t     the blocks of one stream and one size class (small:
 *                 requests <= 1 MiB, large: the rest): its segments and its
 *                 free sets, ordered by (size, address) for best fit.
 *   xs_stream_t   per-stream state: two pools and the free-sequence counters
 *                 that say which frees the GPU has certainly finished with.
 *   xs_device_t   one allocator per device: one lock, the physical layer,
 *                 the streams, the map from live pointers to blocks, stats,
 *                 and the strategy in use.
 *   xs_strategy_t where a pool's memory comes from: pages mapped on demand
 *                 (pool/expandable.c) or whole segments (pool/binned.c).
 *                 pool/alloc.c keeps the policy common to both.
 */
#ifndef XSEG_POOL_DEVICE_H
#define XSEG_POOL_DEVICE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "config.h"
#include "error.h"
#include "stats.h"
#include "vmm.h"
#include "xseg.h"

/* ---- constants ---------------------------------------------------------- */

#define XS_SMALL_MAX ((size_t)1 << 20)         /* requests <= 1 MiB are small */
/* The budgets a pin is charged to (xs_device_t.pinned; expandable.h says
 * how large each is): small or busy chunks, surplus chunks, small idle
 * chunks beyond the first budget while the device is roomy, large idle
 * chunks early in a run, chunks grown ahead for several requests, and
 * large chunks a settled workload's request covers but for a few pages. */
#define XS_PINS_SHARED 0
#define XS_PINS_SURPLUS 1
#define XS_PINS_ROOMY 2
#define XS_PINS_EARLY 3
#define XS_PINS_GROWN 4
#define XS_PINS_COVERED 5
#define XS_PINS 6
#define XS_NO_FIT_SLOTS 4096                   /* whole-chunk search memo slots (a power of two) */
#define XS_ASKED_SLOTS 1024                    /* large request sizes asked for last (a power of two) */
#define XS_RERUN_LOGS 4                        /* runs whose layouts are kept (expandable.h, XS_RERUN_*) */
#define XS_SETTLE_RISE 64 /* the live peak rose by more than 1/64: a new step (peak_step) */
#define XS_BINNED_SMALL_SEG ((size_t)2 << 20)  /* binned: small segments */
#define XS_BINNED_MID_SEG ((size_t)20 << 20)   /* binned: segments for 1-10 MiB */
#define XS_BINNED_MID_MAX ((size_t)10 << 20)
#define XS_OVERSIZE_SLACK ((size_t)20 << 20)   /* max waste on an oversize block */
#define XS_BINNED_AUTO_SPLIT ((size_t)64 << 20) /* binned max_split_size_mb:auto */

enum { XS_SMALL = 0, XS_LARGE = 1, XS_NCLASS = 2 };

/* A strategy's or the allocator's failure other than a lack of device
 * memory: the thread's error says why. */
#define XS_FAILED (-1)

typedef struct xs_pool_s xs_pool_t;
typedef struct xs_stream_s xs_stream_t;
typedef struct xs_device_s xs_device_t;

/* ---- segments, pools and streams ------------------------------------------------ */

struct xs_segment_s {
  xs_pool_t *pool;
  xs_vseg_t vs;                /* the addresses: base, size, page table */
  xs_block_t *head;            /* lowest block */
  xs_segment_t *next, *prev;   /* in the pool */
  int binned;                  /* 1: binned segment (vs is fixed) */
  size_t live_bytes;           /* bytes of live and pending blocks */
  uint64_t last_free_ns;       /* binned gc: the oldest wholly free segments go first */
};

struct xs_pool_s {
  xs_stream_t *st;
  int cls;                  /* XS_SMALL or XS_LARGE */
  xs_tree_t free;           /* mapped free blocks */
  xs_tree_t unmapped;       /* expandable: free blocks with no page mapped */
  xs_segment_t *segs;
  size_t nsegs;
};

struct xs_stream_s {
  xseg_stream_t s;
  int pool;            /* private pool id, 0: the device's own pools */
  int keep;            /* 1 while its private pool is open: never unmap or free its memory */
  xs_device_t *dev;
  xs_pool_t pools[XS_NCLASS];
  uint64_t free_seq;   /* incremented by every free on this stream */
  uint64_t safe_seq;   /* frees with free_seq <= safe_seq are finished on the GPU */
  xs_event_t fence;    /* outstanding fence (recorded, not yet seen complete) */
  uint64_t fence_seq;  /* free_seq when the fence was recorded */
};

/* A block waiting for an event of another stream before it becomes free.
 * ev == NULL means the event could not be recorded yet (retried later). */
typedef struct xs_pending_s {
  xs_event_t ev;
  xs_block_t *b;
  xseg_stream_t s;
} xs_pending_t;

/* The layouts of the last runs (expandable.c, "Running again"; XS_RERUN_*
 * in expandable.h).  A run starts at a new start or when a free leaves
 * nothing live.  A run's log holds where its large requests went, in
 * order, with the pin budget each was charged to. */
typedef struct xs_place_s {
  uintptr_t addr; /* the block's start; its low bits (below XS_ALIGN) hold the pin budget + 1, 0: no pin */
  uint32_t size;  /* the request, in XS_ALIGN units */
  uint32_t take;  /* what it took, in XS_ALIGN units */
} xs_place_t;

typedef struct xs_runlog_s {
  xs_place_t *at;          /* grown as needed, up to XS_RERUN_CAP places */
  uint32_t n, cap;
} xs_runlog_t;

typedef struct xs_rerun_s {
  xs_runlog_t rec;                 /* this run */
  xs_runlog_t logs[XS_RERUN_LOGS]; /* the last runs, the latest first */
  int guide;                       /* the log this run follows (an index of logs), -1: none yet */
  int following;                   /* 0: this run has diverged from its guide, or found none */
  uint32_t next;                   /* the guide's place for the next large request */
} xs_rerun_t;

/* ---- the strategy interface -------------------------------------------------------- */

/* Where a request goes: [addr, addr + take) of free mapped block b. */
typedef struct xs_fit_s {
  xs_block_t *b;
  uintptr_t addr;
  size_t take;       /* the rounded size, or up to the end of its last page */
  xs_chunk_t *pin;   /* a large chunk the block will pin (expandable), or NULL */
  int budget;        /* the pin budget it is charged to: an index of pinned[] (XS_PINS_*) */
} xs_fit_t;

typedef struct xs_strategy_s {
  const char *name;          /* "expandable" or "binned" */
  size_t auto_max_split;     /* max_split_size_mb:auto */
  /* A free mapped block for `size` (rounded) bytes in pool p, with memory
   * added if none fits.  0; XSEG_ENOMEM when the device has no memory for
   * it (the allocator then reports an out-of-memory); or another code with
   * the thread's error set.  The slab has room for two blocks on success. */
  int (*acquire)(xs_device_t *d, xs_pool_t *p, size_t size, xs_fit_t *out);
  /* Cut the rest of free block b off when `size` bytes are carved from it? */
  int (*should_split)(const xs_device_t *d, const xs_block_t *b, size_t size);
  /* Live block b is being freed (NULL: nothing to note). */
  void (*note_free)(xs_device_t *d, xs_block_t *b);
  /* The release policy: give mapped free memory back to the driver down to
   * `keep` bytes, never waiting for the GPU. */
  void (*trim)(xs_device_t *d, size_t keep);
  /* xseg_empty_cache: give back everything that is free. */
  int (*empty)(xs_device_t *d);
  /* Give `peer` access to every page, now and later. */
  int (*enable_peer)(xs_device_t *d, int peer);
  /* Free the wholly free segments of a pool (the device goes away). */
  void (*destroy_pool)(xs_device_t *d, xs_pool_t *p);
} xs_strategy_t;

extern const xs_strategy_t xs_expandable_strategy; /* pool/expandable.c */
extern const xs_strategy_t xs_binned_strategy;     /* pool/binned.c */

/* A private pool (xseg_pool_create): its blocks live in streams of their
 * own (xs_stream_t.pool), kept apart from every other pool. */
typedef struct xs_private_s {
  int id;
  int open; /* allocations go in, and its memory is kept */
} xs_private_t;

/* ---- the device allocator ---------------------------------------------------- */

/* Devices sit in one array, each on cache lines of its own (the lock of
 * one device never shares a line with the counters of the next). */
#define XS_CACHE_LINE 64
struct xs_device_s {
  _Alignas(XS_CACHE_LINE) pthread_mutex_t lock; /* the one lock of this device; taken in pool/api.c only */
  int id;
  int ready;                   /* initialised */
  const xs_strategy_t *strat;  /* where memory comes from */
  const xs_config_t *cfg;
  xs_vmm_t vmm;                /* the physical layer */
  xs_stream_t **streams;
  size_t nstreams, capstreams;
  xs_stream_t *last_stream;    /* one-entry cache of the stream lookup */
  xs_ptrmap_t live;
  xs_slab_t slab;
  xs_pending_t *pending;
  size_t npending, cappending;
  size_t free_mapped;          /* bytes in mapped free blocks (all pools) */
  size_t pinned[XS_PINS];      /* bytes of pinned large chunks, per budget (XS_PINS_*, expandable.h) */
  /* Bytes handed out and returned per class, for the packing rule
   * (expandable.c, XS_PACK_DIV): the allocator's own, so that resetting
   * the user's statistics changes nothing. */
  uint64_t handed[XS_NCLASS], returned[XS_NCLASS];
  uint64_t pack_base[XS_NCLASS]; /* handed[class] when its packing count last started (expandable.c, packing) */
  uint64_t start_handed;         /* xs_handed_bytes at the last new start */
  /* Frees of large blocks, and of the pages two large blocks shared, how
   * often the second went within XS_TOGETHER_FREES frees of the first
   * (together) or not (apart): the placement rule's evidence (expandable.c). */
  uint64_t large_frees;
  uint32_t together, apart;
  size_t grown_streak;           /* bytes of growth chunks made since the last large free (expandable.c, grown_chunk) */
  uint64_t live_peak;            /* most bytes live at once (all classes) since the last new start */
  uint64_t peak_step;            /* live_peak when it last rose by more than 1/XS_SETTLE_RISE */
  uint64_t peak_step_at;         /* bytes handed out (all classes) at that moment */
  /* The whole-chunk search's memo: (free block, request) pairs it found no
   * place for, and its steps there, hashed into these slots (expandable.c,
   * no_fit_key); 32 KiB. */
  uint64_t no_fit[XS_NO_FIT_SLOTS];
  /* Every large request's size, each in a slot picked by a hash of the
   * size (the latest wins): was a size asked for lately (a repeating
   * workload) or is it new (random sizes)?  Only a size asked for lately
   * reads and writes the memo above; where the workload has settled, a
   * new size neither moves away from pinned chunks nor searches on past
   * the first whole-chunk place (expandable.c, asked_lately); 8 KiB.
   * Both are cleared at a new start (xs_empty_cache). */
  uint64_t asked[XS_ASKED_SLOTS];
  xs_rerun_t rerun;            /* the last run's layout (expandable.c), dropped at a new start */
  xs_private_t *privs;         /* private pools */
  size_t nprivs, cappriv;
  int next_pool;               /* id of the next private pool - 1 */
  int capturing;               /* xseg_capture_begin depth: no event calls while > 0 */
  int trim_wanted;             /* a trim left blocks behind a fence: retry when it completes */
  size_t trim_floor;           /* free_mapped after the last trim: retry only above it */
  size_t large_page;           /* page_size_mb in bytes (0: adaptive) */
  int roundup;                 /* roundup_power2_divisions is set */
  size_t max_split;            /* max_split_size_mb in effect (auto resolved) */
  xs_stats_t stats;            /* the allocator's own; the physical layer's are in vmm.st */
};

/* Bytes handed out on the device, both classes, ever (the turns that
 * settled(), packing and the surplus budget count are differences of it). */
static inline uint64_t xs_handed_bytes(const xs_device_t *d) { return d->handed[XS_SMALL] + d->handed[XS_LARGE]; }

/* Bytes live on the device, by the allocator's own count (handed out less
 * returned; the user's statistics may be reset). */
static inline uint64_t xs_live_bytes(const xs_device_t *d) {
  return xs_handed_bytes(d) - d->returned[XS_SMALL] - d->returned[XS_LARGE];
}

/* owners.c: which device's segments an address may lie in, read without
 * any lock, so that a free takes no other device's lock (pool/api.c).
 * Addresses are looked up by 2 MiB granule.  An entry is set when a
 * segment is made, before any pointer in it is handed out, and never
 * cleared; a granule that two devices ever used reads XS_OWNER_ANY. */
#define XS_OWNER_NONE (-1) /* no segment was ever made there */
#define XS_OWNER_ANY (-2)  /* any device: look in each */
void xs_owners_add(int device, uintptr_t lo, uintptr_t hi);
int xs_owner_of(uintptr_t addr);
void xs_owners_reset(void); /* at shutdown, with no other thread in xseg */
/* May `addr` lie in a segment of device `device`? */
static inline int xs_device_may_own(const xs_device_t *d, uintptr_t addr) {
  int o = xs_owner_of(addr);
  return o == d->id || o == XS_OWNER_ANY;
}

/* alloc.c: the policy common to both strategies */
int xs_device_init(xs_device_t *d, xs_backend_t *be, int id, const xs_config_t *cfg);
void xs_device_destroy(xs_device_t *d);
/* Allocate in the pools of stream s and private pool `pool` (0: the
 * device's own; the caller checked that it is open). */
void *xs_malloc(xs_device_t *d, size_t size, xseg_stream_t s, int pool);
/* Allocate exactly [addr, addr + size) (xseg_malloc_at). */
void *xs_malloc_at(xs_device_t *d, uintptr_t addr, size_t size, xseg_stream_t s, int pool);
int xs_free(xs_device_t *d, xs_block_t *b);
xs_block_t *xs_find_live(xs_device_t *d, uintptr_t p);
int xs_diagnose_bad_pointer(xs_device_t *d, uintptr_t p, const char *what);
int xs_record_stream(xs_device_t *d, xs_block_t *b, xseg_stream_t s);
int xs_empty_cache(xs_device_t *d);
int xs_enable_peer_access(xs_device_t *d, int peer);
void xs_process_events(xs_device_t *d);
size_t xs_round_size(const xs_device_t *d, size_t size); /* 0 on overflow */
/* Fences: is the GPU finished with frees up to free_seq on stream st?
 * With wait, records a fence if needed and waits for it. */
int xs_stream_safe(xs_device_t *d, xs_stream_t *st, uint64_t free_seq, int wait);
xs_segment_t *xs_seg_of(xs_device_t *d, uintptr_t p); /* segment containing p, or NULL */
/* The live block holding address p (p may be inside it), or NULL. */
xs_block_t *xs_live_block_at(xs_device_t *d, uintptr_t p);
/* Private pools. */
xs_private_t *xs_private_find(xs_device_t *d, int id); /* NULL if no such pool */
int xs_private_create(xs_device_t *d, int *id);
void xs_private_close(xs_device_t *d, xs_private_t *pp);
/* Bytes of live blocks in pool id's streams. */
size_t xs_private_live(xs_device_t *d, int id);
/* Largest cached free block of the device's own pools, or what could still
 * be mapped (xseg_cache_info). */
size_t xs_cache_info(xs_device_t *d);

/* block.c: blocks in pools - split, merge, free sets, best fit */
void xs_free_insert(xs_device_t *d, xs_block_t *b);
void xs_free_remove(xs_device_t *d, xs_block_t *b);
/* Make [addr, addr+size) of free mapped block f a block of its own (split
 * off what lies before and, within the strategy's split rule, after).
 * Returns it, removed from the free set. */
xs_block_t *xs_carve(xs_device_t *d, xs_block_t *f, uintptr_t addr, size_t size);
/* Split block b (not in a free set) at addr; b keeps [b->addr, addr) and
 * the returned block, with b's state, gets the rest.  Slab reserved. */
xs_block_t *xs_split_at(xs_device_t *d, xs_block_t *b, uintptr_t addr);
/* Merge free block b with free neighbours of the same mapping state and
 * insert the result into its free set; returns the merged block. */
xs_block_t *xs_merge_insert(xs_device_t *d, xs_block_t *b);
/* Best fit in the pool under max_split_size: the smallest free block that
 * holds size bytes, or NULL. */
xs_block_t *xs_pool_fit(xs_device_t *d, xs_pool_t *p, size_t size);
/* Make seg, whose range is set up, a segment of pool p, tiled by one free
 * block (mapped or not).  The slab must have room for a block. */
void xs_segment_adopt(xs_device_t *d, xs_pool_t *p, xs_segment_t *seg, int mapped);
/* Take a wholly free segment out of its pool and drop its block (its
 * range is the caller's to free). */
void xs_segment_drop(xs_device_t *d, xs_segment_t *seg);

/* check.c */
int xs_check_device(xs_device_t *d);
/* snapshot.c */
size_t xs_snapshot_device(xs_device_t *d, char *buf, size_t len);
int xs_walk_device(xs_device_t *d, const xseg_walker_t *w, void *arg);

#endif /* XSEG_POOL_DEVICE_H */
