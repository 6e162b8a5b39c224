/* vmm/segment.c: address ranges and the physical chunks behind them.
 *
 * An on-demand range is one reservation of virtual addresses (sized from
 * the device's memory) whose pages - units of the device granularity - are
 * mapped on demand.  A page table maps each page to the chunk (physical
 * handle) mapped there.  A chunk covers one or more pages and is mapped and
 * unmapped whole, as the driver requires (cuMemMap takes whole handles).
 * A fixed range is one cuMemAlloc, for the binned pool.
 *
 * Chunk sizes are the core trade-off (docs/design.md, "Handle sizing"):
 * every handle costs a create, a map and a set-access call whatever its
 * size, so growth wants few large handles; but only a wholly free handle
 * can be unmapped and moved, so remapping wants small ones.  The caller
 * chooses the bounds (pool/expandable.c); this file keeps new chunks
 * within the cap's headroom and, when the device refuses a large one,
 * falls back to single pages.
 *
 * Unmapped chunks go to the device's cache, from which later mappings take
 * them first (no release/create round trip); xs_vmm_cache_release gives
 * them back to the driver.  Callers hold the device lock.
 */
#include <stdlib.h>
#include <string.h>

#include "vmm.h"

/* ---- ranges ----------------------------------------------------------------------------- */

int xs_vseg_reserve(xs_vmm_t *v, xs_vseg_t *vs, size_t min_size, int tag) {
  size_t page = v->gran;
  /* Address space is cheap: reserve the whole device, so that a pool can
   * hold all of it, and more if one request asks for more. */
  size_t size = xs_round_up(v->total > min_size ? v->total : min_size, page);
  if (size < min_size) return xs_vmm_fail(XSEG_ENOMEM, "xseg: request of %zu bytes overflows", min_size);
  memset(vs, 0, sizeof *vs);
  vs->page = page;
  vs->shift = (unsigned)__builtin_ctzll((unsigned long long)page);
  vs->npages = size / page;
  if (vs->npages > UINT32_MAX)
    return xs_vmm_fail(XSEG_ENOMEM, "xseg: a range of %zu pages is more than a page table holds", vs->npages);
  vs->tag = tag;
  /* calloc of a large table is lazily committed by the OS: untouched pages
   * of the table cost nothing. */
  vs->pages = calloc(vs->npages, sizeof *vs->pages);
  if (!vs->pages)
    return xs_vmm_fail(XSEG_ENOMEM, "xseg: out of host memory for a page table of %zu pages", size / page);
  int rc = xs_vmm_reserve(v, size, &vs->base);
  if (rc != 0) {
    free(vs->pages);
    vs->pages = NULL;
    return rc;
  }
  vs->size = size;
  return 0;
}

int xs_vseg_alloc_fixed(xs_vmm_t *v, xs_vseg_t *vs, size_t size, int tag) {
  memset(vs, 0, sizeof *vs);
  int rc = xs_vmm_mem_alloc(v, size, tag, &vs->base);
  if (rc != 0) return rc;
  vs->size = size;
  vs->page = v->gran;
  vs->shift = (unsigned)__builtin_ctzll((unsigned long long)v->gran);
  vs->mapped = size;
  vs->tag = tag;
  vs->fixed = 1;
  return 0;
}

int xs_vseg_free(xs_vmm_t *v, xs_vseg_t *vs) {
  if (vs->fixed) return xs_vmm_mem_free(v, vs->base, vs->size, vs->tag); /* refused: the range stays */
  xs_assert(vs->mapped == 0);
  /* A refused unreserve leaves the addresses reserved, nothing worse. */
  int rc = xs_vmm_unreserve(v, vs->base, vs->size);
  free(vs->pages);
  vs->pages = NULL;
  return rc;
}

/* ---- the chunk cache -------------------------------------------------------------------- */

static void cache_put(xs_vmm_t *v, xs_chunk_t *c) {
  c->next = v->cache;
  v->cache = c;
  v->cache_bytes += c->size;
  v->cache_count++;
  xs_gauge_add(&v->st.handles_cached, 1);
  xs_gauge_add(&v->st.cached_handle_bytes, (int64_t)c->size);
}

static void cache_unlink(xs_vmm_t *v, xs_chunk_t **link) {
  xs_chunk_t *c = *link;
  *link = c->next;
  c->next = NULL;
  v->cache_bytes -= c->size;
  v->cache_count--;
  xs_gauge_add(&v->st.handles_cached, -1);
  xs_gauge_add(&v->st.cached_handle_bytes, -(int64_t)c->size);
}

/* The largest cached chunk of at most `max` bytes, taken out of the cache. */
static xs_chunk_t *cache_take(xs_vmm_t *v, size_t max) {
  xs_chunk_t **best = NULL;
  for (xs_chunk_t **l = &v->cache; *l; l = &(*l)->next) {
    if ((*l)->size <= max && (!best || (*l)->size > (*best)->size)) best = l;
  }
  if (!best) return NULL;
  xs_chunk_t *c = *best;
  cache_unlink(v, best);
  return c;
}

/* Release cached chunks larger than `larger_than` until at most `keep`
 * bytes stay cached.  A chunk whose release fails stays cached (nothing is
 * lost; a later call may succeed).  Returns the bytes released; *rc gets
 * the first error. */
static size_t cache_release_if(xs_vmm_t *v, size_t keep, size_t larger_than, int *rc) {
  size_t freed = 0;
  xs_chunk_t *kept = NULL;
  xs_chunk_t **l = &v->cache;
  while (*l && v->cache_bytes > keep) {
    xs_chunk_t *c = *l;
    if (c->size <= larger_than) {
      l = &c->next;
      continue;
    }
    cache_unlink(v, l);
    size_t size = c->size;
    int r = xs_vmm_release(v, c);
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
    cache_put(v, c);
  }
  return freed;
}

int xs_vmm_cache_release_chunk(xs_vmm_t *v, xs_chunk_t *c) {
  for (xs_chunk_t **l = &v->cache; *l; l = &(*l)->next) {
    if (*l != c) continue;
    cache_unlink(v, l);
    int rc = xs_vmm_release(v, c);
    if (rc != 0) cache_put(v, c); /* kept: nothing is lost */
    return rc;
  }
  return XSEG_EINVAL;
}

int xs_vmm_cache_release(xs_vmm_t *v, size_t keep) {
  int rc = 0;
  cache_release_if(v, keep, 0, &rc);
  if (keep == 0) xs_vmm_forget_unseen(v); /* a fresh start: learn again what the driver gives */
  return rc;
}

/* Release the cached chunks larger than `size`: they cannot fill a gap of
 * that size, and at the limit they hold the memory a fitting one needs. */
static size_t cache_release_larger(xs_vmm_t *v, size_t size) {
  int rc = 0;
  return cache_release_if(v, 0, size, &rc);
}

int xs_vmm_unstick(xs_vmm_t *v) {
  xs_chunk_t **l = &v->stuck;
  while (*l) {
    xs_chunk_t *c = *l;
    if (xs_vmm_unmap(v, c) != 0) {
      l = &c->next;
      continue;
    }
    *l = c->next;
    cache_put(v, c);
  }
  return v->stuck ? xs_vmm_fail(XSEG_EBACKEND, "xseg: device %d: a chunk still cannot be unmapped", v->dev) : 0;
}

/* ---- mapping ------------------------------------------------------------------------------- */

/* How many cached chunks filling `want` bytes largest first would take,
 * counted up to XS_VMM_COALESCE. */
static unsigned cached_fill_count(const xs_vmm_t *v, size_t want) {
  const xs_chunk_t *used[XS_VMM_COALESCE];
  unsigned n = 0;
  size_t left = want;
  while (left > 0 && n < XS_VMM_COALESCE) {
    const xs_chunk_t *best = NULL;
    for (const xs_chunk_t *c = v->cache; c; c = c->next) {
      if (c->size > left || (best && c->size <= best->size)) continue;
      unsigned i = 0;
      while (i < n && used[i] != c) i++;
      if (i == n) best = c; /* not taken yet */
    }
    if (!best) break;
    used[n++] = best;
    left -= best->size;
  }
  return n;
}

/* At the cap, with the gap's memory lying in the cache as several small
 * chunks (reclaim unmapped them from holes), mapping them costs a map and
 * a set access each (31-35 us on an H100), where releasing them (15-26 us
 * each) and creating one handle for the gap (create, map and set access:
 * about 50 us) costs less from three on (XS_VMM_COALESCE says from how
 * many it is done), and leaves one handle where there were several for
 * every later move of those pages.  Releases cached chunks smaller than
 * `want`, smallest first, until the headroom holds it: 1 if it does (the
 * caller creates), else 0, having released nothing, or some if the driver
 * refused a release (their memory is headroom for fresh pages then). */
static int coalesce(xs_vmm_t *v, size_t want) {
  size_t page = v->gran, headroom = xs_vmm_headroom(v) / page * page, small = 0;
  if (headroom >= want || cached_fill_count(v, want) < XS_VMM_COALESCE) return 0;
  for (const xs_chunk_t *c = v->cache; c; c = c->next)
    if (c->size < want) small += c->size;
  if (headroom + small < want) return 0;
  while (headroom < want) {
    xs_chunk_t **pick = NULL;
    for (xs_chunk_t **l = &v->cache; *l; l = &(*l)->next)
      if ((*l)->size < want && (!pick || (*l)->size < (*pick)->size)) pick = l;
    xs_chunk_t *c = *pick;
    cache_unlink(v, pick);
    size_t size = c->size;
    if (xs_vmm_release(v, c) != 0) {
      cache_put(v, c); /* kept: mapping from the cache still works */
      return 0;
    }
    headroom += size;
  }
  return 1;
}

/* A chunk for a gap of `lim` bytes: from the cache, else a new one of at
 * most new_max bytes (0: lim) within the headroom, else a single page;
 * one new handle instead of several small cached ones where that costs
 * less (coalesce). */
static int chunk_for(xs_vmm_t *v, size_t lim, size_t new_max, xs_chunk_t **out) {
  size_t page = v->gran;
  size_t sz = new_max && lim > new_max ? new_max : lim;
  if (sz > page && coalesce(v, sz) && xs_vmm_create(v, sz, out) == 0) {
    v->st.num_coalesces++;
    return 0;
  }
  if ((*out = cache_take(v, lim)) != NULL) return 0;
  size_t headroom = xs_vmm_headroom(v) / page * page;
  if (sz > headroom && headroom >= page) sz = headroom;
  if (sz > page && sz / page * XS_VMM_PAGE_NS < xs_vmm_scrub_left(v)) sz = page; /* pages are not kept waiting */
  /* Release what cannot fit before asking the driver: at the limit the
   * cache holds the memory we would be refused. */
  int rc = xs_vmm_create(v, sz, out);
  if (rc == XSEG_ENOMEM && cache_release_larger(v, lim) > 0) rc = xs_vmm_create(v, sz, out);
  if (rc == XSEG_ENOMEM && sz > page) rc = xs_vmm_create(v, page, out); /* finer pieces fit where a large one does not */
  return rc;
}

int xs_vseg_map(xs_vmm_t *v, xs_vseg_t *vs, uintptr_t a, uintptr_t b, size_t max_chunk, size_t new_max,
                uintptr_t *done) {
  /* A chunk stuck at these addresses would make the map below fail. */
  if (v->stuck) xs_vmm_unstick(v);
  xs_assert_internal(a % vs->page == 0 && b % vs->page == 0 && a >= vs->base && b <= vs->base + vs->size);
  int rc = 0;
  uintptr_t x = a;
  while (x < b) {
    size_t gap = b - x;
    xs_chunk_t *c;
    rc = chunk_for(v, max_chunk && max_chunk < gap ? max_chunk : gap, new_max, &c);
    if (rc != 0) break;
    rc = xs_vmm_map(v, vs, c, x);
    if (rc != 0) {
      if (c->vs) {
        c->next = v->stuck; /* still mapped: set aside, retried by xs_vmm_unstick */
        v->stuck = c;
      } else {
        cache_put(v, c);
      }
      break;
    }
    if (c->moved) {
      v->st.remapped_bytes += c->size;
      v->st.num_remaps++;
      c->moved = 0;
    }
    const size_t first = (x - vs->base) >> vs->shift, n = c->size >> vs->shift;
    for (size_t i = 0; i < n; i++) vs->pages[first + i] = (xs_pte_t){c, (uint32_t)first, (uint32_t)n};
    vs->mapped += c->size;
    v->layout++;
    x += c->size;
  }
  *done = x;
  return rc;
}

xs_chunk_t *xs_vseg_chunk_within(const xs_vseg_t *vs, uintptr_t a, uintptr_t b) {
  size_t page = vs->page;
  uintptr_t x = xs_round_up(a - vs->base, page) + vs->base;
  while (x + page <= b) {
    xs_chunk_t *c = xs_vseg_chunk_at(vs, x);
    if (!c) {
      x += page;
      continue;
    }
    if (c->addr >= a && c->addr + c->size <= b) return c;
    x = c->addr + c->size; /* the chunk sticks out: skip past it */
  }
  return NULL;
}

int xs_vseg_unmap_chunk(xs_vmm_t *v, xs_vseg_t *vs, xs_chunk_t *c) {
  uintptr_t addr = c->addr;
  int rc = xs_vmm_unmap(v, c);
  if (rc != 0) return rc;
  const size_t first = (addr - vs->base) >> vs->shift, n = c->size >> vs->shift;
  for (size_t i = 0; i < n; i++) vs->pages[first + i] = (xs_pte_t){NULL, 0, 0};
  vs->mapped -= c->size;
  v->layout++;
  c->moved = 1;
  cache_put(v, c);
  return 0;
}

int xs_vseg_set_access(xs_vmm_t *v, const xs_vseg_t *vs) {
  if (vs->fixed) return 0;
  for (size_t pg = 0; pg < vs->npages;) {
    xs_chunk_t *c = vs->pages[pg].chunk;
    if (!c) {
      pg++;
      continue;
    }
    int rc = xs_vmm_set_access(v, c->addr, c->size);
    if (rc != 0) return rc;
    pg += c->size / vs->page;
  }
  return 0;
}
