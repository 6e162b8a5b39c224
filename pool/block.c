/* pool/block.c: blocks, split and merge, and best fit: the one
 * implementation both strategies share.
 *
 * A segment is tiled by blocks linked in address order.  Free blocks sit in
 * their pool's free set (mapped) or, in expandable segments, its unmapped
 * set; neighbours are merged whenever both are free and in the same mapping
 * state, so two free mapped blocks are never adjacent.  Where the memory
 * comes from (whole binned segments, or pages mapped on demand) is the
 * business of binned.c and expandable.c; this file only cuts and joins,
 * and gives a new segment its first block (xs_segment_adopt) for both.
 *
 * Block metadata comes from a slab of host memory per device.  Callers that
 * must not fail half-way reserve slab entries first (xs_slab_reserve).
 */
#include <stdlib.h>
#include <string.h>

#include "device.h"

/* ---- slab ------------------------------------------------------------------ */

#define SLAB_BATCH 256

static int slab_grow(xs_slab_t *s) {
  if (s->nchunks == s->capchunks) {
    size_t n = s->capchunks ? s->capchunks * 2 : 16;
    void **c = realloc(s->chunks, n * sizeof *c);
    if (!c) return XSEG_ENOMEM;
    s->chunks = c;
    s->capchunks = n;
  }
  xs_block_t *batch = calloc(SLAB_BATCH, sizeof *batch);
  if (!batch) return XSEG_ENOMEM;
  s->chunks[s->nchunks++] = batch;
  for (size_t i = 0; i < SLAB_BATCH; i++) {
    batch[i].next = s->free_list;
    s->free_list = &batch[i];
  }
  return 0;
}

int xs_slab_reserve(xs_slab_t *s, size_t n) {
  size_t have = 0;
  for (xs_block_t *b = s->free_list; b && have < n; b = b->next) have++;
  return have >= n ? 0 : slab_grow(s);
}

xs_block_t *xs_block_new(xs_slab_t *s) {
  if (!s->free_list && slab_grow(s) != 0) return NULL;
  xs_block_t *b = s->free_list;
  s->free_list = b->next;
  memset(b, 0, sizeof *b);
  s->live++;
  return b;
}

void xs_block_delete(xs_slab_t *s, xs_block_t *b) {
  free(b->uses);
  memset(b, 0, sizeof *b);
  b->next = s->free_list;
  s->free_list = b;
  s->live--;
}

void xs_slab_destroy(xs_slab_t *s) {
  for (size_t i = 0; i < s->nchunks; i++) free(s->chunks[i]);
  free(s->chunks);
  memset(s, 0, sizeof *s);
}

/* ---- free sets -------------------------------------------------------------- */

void xs_free_insert(xs_device_t *d, xs_block_t *b) {
  xs_pool_t *p = b->seg->pool;
  b->state = XS_BLOCK_FREE;
  if (!b->mapped) {
    xs_tree_insert(&p->unmapped, b);
    return;
  }
  xs_tree_insert(&p->free, b);
  d->free_mapped += b->size;
  xs_gauge_add(&d->stats.free_mapped_bytes, (int64_t)b->size);
  /* torch's "inactive split": free, but part of a larger segment. */
  b->split_counted = b->prev != NULL || b->next != NULL;
  if (b->split_counted) {
    xs_stat_add(d->stats.inactive_split, p->cls, 1);
    xs_stat_add(d->stats.inactive_split_bytes, p->cls, (int64_t)b->size);
  }
}

void xs_free_remove(xs_device_t *d, xs_block_t *b) {
  xs_pool_t *p = b->seg->pool;
  if (!b->mapped) {
    xs_tree_remove(&p->unmapped, b);
    return;
  }
  xs_tree_remove(&p->free, b);
  d->free_mapped -= b->size;
  xs_gauge_add(&d->stats.free_mapped_bytes, -(int64_t)b->size);
  if (b->split_counted) {
    xs_stat_add(d->stats.inactive_split, p->cls, -1);
    xs_stat_add(d->stats.inactive_split_bytes, p->cls, -(int64_t)b->size);
    b->split_counted = 0;
  }
}

/* ---- split and merge ---------------------------------------------------------- */

/* Insert nb right after b in address order. */
static void link_after(xs_block_t *b, xs_block_t *nb) {
  nb->prev = b;
  nb->next = b->next;
  if (b->next) b->next->prev = nb;
  b->next = nb;
  nb->seg = b->seg;
}

/* Insert nb right before b in address order. */
static void link_before(xs_block_t *b, xs_block_t *nb) {
  nb->next = b;
  nb->prev = b->prev;
  if (b->prev)
    b->prev->next = nb;
  else
    b->seg->head = nb;
  b->prev = nb;
  nb->seg = b->seg;
}

xs_block_t *xs_carve(xs_device_t *d, xs_block_t *f, uintptr_t addr, size_t size) {
  xs_assert_internal(f->state == XS_BLOCK_FREE && f->mapped);
  xs_assert_internal(addr >= f->addr && addr + size <= xs_block_end(f));
  xs_free_remove(d, f);
  if (addr > f->addr) {
    /* The part before addr stays free; the caller reserved slab entries. */
    xs_block_t *l = xs_block_new(&d->slab);
    xs_assert(l != NULL);
    link_before(f, l);
    l->addr = f->addr;
    l->size = addr - f->addr;
    l->mapped = 1;
    l->free_seq = f->free_seq;
    f->addr = addr;
    f->size -= l->size;
    xs_free_insert(d, l);
  }
  if (d->strat->should_split(d, f, size)) {
    xs_block_t *r = xs_block_new(&d->slab);
    xs_assert(r != NULL);
    link_after(f, r);
    r->addr = f->addr + size;
    r->size = f->size - size;
    r->mapped = 1;
    r->free_seq = f->free_seq;
    f->size = size;
    xs_free_insert(d, r);
  }
  return f;
}

xs_block_t *xs_split_at(xs_device_t *d, xs_block_t *b, uintptr_t addr) {
  xs_assert_internal(addr > b->addr && addr < xs_block_end(b));
  xs_block_t *r = xs_block_new(&d->slab);
  xs_assert(r != NULL);
  link_after(b, r);
  r->addr = addr;
  r->size = xs_block_end(b) - addr;
  r->state = b->state;
  r->mapped = b->mapped;
  r->free_seq = b->free_seq;
  b->size = addr - b->addr;
  return r;
}

/* Fold free block n into its lower neighbour b; n is deleted. */
static void absorb_next(xs_device_t *d, xs_block_t *b, xs_block_t *n) {
  b->size += n->size;
  if (n->free_seq > b->free_seq) b->free_seq = n->free_seq;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  xs_block_delete(&d->slab, n);
}

xs_block_t *xs_merge_insert(xs_device_t *d, xs_block_t *b) {
  xs_block_t *p = b->prev, *n = b->next;
  if (xs_block_is_free(p) && p->mapped == b->mapped) {
    xs_free_remove(d, p);
    absorb_next(d, p, b);
    b = p;
  }
  if (xs_block_is_free(n) && n->mapped == b->mapped) {
    xs_free_remove(d, n);
    absorb_next(d, b, n);
  }
  xs_free_insert(d, b);
  return b;
}

/* ---- segments of a pool --------------------------------------------------------- */

void xs_segment_adopt(xs_device_t *d, xs_pool_t *p, xs_segment_t *seg, int mapped) {
  xs_block_t *b = xs_block_new(&d->slab);
  xs_assert(b != NULL); /* the caller reserved it */
  seg->pool = p;
  seg->prev = NULL;
  seg->next = p->segs;
  if (p->segs) p->segs->prev = seg;
  p->segs = seg;
  p->nsegs++;
  xs_owners_add(d->id, seg->vs.base, seg->vs.base + seg->vs.size);
  b->addr = seg->vs.base;
  b->size = seg->vs.size;
  b->seg = seg;
  b->mapped = (uint8_t)mapped;
  seg->head = b;
  xs_free_insert(d, b);
}

void xs_segment_drop(xs_device_t *d, xs_segment_t *seg) {
  xs_pool_t *p = seg->pool;
  xs_assert(seg->head && !seg->head->next && seg->head->state == XS_BLOCK_FREE);
  xs_free_remove(d, seg->head);
  xs_block_delete(&d->slab, seg->head);
  seg->head = NULL;
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    p->segs = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  p->nsegs--;
}

/* ---- best fit ------------------------------------------------------------------- */

xs_block_t *xs_pool_fit(xs_device_t *d, xs_pool_t *p, size_t size) {
  xs_block_t *b = xs_tree_lower_bound(&p->free, size);
  if (!b) return NULL;
  /* Requests below max_split never take an oversize block (all later
   * blocks in the set are larger still): large cached blocks stay whole for
   * large requests. */
  if (size < d->max_split && b->size >= d->max_split) return NULL;
  return b;
}
