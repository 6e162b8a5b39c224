/* vmm/vmm.h: physical memory and address space for one device - the
 * layer under the allocator, and a leaf: it knows nothing of blocks, pools
 * or streams.
 *
 *   xs_vmm_t    one device's physical layer (vmm/phys.c): the backend, the
 *               device's granularity and memory, the cap on what may be
 *               held, the peers given access, the cache of unmapped
 *               handles, idle events, and the counters of every driver call.
 *   xs_chunk_t  a physical handle (cuMemCreate) of a whole number of pages,
 *               mapped into one range or cached unmapped.
 *   xs_vseg_t   a range of device addresses (vmm/segment.c): either a
 *               reservation whose pages map and unmap on demand, with a page
 *               table (page -> chunk), or a fixed allocation (cuMemAlloc) that
 *               is wholly mapped for its life.  Each range carries a tag
 *               (0 or 1, the allocator's pool class) under which its mapped
 *               bytes are counted.
 *
 * Every function returns 0 or an XSEG_E* code.  On failure the calling
 * thread's vmm message (xs_vmm_error) names the call, the address, the size
 * and the backend's own error text; the caller turns it into the
 * user-facing error.  Callers hold the device's lock: nothing here locks.
 */
#ifndef XSEG_VMM_VMM_H
#define XSEG_VMM_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "common.h"

#define XS_VMM_MAX_PEERS 64

/* ---- counters, declared once (STYLE.md item 5) ------------------------------ */

/* By range tag: .all and one per tag, as torch's pooled statistics. */
#define XS_VMM_POOLED(X)                                                                     \
  X(segment, "physical allocations backing the pool: mapped chunks or binned segments")      \
  X(reserved_bytes, "bytes of device memory mapped into the pool's segments")

#define XS_VMM_GAUGES(X)                                                                     \
  X(held_bytes, "device memory held: mapped plus cached chunks (binned: segments)")          \
  X(mapped_bytes, "bytes mapped into segments")                                              \
  X(reserved_address_bytes, "virtual address space reserved")                                \
  X(handles_live, "physical handles created and not released")                              \
  X(handles_cached, "physical handles held unmapped, ready to map")                          \
  X(cached_handle_bytes, "bytes of cached handles")

#define XS_VMM_COUNTERS(X)                                                                   \
  X(num_device_alloc, "physical allocations (cuMemCreate or cuMemAlloc)")                    \
  X(num_device_free, "physical releases (cuMemRelease or cuMemFree)")                        \
  X(created_bytes, "bytes of those physical allocations")                                    \
  X(released_bytes, "bytes of those physical releases")                                      \
  X(num_create_refused, "creates (cuMemCreate or cuMemAlloc) the driver refused")            \
  X(num_map_refused, "maps and set-access calls the driver refused")                         \
  X(num_looks, "free-memory queries (cuMemGetInfo) to learn what others hold")               \
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
  X(time_look_ns, "time in those free-memory queries")                                       \
  X(num_create_waits, "creates after a release that waited for the driver to scrub memory")  \
  X(time_paced_ns, "time slept before creates, for the driver to scrub released memory")     \
  X(remapped_bytes, "bytes of handles unmapped from holes and mapped elsewhere (stitched)")  \
  X(num_remaps, "handles moved from one address to another")                                 \
  X(num_coalesces, "at the cap, one handle made for a gap instead of mapping several small cached ones")

typedef struct xs_vmm_stats_s {
#define XS_VMM_DECL_POOLED(name, help) xs_stat_t name[XS_STAT_NTYPES];
  XS_VMM_POOLED(XS_VMM_DECL_POOLED)
#undef XS_VMM_DECL_POOLED
#define XS_VMM_DECL_GAUGE(name, help) xs_gauge_t name;
  XS_VMM_GAUGES(XS_VMM_DECL_GAUGE)
#undef XS_VMM_DECL_GAUGE
#define XS_VMM_DECL_COUNTER(name, help) uint64_t name;
  XS_VMM_COUNTERS(XS_VMM_DECL_COUNTER)
#undef XS_VMM_DECL_COUNTER
} xs_vmm_stats_t;

/* ---- types ------------------------------------------------------------------- */

typedef struct xs_vseg_s xs_vseg_t;
typedef struct xs_chunk_s xs_chunk_t;

struct xs_chunk_s {
  xs_handle_t h;
  size_t size;         /* bytes, a multiple of the page size */
  xs_vseg_t *vs;       /* the range it is mapped in; NULL while cached */
  uintptr_t addr;      /* mapped address */
  xs_chunk_t *next;    /* cache or stuck list */
  uint64_t created_ns; /* when it was created */
  int moved;           /* unmapped from a hole: mapping it again is a remap */
  int fd;              /* exported as a POSIX descriptor (xs_vmm_export), else -1 */
};

/* One page of an on-demand range: the chunk mapped there, and that chunk's
 * place (its first page and page count) kept beside it, so that searches
 * over many chunks read the table and never the chunks themselves. */
typedef struct xs_pte_s {
  xs_chunk_t *chunk; /* NULL if unmapped */
  uint32_t first;    /* the chunk's first page */
  uint32_t npages;   /* its pages; 0 if unmapped */
} xs_pte_t;

/* Where a chunk lies: its address and size; size 0 where nothing is mapped. */
typedef struct xs_extent_s {
  uintptr_t addr;
  size_t size;
} xs_extent_t;

struct xs_vseg_s {
  uintptr_t base;
  size_t size;
  size_t page;        /* mapping unit: the device granularity */
  unsigned shift;     /* log2(page): page-table lookups shift, never divide */
  size_t npages;      /* on-demand ranges: entries of the page table */
  xs_pte_t *pages;    /* on-demand ranges: each page's entry (at most 2^32 pages) */
  size_t mapped;      /* bytes mapped (a fixed range: its size) */
  int tag;            /* 0 or 1: the class its bytes are counted under */
  int fixed;          /* 1: one cuMemAlloc, mapped for its life */
};

typedef struct xs_vmm_s {
  xs_backend_t *be;
  int dev;
  int vmm;                       /* the device supports reserve/create/map */
  size_t gran;                   /* device granularity ("page") */
  size_t total;                  /* device memory */
  size_t limit;                  /* bytes that may be held (fraction / max_memory caps) */
  size_t held;                   /* bytes of chunks and fixed ranges held */
  size_t others;                 /* device memory held outside xseg at the last look (xs_vmm_look) */
  unsigned unlooked;             /* creates since that look */
  size_t unseen;                 /* free memory the driver refused to give though its free figure showed it */
  uint64_t scrub_end_ns;         /* when the driver is expected to have scrubbed what was released */
  uint64_t scrub_ns_per_mib;     /* its pace, learned (XS_VMM_SCRUB_NS_PER_MIB at first) */
  uint64_t released_ns;          /* when the last release ended */
  size_t scrubbing;              /* bytes released (of handles over a page) before scrub_end_ns */
  int pacing;                    /* creates after releases were seen waiting: sleep out the scrub first */
  unsigned paced;                /* paced creates since the last unpaced probe */
  unsigned probe_every;          /* paced creates between probes (XS_VMM_PACE_PROBE .. _MAX) */
  char name[96];                 /* the device's name */
  int peers[XS_VMM_MAX_PEERS];   /* devices given access besides dev */
  int npeers;
  uint64_t layout;               /* changes whenever a chunk is mapped or unmapped in any range */
  xs_chunk_t *cache;             /* unmapped chunks held, ready to map */
  size_t cache_bytes, cache_count;
  xs_chunk_t *stuck;             /* mapped without access, the undo unmap refused: retried */
  xs_event_t *events;            /* idle events for reuse */
  size_t nevents, capevents;
  xs_vmm_stats_t st;
} xs_vmm_t;

/* ---- errors -------------------------------------------------------------------- */

/* The calling thread's message for the last failed vmm call ("" if none). */
const char *xs_vmm_error(void);
/* Set the calling thread's vmm message; returns code. */
int xs_vmm_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the device (phys.c) ----------------------------------------------------------- */

/* Devices the backend sees. */
int xs_vmm_device_count(xs_backend_t *be, int *n);
/* Query device dev and set the cap: min(fraction x memory, max_bytes when
 * non-zero), rounded down to the granularity.  peer_access: give every
 * device that can reach this one access to its pages. */
int xs_vmm_init(xs_vmm_t *v, xs_backend_t *be, int dev, double fraction, size_t max_bytes, int peer_access);
/* Release the cache, stuck chunks and events.  Ranges must be gone. */
void xs_vmm_fini(xs_vmm_t *v);
/* Set the cap again (xseg_set_memory_fraction); what is held stays. */
void xs_vmm_set_limit(xs_vmm_t *v, double fraction, size_t max_bytes);
/* Look at the device's free memory again: what other processes, the
 * driver's context and allocations outside xseg hold (xs_vmm_t.others).
 * Done at init, after every XS_VMM_LOOK_EVERY creates and after every
 * refused one, so that the allocator's sense of how much memory is left
 * follows the device, not only its own cap; a failed query keeps the last
 * look.  (cuMemGetInfo costs 5-6.5 us on an H100, a quarter of a create:
 * benchmarks/results/gpu-h100-meminfo.txt.) */
#define XS_VMM_LOOK_EVERY 8
void xs_vmm_look(xs_vmm_t *v);
/* The device's memory less what others hold and what the driver refused
 * though its free figure showed it (unseen). */
static inline size_t xs_vmm_device_room(const xs_vmm_t *v) {
  size_t away = v->others + v->unseen;
  return v->total > away ? v->total - away : 0;
}
/* The device room xseg does not hold yet. */
static inline size_t xs_vmm_device_free(const xs_vmm_t *v) {
  size_t dev = xs_vmm_device_room(v);
  return dev > v->held ? dev - v->held : 0;
}
/* The bytes xseg could hold now: its cap, or the device room, if less. */
static inline size_t xs_vmm_room(const xs_vmm_t *v) {
  size_t dev = xs_vmm_device_room(v);
  return dev < v->limit ? dev : v->limit;
}
/* Bytes that may still be created: under the cap and within the device's
 * free memory as last seen. */
static inline size_t xs_vmm_headroom(const xs_vmm_t *v) {
  size_t room = xs_vmm_room(v);
  return v->held < room ? room - v->held : 0;
}
/* Pacing creates after releases (vmm/phys.c).  The driver scrubs the
 * memory a release gives back before a create may have it, and a create
 * that needs such memory waits about 7 ms on an H100 (driver 580), though
 * the scrub itself takes under 0.1 ms for 64 MiB and 1-2 ms for 512 MiB
 * (benchmarks/results/gpu-h100-driver-probe-release.txt).  On a device
 * nearly full (less than 1/XS_VMM_PACE_ROOM_DIV of it free), once a create
 * within XS_VMM_PACE_WINDOW_NS of a release took XS_VMM_WAITED_NS longer
 * than its size explains, xseg sleeps out its estimate of the scrub
 * before each create (the estimate's end at most XS_VMM_PACE_MAX_NS after
 * the last release).  The estimate, in ns per MiB released, grows by half
 * after a paced create that still waited and shrinks by 1/256 after one
 * that did not; every XS_VMM_PACE_PROBE-th paced create goes unpaced, and
 * pacing stops when that one does not wait; each probe that still waited
 * doubles the interval (up to XS_VMM_PACE_PROBE_MAX), since it cost the
 * driver's whole wait.  Nothing is paced while the device is not nearly
 * full (memory others let go ends the sleeps at the next look, not the
 * next probe).  Releasing 2 MiB handles did not make a create wait, so
 * they are not counted in the scrub.  A single page is given at once where
 * the device has free memory beside what it is scrubbing, and is paced
 * only where it has none: on an H100 under a filler, the first create
 * after a release onto a device left with no free memory waited 4-7 ms,
 * a 2 MiB one too (218 of the 346 creates that waited in seven replays
 * at 1.02 of the peak, 1.4 of their 2.2 s of waits;
 * benchmarks/results/gpu-h100-page-waits.txt). */
#define XS_VMM_SCRUB_NS_PER_MIB 4000
#define XS_VMM_WAITED_NS 1500000
#define XS_VMM_CREATE_NS_PER_MIB 3000 /* a large create is slow by itself: about 3 us per MiB */
#define XS_VMM_PACE_MAX_NS 5000000
#define XS_VMM_PACE_PROBE 16
#define XS_VMM_PACE_PROBE_MAX 256
#define XS_VMM_PACE_ROOM_DIV 2
#define XS_VMM_PACE_WINDOW_NS 20000000 /* a create this soon after a release may need its memory */
/* While pacing, what is left of the scrub a create larger than a page
 * would sleep out (0: none).  A single page is given at once beside free
 * memory (and where there is none, only the first waits out the scrub), so
 * a gap of n pages costs less as pages while n x XS_VMM_PAGE_NS (a page's
 * create, map and set access at the limit, about 58 us on an H100) is
 * less. */
uint64_t xs_vmm_scrub_left(xs_vmm_t *v);
#define XS_VMM_PAGE_NS 60000

/* Forget the memory the driver refused though its free figure showed it
 * (xs_vmm_t.unseen): 1 if there was any, so that the caller asks again.
 * Done before an allocation fails for want of memory, and when the whole
 * cache goes back to the driver (xs_vmm_cache_release with keep 0). */
int xs_vmm_forget_unseen(xs_vmm_t *v);
/* A new start (xseg_empty_cache with nothing live, pool/alloc.c): the
 * device is judged afresh, as at first use.  What others hold is looked
 * at again, and pacing starts off, with the probe interval of a first
 * episode: the next workload turns it on only if its own creates wait.
 * Left on, pacing that the last workload turned on made the next
 * workload's handles otherwise than a fresh process would (pages in place
 * of chunks while it slept), and through PyTorch under a filler,
 * replays that followed a replay that fitted failed at budgets where a
 * fresh process fits (docs/benchmarks.md, "Pacing between workloads").
 * The pace learned (ns per MiB) and the scrub under way are kept: they
 * are the driver's. */
void xs_vmm_new_start(xs_vmm_t *v);
uint64_t xs_vmm_now(const xs_vmm_t *v);
int xs_vmm_mem_info(xs_vmm_t *v, size_t *free_bytes, size_t *total);
/* Can `peer` reach this device's memory?  0 and *can set, or an error. */
int xs_vmm_can_access_peer(xs_vmm_t *v, int peer, int *can);
/* Give peer access to mappings made from now on (it is not re-applied to
 * existing ones: xs_vseg_set_access does that range by range). */
void xs_vmm_add_peer(xs_vmm_t *v, int peer);

/* Address space and fixed allocations (segment.c builds ranges on them;
 * mem_alloc fails with XSEG_ENOMEM past the cap). */
int xs_vmm_reserve(xs_vmm_t *v, size_t size, uintptr_t *addr);
int xs_vmm_unreserve(xs_vmm_t *v, uintptr_t addr, size_t size);
int xs_vmm_mem_alloc(xs_vmm_t *v, size_t size, int tag, uintptr_t *addr);
int xs_vmm_mem_free(xs_vmm_t *v, uintptr_t addr, size_t size, int tag);

/* Physical handles.  Create fails with XSEG_ENOMEM past the cap. */
int xs_vmm_create(xs_vmm_t *v, size_t size, xs_chunk_t **out);
int xs_vmm_release(xs_vmm_t *v, xs_chunk_t *c);
/* Map chunk c at addr of range vs and give the device and its peers
 * access.  On failure the chunk is unmapped again, unless that too is
 * refused: then c->vs stays set (the chunk is still mapped) and the caller
 * must keep it aside (xs_vmm_unstick retries). */
int xs_vmm_map(xs_vmm_t *v, xs_vseg_t *vs, xs_chunk_t *c, uintptr_t addr);
int xs_vmm_unmap(xs_vmm_t *v, xs_chunk_t *c);
int xs_vmm_set_access(xs_vmm_t *v, uintptr_t addr, size_t size);

/* Sharing with other processes.  Export gives chunk c's handle as a
 * descriptor, made once and kept until the chunk is released, so the same
 * memory always has the same descriptor.  Import maps descriptors of
 * another process's chunks (fds[i], of sizes[i] bytes, at offs[i] of a
 * range of span bytes) into a new range of this device and gives it
 * access; *base and handles[] are what unimport needs.  Neither counts as
 * memory this allocator holds. */
int xs_vmm_export(xs_vmm_t *v, xs_chunk_t *c, int *fd);
int xs_vmm_import(xs_vmm_t *v, const int *fds, const size_t *offs, const size_t *sizes, int n, size_t span,
                  uintptr_t *base, xs_handle_t *handles);
void xs_vmm_unimport(xs_vmm_t *v, uintptr_t base, size_t span, const size_t *offs, const size_t *sizes,
                     const xs_handle_t *handles, int n);

/* Events, from the device's pool of idle ones. */
int xs_vmm_event_get(xs_vmm_t *v, xs_event_t *ev);
void xs_vmm_event_put(xs_vmm_t *v, xs_event_t ev);
int xs_vmm_event_record(xs_vmm_t *v, xs_event_t ev, xseg_stream_t s);
int xs_vmm_event_query(xs_vmm_t *v, xs_event_t ev); /* 0, XSEG_ENOTREADY, or an error */
int xs_vmm_event_sync(xs_vmm_t *v, xs_event_t ev);

/* Reset the .peak of every gauge and pooled counter to its current value. */
void xs_vmm_reset_peaks(xs_vmm_stats_t *s);
/* Set the .allocated / .freed of pooled counters, and every counter, to 0. */
void xs_vmm_reset_accumulated(xs_vmm_stats_t *s);

/* ---- ranges and the chunk cache (segment.c) ---------------------------------------------- */

/* At the cap, a gap that the cache would fill with this many chunks or
 * more gets one new handle instead, made of the memory of those released
 * (segment.c: coalesce).  From three on it makes fewer driver calls; from
 * three to seven it also left rmm_uniform needing 1.0100-1.0103 of its
 * peak at the smallest budget under --lag 16 (1.0081 without), from eight
 * none moved by more than 0.001 (docs/benchmarks.md, "Coalescing at the
 * cap"). */
#define XS_VMM_COALESCE 8

/* Reserve an on-demand range of at least min_size bytes (the whole device,
 * so that one range can hold all of it), with an empty page table. */
int xs_vseg_reserve(xs_vmm_t *v, xs_vseg_t *vs, size_t min_size, int tag);
/* Allocate a fixed range of size bytes (a multiple of the granularity). */
int xs_vseg_alloc_fixed(xs_vmm_t *v, xs_vseg_t *vs, size_t size, int tag);
/* Give a range back: an on-demand one must have nothing mapped.  A failed
 * release of a fixed range keeps it (XSEG_E* returned). */
int xs_vseg_free(xs_vmm_t *v, xs_vseg_t *vs);
/* Map pages [a, b) of an on-demand range (page aligned, all unmapped) with
 * chunks from the cache or new ones.  A cached chunk holds at most
 * max_chunk bytes (0: any that fits); a new one at most new_max bytes too
 * (0: the gap), and within the cap's headroom.  On failure keeps what it
 * mapped and sets *done to the end of the mapped prefix. */
int xs_vseg_map(xs_vmm_t *v, xs_vseg_t *vs, uintptr_t a, uintptr_t b, size_t max_chunk, size_t new_max,
                uintptr_t *done);
/* The chunk mapped at address p of an on-demand range, or NULL. */
static inline xs_chunk_t *xs_vseg_chunk_at(const xs_vseg_t *vs, uintptr_t p) {
  return vs->pages[(p - vs->base) >> vs->shift].chunk;
}
/* Where the chunk mapped at address p lies, from the page table alone. */
static inline xs_extent_t xs_vseg_extent_at(const xs_vseg_t *vs, uintptr_t p) {
  const xs_pte_t *e = &vs->pages[(p - vs->base) >> vs->shift];
  return (xs_extent_t){vs->base + ((uintptr_t)e->first << vs->shift), (size_t)e->npages << vs->shift};
}
/* The first chunk lying wholly inside [a, b), or NULL. */
xs_chunk_t *xs_vseg_chunk_within(const xs_vseg_t *vs, uintptr_t a, uintptr_t b);
/* Unmap chunk c of vs into the cache. */
int xs_vseg_unmap_chunk(xs_vmm_t *v, xs_vseg_t *vs, xs_chunk_t *c);
/* Give the device and its peers access to every chunk mapped in vs. */
int xs_vseg_set_access(xs_vmm_t *v, const xs_vseg_t *vs);

/* Release cached chunks down to `keep` bytes (a failed release keeps the
 * chunk cached); the first error, or 0. */
int xs_vmm_cache_release(xs_vmm_t *v, size_t keep);
/* Release one cached chunk. */
int xs_vmm_cache_release_chunk(xs_vmm_t *v, xs_chunk_t *c);
/* Retry unmapping stuck chunks; 0 when none is left. */
int xs_vmm_unstick(xs_vmm_t *v);

#endif /* XSEG_VMM_VMM_H */
