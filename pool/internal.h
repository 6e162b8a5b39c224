/* pool/internal.h: the types every layer of xseg shares, and the functions
 * they call across files (prefix xs_).  Public names (xseg_) live in
 * include/xseg.h; file-local helpers are static.
 *
 * The data model, from the bottom up:
 *
 *   xs_chunk_t    a physical handle the allocator holds (cuMemCreate), mapped
 *                 into one segment or cached unmapped.  Size: a multiple of
 *                 the device granularity ("page").
 *   xs_segment_t  a range of device addresses whose blocks tile it exactly.
 *                 Expandable: a VA reservation whose pages map on demand,
 *                 with a page table (page -> chunk).  Binned: one fully
 *                 mapped allocation that never changes size.
 *   xs_block_t    a piece of a segment: live (handed to the user), free
 *                 (in its pool's free set), pending (freed, waiting for
 *                 events of other streams), or - expandable only - free and
 *                 unmapped.  Address neighbours are linked (prev/next).
 *   xs_pool_t     the blocks of one stream and one size class (small:
 *                 requests <= 1 MiB, large: the rest): its segments and its
 *                 free sets, ordered by (size, address) for best fit.
 *   xs_stream_t   per-stream state: two pools and the free-sequence counters
 *                 that say which frees the GPU has certainly finished with.
 *   xs_device_t   one allocator per device: one lock, the streams, the map
 *                 from live pointers to blocks, the chunk cache, stats.
 */
#ifndef XSEG_POOL_INTERNAL_H
#define XSEG_POOL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "config.h"
#include "stats.h"
#include "xseg.h"

/* ---- constants ---------------------------------------------------------- */

#define XS_ALIGN ((size_t)512)                 /* block size and address alignment */
#define XS_SMALL_MAX ((size_t)1 << 20)         /* requests <= 1 MiB are small */
#define XS_BINNED_SMALL_SEG ((size_t)2 << 20)  /* binned: small segments */
#define XS_BINNED_MID_SEG ((size_t)20 << 20)   /* binned: segments for 1-10 MiB */
#define XS_BINNED_MID_MAX ((size_t)10 << 20)
#define XS_OVERSIZE_SLACK ((size_t)20 << 20)   /* max waste on an oversize block */
#define XS_BINNED_AUTO_SPLIT ((size_t)64 << 20) /* binned max_split_size_mb:auto */
/* Memory is "plentiful" while at least 1/XS_PLENTIFUL of the limit is free:
 * then growth folds a request's last page into its handle, and a block may
 * pin a large handle the GPU is still using rather than wait for it. */
#define XS_PLENTIFUL 8
/* A block placed over part of a large free chunk the GPU may still be using
 * pins it (its free pages stay stuck while data lives in it) rather than
 * wait, while memory is plentiful and pinned chunks total at most
 * 1/XS_PIN_DIV of the limit; otherwise it takes fresh memory or waits
 * (docs/design.md, "Handle sizing"). */
#define XS_PIN_DIV 128
/* A growth while memory is plentiful takes the rest of its last page into
 * its one handle when that rest is at most 1/XS_FOLD_DIV of the request,
 * except while the pool packs (XS_PACK_DIV).  The folded rest stays with
 * the block for its life: a sixteenth left a recorded GPT-2 inference at
 * 1.022 times its peak, a sixty-fourth bounds that waste to 1.6 %
 * (docs/design.md, "Handle sizing"). */
#define XS_FOLD_DIV 64
/* A pool packs its blocks (shares a neighbour's page whenever that needs no
 * more new pages) while less than 1/XS_PACK_DIV of the bytes it has handed
 * out have come back: what a program allocates before it frees anything is
 * mostly state that lives to the end, such as a model's weights
 * (docs/design.md, "Placement").  The count starts again when the cache is
 * emptied (xseg_empty_cache) with nothing live: that is a new start.  Not
 * merely whenever nothing is live: random traces pass through that early
 * on, and packing after it cost them (logrand 1.0105 -> 1.0131). */
#define XS_PACK_DIV 16

enum { XS_SMALL = 0, XS_LARGE = 1, XS_NCLASS = 2 };
enum { XS_MODE_EXPANDABLE = 0, XS_MODE_BINNED = 1 };
enum { XS_BLOCK_FREE = 0, XS_BLOCK_LIVE = 1, XS_BLOCK_PENDING = 2 };

/* ---- asserts (STYLE.md item 6) ----------------------------------------- */

void xs_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define xs_assert(e) ((e) ? (void)0 : xs_assert_fail(#e, __FILE__, __LINE__))
#if defined(XSEG_DEBUG_CHECKS)
#define xs_assert_internal(e) xs_assert(e)
#else
#define xs_assert_internal(e) ((void)0)
#endif

/* ---- errors ------------------------------------------------------------- */

/* Set the calling thread's error (xseg_last_error) and return `code`. */
int xs_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void xs_error_clear(void);

/* ---- intrusive red-black tree of free blocks, keyed (size, addr) ------- */

typedef struct xs_rbnode_s {
  struct xs_rbnode_s *left, *right, *parent;
  int red;
} xs_rbnode_t;

typedef struct xs_tree_s {
  xs_rbnode_t *root;
  size_t count;
  size_t bytes; /* sum of block sizes */
} xs_tree_t;

typedef struct xs_block_s xs_block_t;
typedef struct xs_segment_s xs_segment_t;
typedef struct xs_pool_s xs_pool_t;
typedef struct xs_stream_s xs_stream_t;
typedef struct xs_device_s xs_device_t;
typedef struct xs_chunk_s xs_chunk_t;

void xs_tree_insert(xs_tree_t *t, xs_block_t *b);
void xs_tree_remove(xs_tree_t *t, xs_block_t *b);
/* Smallest block with size >= size (lowest address among equals), or NULL. */
xs_block_t *xs_tree_lower_bound(const xs_tree_t *t, size_t size);
xs_block_t *xs_tree_first(const xs_tree_t *t);
xs_block_t *xs_tree_last(const xs_tree_t *t);
xs_block_t *xs_tree_next(const xs_block_t *b);
xs_block_t *xs_tree_prev(const xs_block_t *b);
/* Check colours, order and counts; returns 0 or a static message. */
const char *xs_tree_check(const xs_tree_t *t);

/* ---- blocks ------------------------------------------------------------- */

struct xs_block_s {
  uintptr_t addr;
  size_t size;            /* multiple of XS_ALIGN */
  size_t requested;       /* live: bytes the user asked for */
  xs_block_t *prev, *next; /* address neighbours in the segment, NULL at its ends */
  xs_segment_t *seg;
  xs_rbnode_t node;       /* free-set node (free blocks only) */
  uint64_t free_seq;      /* stream free sequence of the latest free folded in */
  uint64_t trace_id;      /* live: id in the trace file */
  xs_chunk_t *pin;        /* live: the large chunk it pins, charged to it (XS_PIN_DIV) */
  xseg_stream_t *uses;    /* live: other streams recorded with xseg_record_stream */
  uint32_t nuses, capuses;
  uint32_t events;        /* pending: events still to complete */
  uint8_t state;          /* XS_BLOCK_* */
  uint8_t mapped;         /* 1: every page under it is mapped (always for live/binned) */
  uint8_t split_counted;  /* free: counted in inactive_split (it had a neighbour) */
};

static inline uintptr_t xs_block_end(const xs_block_t *b) { return b->addr + b->size; }
static inline int xs_block_is_free(const xs_block_t *b) {
  return b != NULL && b->state == XS_BLOCK_FREE;
}

/* Block metadata comes from a per-device slab, never from the hot path's malloc. */
typedef struct xs_slab_s {
  xs_block_t *free_list;
  void **chunks;
  size_t nchunks, capchunks;
  size_t live;
} xs_slab_t;

/* Make sure n blocks can be taken without failing (0 or XSEG_ENOMEM). */
int xs_slab_reserve(xs_slab_t *s, size_t n);
xs_block_t *xs_block_new(xs_slab_t *s); /* NULL only if not reserved and out of memory */
void xs_block_delete(xs_slab_t *s, xs_block_t *b);
void xs_slab_destroy(xs_slab_t *s);

/* ---- chunks and segments ------------------------------------------------- */

struct xs_chunk_s {
  xs_handle_t h;
  size_t size;         /* bytes, multiple of the page size */
  xs_segment_t *seg;   /* where mapped; NULL while cached */
  uintptr_t addr;      /* mapped address */
  xs_chunk_t *next;    /* cache list */
  uint64_t created_ns; /* for the cache's age order */
  int moved;           /* unmapped from a hole: mapping it again is a remap */
};

struct xs_segment_s {
  xs_pool_t *pool;
  uintptr_t base;
  size_t size;
  xs_block_t *head;            /* lowest block */
  xs_segment_t *next, *prev;   /* in the pool */
  int binned;                  /* 1: binned segment */
  /* expandable */
  size_t page;                 /* mapping unit: the device granularity */
  size_t npages;
  xs_chunk_t **pages;          /* chunk mapped at each page, NULL if unmapped */
  size_t mapped;               /* bytes mapped */
  /* binned */
  int via_mem_alloc;           /* 1: cuMemAlloc; 0: one chunk mapped at base */
  xs_chunk_t *chunk;           /* the chunk when !via_mem_alloc */
  size_t live_bytes;           /* bytes of live and pending blocks */
  uint64_t last_free_ns;       /* gc: the oldest wholly free segments go first */
};

/* ---- pools and streams ---------------------------------------------------- */

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

/* ---- the pointer map: live address -> block ------------------------------ */

typedef struct xs_ptrmap_s {
  uintptr_t *keys; /* 0 = empty */
  xs_block_t **vals;
  size_t mask;     /* capacity - 1 */
  size_t count;
} xs_ptrmap_t;

int xs_ptrmap_init(xs_ptrmap_t *m, size_t cap);
void xs_ptrmap_destroy(xs_ptrmap_t *m);
int xs_ptrmap_put(xs_ptrmap_t *m, uintptr_t key, xs_block_t *b); /* 0 or XSEG_ENOMEM */
xs_block_t *xs_ptrmap_get(const xs_ptrmap_t *m, uintptr_t key);
xs_block_t *xs_ptrmap_take(xs_ptrmap_t *m, uintptr_t key);

/* ---- physical layer (vmm/phys.c): the one caller of the backend ------------ */

/* Counters kept by phys.c for the statistics. */
typedef struct xs_phys_s {
  xs_backend_t *be;
  int dev;
  size_t gran;          /* device granularity */
  size_t total;         /* device memory */
  size_t limit;         /* bytes xseg may hold (fraction / max_memory caps) */
  size_t held;          /* bytes of chunks and mem_alloc blocks held */
  int vmm;
  int peers[64];        /* devices given access besides dev */
  int npeers;
} xs_phys_t;

int xs_phys_init(xs_device_t *d, xs_backend_t *be, int dev, const xs_config_t *cfg);
int xs_phys_reserve(xs_device_t *d, size_t size, uintptr_t *addr);
int xs_phys_unreserve(xs_device_t *d, uintptr_t addr, size_t size);
/* Create a chunk of `size` bytes; XSEG_ENOMEM if the device or the limit
 * refuses it. */
int xs_phys_create(xs_device_t *d, size_t size, xs_chunk_t **out);
int xs_phys_release(xs_device_t *d, xs_chunk_t *c);
/* Map a chunk at addr and give the device (and its peers) access.  On
 * failure the chunk is unmapped again, unless that too is refused: then
 * c->seg stays set (the chunk is still mapped) and the caller must keep it
 * aside (xs_seg_unstick retries). */
int xs_phys_map(xs_device_t *d, xs_segment_t *seg, xs_chunk_t *c, uintptr_t addr);
int xs_phys_unmap(xs_device_t *d, xs_chunk_t *c);
int xs_phys_set_access(xs_device_t *d, uintptr_t addr, size_t size);
int xs_phys_mem_alloc(xs_device_t *d, size_t size, uintptr_t *addr);
int xs_phys_mem_free(xs_device_t *d, uintptr_t addr, size_t size);
int xs_phys_mem_info(xs_device_t *d, size_t *free_bytes, size_t *total);
int xs_phys_event_get(xs_device_t *d, xs_event_t *ev); /* from the device's event pool */
void xs_phys_event_put(xs_device_t *d, xs_event_t ev);
int xs_phys_event_record(xs_device_t *d, xs_event_t ev, xseg_stream_t s);
int xs_phys_event_query(xs_device_t *d, xs_event_t ev); /* 0, XSEG_ENOTREADY, or error */
int xs_phys_event_sync(xs_device_t *d, xs_event_t ev);
void xs_phys_destroy_events(xs_device_t *d);

/* ---- the device allocator ---------------------------------------------------- */

struct xs_device_s {
  pthread_mutex_t lock;        /* the one lock of this device; taken in api.c only */
  int id;
  int mode;                    /* XS_MODE_* */
  int ready;                   /* initialised */
  const xs_config_t *cfg;
  xs_phys_t phys;
  xs_stream_t **streams;
  size_t nstreams, capstreams;
  xs_stream_t *last_stream;    /* one-entry cache of the stream lookup */
  xs_ptrmap_t live;
  xs_slab_t slab;
  xs_pending_t *pending;
  size_t npending, cappending;
  xs_event_t *events;          /* idle events for reuse */
  size_t nevents, capevents;
  xs_chunk_t *cache;           /* unmapped chunks held */
  xs_chunk_t *stuck;           /* mapped without access, the undo unmap refused: retried */
  size_t cache_bytes;
  size_t cache_count;
  size_t free_mapped;          /* bytes in mapped free blocks (all pools) */
  size_t pinned;               /* bytes of pinned large chunks (XS_PIN_DIV) */
  int64_t pack_base[XS_NCLASS]; /* allocated_bytes[class].allocated at the last restart (XS_PACK_DIV) */
  int trim_wanted;             /* a trim left blocks behind a fence: retry when it completes */
  size_t trim_floor;           /* free_mapped after the last trim: retry only above it */
  size_t large_page;           /* page_size_mb in bytes (0: adaptive) */
  int roundup;                 /* roundup_power2_divisions is set */
  size_t max_split;            /* max_split_size_mb in effect (auto resolved) */
  xs_stats_t stats;
};

/* alloc.c */
int xs_device_init(xs_device_t *d, xs_backend_t *be, int id, const xs_config_t *cfg);
void xs_device_destroy(xs_device_t *d);
void *xs_malloc(xs_device_t *d, size_t size, xseg_stream_t s);
int xs_free(xs_device_t *d, xs_block_t *b);
xs_block_t *xs_find_live(xs_device_t *d, uintptr_t p);
int xs_diagnose_bad_pointer(xs_device_t *d, uintptr_t p, const char *what);
int xs_record_stream(xs_device_t *d, xs_block_t *b, xseg_stream_t s);
int xs_empty_cache(xs_device_t *d);
void xs_process_events(xs_device_t *d);
size_t xs_round_size(const xs_device_t *d, size_t size); /* 0 on overflow */

/* block.c: split, merge and free sets shared by both modes */
void xs_free_insert(xs_device_t *d, xs_block_t *b);
void xs_free_remove(xs_device_t *d, xs_block_t *b);
/* Make [addr, addr+size) of free mapped block f a block of its own (split
 * off what lies before and, within the split rules, after).  Returns it,
 * removed from the free set. */
xs_block_t *xs_carve(xs_device_t *d, xs_block_t *f, uintptr_t addr, size_t size);
/* Split block b (not in a free set) at addr; b keeps [b->addr, addr) and
 * the returned block, with b's state, gets the rest.  Slab reserved. */
xs_block_t *xs_split_at(xs_device_t *d, xs_block_t *b, uintptr_t addr);
/* Merge free block b with free neighbours of the same mapping state and
 * insert the result into its free set; returns the merged block. */
xs_block_t *xs_merge_insert(xs_device_t *d, xs_block_t *b);
/* Best fit in the pool under the split rules (max_split_size), or NULL. */
xs_block_t *xs_pool_fit(xs_device_t *d, xs_pool_t *p, size_t size);
int xs_should_split(const xs_device_t *d, const xs_block_t *b, size_t size);
/* A pool's list of segments. */
void xs_pool_add_segment(xs_pool_t *p, xs_segment_t *seg);
void xs_pool_remove_segment(xs_pool_t *p, xs_segment_t *seg);

/* expandable.c */
/* Map what a request of `size` needs; the block to carve holds [*addr,
 * *addr + *take), where *take >= size may include the rest of the last page. */
int xs_exp_grow(xs_device_t *d, xs_pool_t *p, size_t size, xs_block_t **out, uintptr_t *addr, size_t *take);
/* A chunk of more than one page, wholly inside free block f, that placing
 * [addr, addr+size) would cover only in part, or NULL.  Such a chunk is
 * converted first (xs_exp_convert), so that every free page can be
 * unmapped; see docs/design.md. */
xs_chunk_t *xs_exp_pins_big(const xs_device_t *d, const xs_block_t *f, uintptr_t addr, size_t size);
/* Is memory tight (less than 1/XS_PLENTIFUL of the limit left)? */
int xs_exp_tight(const xs_device_t *d);
/* Where to place `size` bytes in the free range [f0, f1), whose ends, where
 * not page-aligned, share their pages with live data: the start with the
 * least expected stranded memory (docs/design.md, "Placement").  Looks at
 * both ends of the range, or (both 0) only its low end.  pack: the
 * neighbours are taken to live to the end (xs_exp_packing). */
uintptr_t xs_exp_place(size_t page, uintptr_t f0, uintptr_t f1, size_t size, int both, int pack);
/* Does pool class cls pack (XS_PACK_DIV)? */
int xs_exp_packing(const xs_device_t *d, int cls);
/* Re-make chunk c (wholly inside free block f) as page-sized chunks, so
 * that a block placed at [a, b) covers its chunks wholly.  Waits for
 * the GPU to be done with c if it is not.  *changed says whether the
 * blocks changed (the chunk was unmapped), even when the conversion then
 * failed. */
int xs_exp_convert(xs_device_t *d, xs_block_t *f, xs_chunk_t *c, uintptr_t a, uintptr_t b, int *changed);
size_t xs_exp_trim(xs_device_t *d, size_t target, int wait); /* bytes released */
int xs_exp_empty(xs_device_t *d);
void xs_exp_destroy_pool(xs_device_t *d, xs_pool_t *p);

/* segment.c: pages and chunks of expandable segments */
int xs_seg_create(xs_device_t *d, xs_pool_t *p, size_t min_size, xs_segment_t **out);
void xs_seg_destroy(xs_device_t *d, xs_segment_t *seg);
/* Map pages [a, b) (page aligned, all unmapped) with chunks from the cache
 * or new ones of at most max_chunk bytes (0: the sizing policy decides); on
 * failure keeps what it mapped and sets *done to the end of the mapped
 * prefix. */
int xs_seg_map(xs_device_t *d, xs_segment_t *seg, uintptr_t a, uintptr_t b, size_t max_chunk,
               uintptr_t *done);
/* The first chunk lying wholly inside [a, b), or NULL. */
xs_chunk_t *xs_seg_chunk_within(const xs_segment_t *seg, uintptr_t a, uintptr_t b);
/* Unmap chunk c of seg into the device's cache. */
int xs_seg_unmap_chunk(xs_device_t *d, xs_segment_t *seg, xs_chunk_t *c);
int xs_cache_release(xs_device_t *d, size_t keep); /* release cached chunks down to keep bytes */
int xs_cache_release_chunk(xs_device_t *d, xs_chunk_t *c); /* release one cached chunk */
xs_segment_t *xs_seg_of(xs_device_t *d, uintptr_t p); /* segment containing p, or NULL */
int xs_seg_unstick(xs_device_t *d); /* retry unmapping stuck chunks; 0 when none is left */

/* binned.c */
int xs_bin_grow(xs_device_t *d, xs_pool_t *p, size_t size, xs_block_t **out);
/* Free wholly free segments until `target` bytes are freed; oldest first
 * (garbage_collection_threshold) or largest first.  Returns bytes freed. */
size_t xs_bin_release(xs_device_t *d, size_t target, int oldest_first);
void xs_bin_destroy_pool(xs_device_t *d, xs_pool_t *p);

/* fences: is the GPU finished with frees up to free_seq on stream st? */
int xs_stream_safe(xs_device_t *d, xs_stream_t *st, uint64_t free_seq, int wait);

/* stats.c: an snprintf-like text builder (len counts what the full text
 * needs; at most cap bytes are written), shared by every JSON writer. */
typedef struct xs_sbuf_s {
  char *p;
  size_t len, cap;
} xs_sbuf_t;
void xs_sbuf_put(xs_sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t xs_sbuf_finish(xs_sbuf_t *b); /* NUL-terminates; returns len */

/* stats.c */
void xs_stats_oom_message(xs_device_t *d, size_t size, size_t rounded, char *buf, size_t len);
size_t xs_stats_json_device(xs_device_t *d, const char *backend, char *buf, size_t len);
void xs_stats_summary(xs_device_t *d, const char *backend, FILE *out);
size_t xs_snapshot_device(xs_device_t *d, char *buf, size_t len);

/* trace.c */
int xs_trace_open(const char *path); /* 0 or an error with message */
uint64_t xs_trace_next_id(void);
void xs_trace_alloc(uint64_t id, size_t bytes, int dev, xseg_stream_t s);
void xs_trace_free(uint64_t id, int dev);
void xs_trace_flush(void);
void xs_trace_close(void);

/* check.c */
int xs_check_device(xs_device_t *d);

/* api.c: the backend in use (tests reach the host backend's controls) */
xs_backend_t *xs_current_backend(void);
xs_device_t *xs_device_peek(int dev); /* NULL if not initialised */

#endif /* XSEG_POOL_INTERNAL_H */
