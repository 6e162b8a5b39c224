/* vmm/segment.c: expandable segments and the physical chunks behind them.
 *
 * A segment is one reservation of virtual addresses (sized from the
 * device's memory) whose pages - units of the device granularity - are
 * mapped on demand.  A page table maps each page to the chunk (physical
 * handle) mapped there.  A chunk covers one or more pages and is mapped and
 * unmapped whole, as the driver requires (cuMemMap takes whole handles).
 *
 * Chunk sizes are the core trade-off (docs/design.md, "Handle sizing"):
 * every handle costs a create, a map and a set-access call whatever its
 * size, so growth wants few large handles; but only a wholly free handle
 * can be unmapped and moved, so remapping wants small ones.  The policy
 * here: small-pool segments use one page per chunk; large-pool segments
 * map each gap a request needs as one chunk (fast growth: one handle per
 * growth, as cudaMalloc), or as page_size_mb chunks when configured; under
 * memory pressure chunks shrink to the headroom and to single pages.
 *
 * Unmapped chunks go to the device's cache, from which later mappings take
 * them first (no release/create round trip); xs_cache_release gives them
 * back to the driver.  Callers hold the device lock; blocks are not this
 * file's business (pool/expandable.c keeps them in step).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

int xs_seg_create(xs_device_t *d, xs_pool_t *p, size_t min_size, xs_segment_t **out) {
  size_t page = d->phys.gran;
  /* Address space is cheap: reserve the whole device, so that a pool can
   * hold all of it, and more if one request asks for more. */
  size_t size = round_up(d->phys.total > min_size ? d->phys.total : min_size, page);
  if (size < min_size) return xs_error(XSEG_ENOMEM, "xseg: request of %zu bytes overflows", min_size);
  xs_segment_t *seg = calloc(1, sizeof *seg);
  xs_block_t *b = xs_block_new(&d->slab);
  if (!seg || !b) {
    free(seg);
    if (b) xs_block_delete(&d->slab, b);
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  }
  seg->page = page;
  seg->npages = size / page;
  /* calloc of a large table is lazily committed by the OS: untouched pages
   * of the table cost nothing. */
  seg->pages = calloc(seg->npages, sizeof *seg->pages);
  if (!seg->pages) {
    free(seg);
    xs_block_delete(&d->slab, b);
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory for a page table of %zu pages", size / page);
  }
  int rc = xs_phys_reserve(d, size, &seg->base);
  if (rc != 0) {
    free(seg->pages);
    free(seg);
    xs_block_delete(&d->slab, b);
    return rc;
  }
  seg->size = size;
  xs_pool_add_segment(p, seg);
  /* One unmapped free block covers the whole segment. */
  b->addr = seg->base;
  b->size = size;
  b->seg = seg;
  b->mapped = 0;
  seg->head = b;
  xs_free_insert(d, b);
  *out = seg;
  return 0;
}

void xs_seg_destroy(xs_device_t *d, xs_segment_t *seg) {
  xs_pool_t *p = seg->pool;
  xs_assert(seg->mapped == 0 && seg->head && !seg->head->next && !seg->head->mapped);
  xs_free_remove(d, seg->head);
  xs_block_delete(&d->slab, seg->head);
  xs_phys_unreserve(d, seg->base, seg->size); /* a failure leaves the range reserved, nothing worse */
  xs_pool_remove_segment(p, seg);
  free(seg->pages);
  free(seg);
}

/* ---- the chunk cache ------------------------------------------------------------- */

static void cache_put(xs_device_t *d, xs_chunk_t *c) {
  c->next = d->cache;
  d->cache = c;
  d->cache_bytes += c->size;
  d->cache_count++;
  xs_gauge_add(&d->stats.handles_cached, 1);
  xs_gauge_add(&d->stats.cached_handle_bytes, (int64_t)c->size);
}

static void cache_unlink(xs_device_t *d, xs_chunk_t **link) {
  xs_chunk_t *c = *link;
  *link = c->next;
  c->next = NULL;
  d->cache_bytes -= c->size;
  d->cache_count--;
  xs_gauge_add(&d->stats.handles_cached, -1);
  xs_gauge_add(&d->stats.cached_handle_bytes, -(int64_t)c->size);
}

/* The largest cached chunk of at most `max` bytes, taken out of the cache. */
static xs_chunk_t *cache_take(xs_device_t *d, size_t max) {
  xs_chunk_t **best = NULL;
  for (xs_chunk_t **l = &d->cache; *l; l = &(*l)->next) {
    if ((*l)->size <= max && (!best || (*l)->size > (*best)->size)) best = l;
  }
  if (!best) return NULL;
  xs_chunk_t *c = *best;
  cache_unlink(d, best);
  return c;
}

/* Release cached chunks larger than `larger_than` until at most `keep`
 * bytes stay cached.  A chunk whose release fails stays cached (nothing is
 * lost; a later call may succeed).  Returns the bytes released; *rc gets
 * the first error. */
static size_t cache_release_if(xs_device_t *d, size_t keep, size_t larger_than, int *rc) {
  size_t freed = 0;
  xs_chunk_t *kept = NULL;
  xs_chunk_t **l = &d->cache;
  while (*l && d->cache_bytes > keep) {
    xs_chunk_t *c = *l;
    if (c->size <= larger_than) {
      l = &c->next;
      continue;
    }
    cache_unlink(d, l);
    size_t size = c->size;
    int r = xs_phys_release(d, c);
    if (r == 0) {
      freed += size;
      continue;
    }
    if (*rc == 0) *rc = r;
    c->next = kept;
    kept = c;
  }
  while (kept) {
    xs_chunk_t *c = kept;
    kept = c->next;
    cache_put(d, c);
  }
  return freed;
}

int xs_cache_release_chunk(xs_device_t *d, xs_chunk_t *c) {
  for (xs_chunk_t **l = &d->cache; *l; l = &(*l)->next) {
    if (*l != c) continue;
    cache_unlink(d, l);
    int rc = xs_phys_release(d, c);
    if (rc != 0) cache_put(d, c); /* kept: nothing is lost */
    return rc;
  }
  return XSEG_EINVAL;
}

int xs_cache_release(xs_device_t *d, size_t keep) {
  int rc = 0;
  cache_release_if(d, keep, 0, &rc);
  return rc;
}

/* Release the cached chunks larger than `size`: they cannot fill a gap of
 * that size, and at the limit they hold the memory a fitting one needs. */
static size_t cache_release_larger(xs_device_t *d, size_t size) {
  int rc = 0;
  return cache_release_if(d, 0, size, &rc);
}

/* ---- mapping ----------------------------------------------------------------------- */

/* Size of a new chunk for a gap of `gap` bytes (a multiple of the page). */
static size_t chunk_size(const xs_device_t *d, const xs_segment_t *seg, size_t gap) {
  size_t page = seg->page;
  if (seg->pool->cls == XS_SMALL) return page;
  size_t sz = gap;
  if (d->large_page != 0 && sz > d->large_page) sz = d->large_page;
  size_t headroom = d->phys.held < d->phys.limit ? (d->phys.limit - d->phys.held) / page * page : 0;
  if (sz > headroom && headroom >= page) sz = headroom;
  return sz;
}

int xs_seg_unstick(xs_device_t *d) {
  xs_chunk_t **l = &d->stuck;
  while (*l) {
    xs_chunk_t *c = *l;
    if (xs_phys_unmap(d, c) != 0) {
      l = &c->next;
      continue;
    }
    *l = c->next;
    cache_put(d, c);
  }
  return d->stuck ? XSEG_EBACKEND : 0;
}

int xs_seg_map(xs_device_t *d, xs_segment_t *seg, uintptr_t a, uintptr_t b, size_t max_chunk, uintptr_t *done) {
  size_t page = seg->page;
  /* A chunk stuck at these addresses would make the map below fail. */
  if (d->stuck) xs_seg_unstick(d);
  xs_assert_internal(a % page == 0 && b % page == 0 && a >= seg->base && b <= seg->base + seg->size);
  int rc = 0;
  uintptr_t x = a;
  while (x < b) {
    size_t gap = b - x;
    size_t lim = max_chunk && max_chunk < gap ? max_chunk : gap;
    xs_chunk_t *c = cache_take(d, lim);
    if (!c) {
      /* Release what cannot fit before asking the driver: at the limit the
       * cache holds the memory we would be refused. */
      size_t sz = chunk_size(d, seg, lim);
      rc = xs_phys_create(d, sz, &c);
      if (rc == XSEG_ENOMEM && cache_release_larger(d, lim) > 0) rc = xs_phys_create(d, sz, &c);
      if (rc == XSEG_ENOMEM && sz > page) {
        sz = page; /* finer pieces fit where a large one does not */
        rc = xs_phys_create(d, sz, &c);
      }
      if (rc != 0) break;
    }
    rc = xs_phys_map(d, seg, c, x);
    if (rc != 0) {
      if (c->seg) {
        c->next = d->stuck; /* still mapped: set aside, retried by xs_seg_unstick */
        d->stuck = c;
      } else {
        cache_put(d, c);
      }
      break;
    }
    if (c->moved) {
      d->stats.remapped_bytes += c->size;
      d->stats.num_remaps++;
      c->moved = 0;
    }
    size_t first = (x - seg->base) / page;
    for (size_t i = 0; i < c->size / page; i++) seg->pages[first + i] = c;
    seg->mapped += c->size;
    x += c->size;
  }
  *done = x;
  return rc;
}

xs_chunk_t *xs_seg_chunk_within(const xs_segment_t *seg, uintptr_t a, uintptr_t b) {
  size_t page = seg->page;
  uintptr_t x = round_up(a - seg->base, page) + seg->base;
  while (x + page <= b) {
    xs_chunk_t *c = seg->pages[(x - seg->base) / page];
    if (!c) {
      x += page;
      continue;
    }
    if (c->addr >= a && c->addr + c->size <= b) return c;
    x = c->addr + c->size; /* the chunk sticks out: skip past it */
  }
  return NULL;
}

int xs_seg_unmap_chunk(xs_device_t *d, xs_segment_t *seg, xs_chunk_t *c) {
  uintptr_t addr = c->addr;
  int rc = xs_phys_unmap(d, c);
  if (rc != 0) return rc;
  size_t first = (addr - seg->base) / seg->page;
  for (size_t i = 0; i < c->size / seg->page; i++) seg->pages[first + i] = NULL;
  seg->mapped -= c->size;
  c->moved = 1;
  cache_put(d, c);
  return 0;
}

xs_segment_t *xs_seg_of(xs_device_t *d, uintptr_t p) {
  for (size_t i = 0; i < d->nstreams; i++) {
    for (int k = 0; k < XS_NCLASS; k++) {
      for (xs_segment_t *s = d->streams[i]->pools[k].segs; s; s = s->next)
        if (p >= s->base && p < s->base + s->size) return s;
    }
  }
  return NULL;
}
