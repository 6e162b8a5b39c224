/* pool/check.c: the invariant checker (xseg_check_heap), a walker over a
 * device's whole heap.
 *
 * The checker visits every stream, pool, segment, page, chunk and block
 * and verifies what the rest of the allocator relies on: blocks tile each
 * segment exactly and their links agree; no two free neighbours of the
 * same mapping state are left unmerged; every free block is in the right
 * free set and the sets hold nothing else; every live block is in the
 * pointer map and the map holds nothing else; every page under a mapped
 * block is mapped and every page under an unmapped block is not; chunks
 * agree with the page table; each pin lies over its block and the pin
 * budgets equal what the live blocks are charged; and the statistics equal
 * what the walk counts.  It allocates nothing and changes nothing, so tests
 * may call it after every step.  The device lock is held by the caller.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

#define BAD(...) return xs_error(XSEG_ECORRUPT, __VA_ARGS__)

typedef struct tally_s {
  int64_t live[XS_NCLASS], live_bytes[XS_NCLASS], requested[XS_NCLASS];
  int64_t active[XS_NCLASS], active_bytes[XS_NCLASS];
  int64_t split[XS_NCLASS], split_bytes[XS_NCLASS];
  int64_t reserved[XS_NCLASS], segments[XS_NCLASS];
  int64_t pending;
  size_t free_mapped, mapped, chunks, chunk_bytes, fixed_bytes;
  size_t pinned[XS_PINS];
} tally_t;

static int check_pages(const xs_device_t *d, const xs_segment_t *seg, tally_t *t) {
  size_t page = seg->vs.page;
  size_t mapped = 0;
  for (size_t i = 0; i < seg->vs.npages;) {
    const xs_pte_t *e = &seg->vs.pages[i];
    xs_chunk_t *c = e->chunk;
    if (!c) {
      if (e->npages != 0 || e->first != 0)
        BAD("xseg: check: device %d: unmapped page at %#lx has a chunk's place", d->id,
            (unsigned long)(seg->vs.base + i * page));
      i++;
      continue;
    }
    uintptr_t at = seg->vs.base + i * page;
    if (c->vs != &seg->vs || c->addr != at || c->size == 0 || c->size % page != 0)
      BAD("xseg: check: device %d: chunk at %#lx disagrees with the page table", d->id, (unsigned long)at);
    for (size_t k = 0; k < c->size / page; k++) {
      if (i + k >= seg->vs.npages || seg->vs.pages[i + k].chunk != c || seg->vs.pages[i + k].first != i ||
          (size_t)seg->vs.pages[i + k].npages << seg->vs.shift != c->size)
        BAD("xseg: check: device %d: chunk at %#lx does not cover its pages", d->id, (unsigned long)at);
    }
    mapped += c->size;
    t->chunks++;
    t->chunk_bytes += c->size;
    t->reserved[seg->pool->cls] += (int64_t)c->size;
    t->segments[seg->pool->cls]++;
    i += c->size / page;
  }
  if (mapped != seg->vs.mapped)
    BAD("xseg: check: device %d: segment %#lx counts %zu mapped bytes, its pages hold %zu", d->id,
        (unsigned long)seg->vs.base, seg->vs.mapped, mapped);
  t->mapped += mapped;
  return 0;
}

/* Is every page overlapping [a, b) mapped (want 1) or unmapped (want 0)? */
static int pages_are(const xs_segment_t *seg, uintptr_t a, uintptr_t b, int want) {
  size_t first = (a - seg->vs.base) / seg->vs.page, last = (b - 1 - seg->vs.base) / seg->vs.page;
  for (size_t i = first; i <= last; i++)
    if ((seg->vs.pages[i].chunk != NULL) != want) return 0;
  return 1;
}

/* What one pool's segments hold in free blocks, against its free sets. */
typedef struct poolsum_s {
  size_t nfree, free_bytes, nunmapped, unmapped_bytes;
} poolsum_t;

/* The range behind seg is the kind its pool's strategy made, and counts. */
static int check_range(xs_device_t *d, const xs_segment_t *seg, int cls, tally_t *t) {
  if (!seg->binned) {
    if (seg->vs.fixed || seg->vs.tag != cls)
      BAD("xseg: check: device %d: segment %#lx is not an on-demand range of its pool", d->id,
          (unsigned long)seg->vs.base);
    return check_pages(d, seg, t);
  }
  if (!seg->vs.fixed || seg->vs.mapped != seg->vs.size || seg->vs.tag != cls)
    BAD("xseg: check: device %d: binned segment %#lx is not a fixed range of its pool", d->id,
        (unsigned long)seg->vs.base);
  t->reserved[cls] += (int64_t)seg->vs.size;
  t->segments[cls]++;
  t->mapped += seg->vs.size;
  t->fixed_bytes += seg->vs.size;
  return 0;
}

/* Block b as its state says it should be; adds it to the tallies. */
static int check_block(xs_device_t *d, const xs_segment_t *seg, const xs_block_t *b, int cls, tally_t *t,
                       poolsum_t *ps, size_t *live_bytes) {
  switch (b->state) {
  case XS_BLOCK_LIVE:
    if (!b->mapped) BAD("xseg: check: device %d: live block %#lx is unmapped", d->id, (unsigned long)b->addr);
    if (xs_ptrmap_get(&d->live, b->addr) != b)
      BAD("xseg: check: device %d: live block %#lx is missing from the pointer map", d->id, (unsigned long)b->addr);
    if (b->requested > b->size)
      BAD("xseg: check: device %d: block %#lx holds %zu bytes for a request of %zu", d->id,
          (unsigned long)b->addr, b->size, b->requested);
    if (b->pin) {
      if (b->pin_budget >= XS_PINS || b->pin->addr >= xs_block_end(b) || b->pin->addr + b->pin->size <= b->addr)
        BAD("xseg: check: device %d: block %#lx pins a chunk at %#lx outside it (budget %d)", d->id,
            (unsigned long)b->addr, (unsigned long)b->pin->addr, b->pin_budget);
      t->pinned[b->pin_budget] += b->pin->size;
    }
    t->live[cls]++;
    t->live_bytes[cls] += (int64_t)b->size;
    t->requested[cls] += (int64_t)b->requested;
    t->active[cls]++;
    t->active_bytes[cls] += (int64_t)b->size;
    *live_bytes += b->size;
    return 0;
  case XS_BLOCK_PENDING:
    if (b->events == 0) BAD("xseg: check: device %d: pending block %#lx waits for no event", d->id, (unsigned long)b->addr);
    t->active[cls]++;
    t->active_bytes[cls] += (int64_t)b->size;
    t->pending++;
    *live_bytes += b->size;
    return 0;
  case XS_BLOCK_FREE:
    if (xs_block_is_free(b->next) && b->next->mapped == b->mapped)
      BAD("xseg: check: device %d: free blocks %#lx and %#lx were not merged", d->id, (unsigned long)b->addr,
          (unsigned long)b->next->addr);
    if (!b->mapped) {
      if ((b->addr - seg->vs.base) % seg->vs.page || b->size % seg->vs.page)
        BAD("xseg: check: device %d: unmapped block %#lx is not page aligned", d->id, (unsigned long)b->addr);
      ps->nunmapped++;
      ps->unmapped_bytes += b->size;
      return 0;
    }
    ps->nfree++;
    ps->free_bytes += b->size;
    t->free_mapped += b->size;
    if (b->split_counted != (b->prev != NULL || b->next != NULL))
      BAD("xseg: check: device %d: free block %#lx has a stale split mark", d->id, (unsigned long)b->addr);
    if (b->split_counted) {
      t->split[cls]++;
      t->split_bytes[cls] += (int64_t)b->size;
    }
    return 0;
  default:
    BAD("xseg: check: device %d: block %#lx has state %d", d->id, (unsigned long)b->addr, b->state);
  }
}

static int check_segment(xs_device_t *d, xs_pool_t *p, xs_segment_t *seg, tally_t *t, poolsum_t *ps) {
  int cls = p->cls;
  if (seg->pool != p) BAD("xseg: check: device %d: segment %#lx names another pool", d->id, (unsigned long)seg->vs.base);
  if (check_range(d, seg, cls, t) != 0) return XSEG_ECORRUPT;
  uintptr_t at = seg->vs.base;
  const xs_block_t *prev = NULL;
  size_t live_bytes = 0;
  for (xs_block_t *b = seg->head; b; prev = b, b = b->next) {
    if (b->seg != seg || b->prev != prev)
      BAD("xseg: check: device %d: block %#lx has broken links", d->id, (unsigned long)b->addr);
    if (b->addr != at || b->size == 0 || b->size % XS_ALIGN != 0 || b->addr % XS_ALIGN != 0)
      BAD("xseg: check: device %d: block %#lx (+%zu) does not follow the previous block at %#lx", d->id,
          (unsigned long)b->addr, b->size, (unsigned long)at);
    at = xs_block_end(b);
    if (at > seg->vs.base + seg->vs.size)
      BAD("xseg: check: device %d: block %#lx runs past its segment", d->id, (unsigned long)b->addr);
    if (!seg->binned && !pages_are(seg, b->addr, xs_block_end(b), b->mapped))
      BAD("xseg: check: device %d: block %#lx (+%zu, %s) sits on pages that are %s", d->id,
          (unsigned long)b->addr, b->size, b->mapped ? "mapped" : "unmapped",
          b->mapped ? "not all mapped" : "partly mapped");
    if (seg->binned && !b->mapped)
      BAD("xseg: check: device %d: binned block %#lx is marked unmapped", d->id, (unsigned long)b->addr);
    if (check_block(d, seg, b, cls, t, ps, &live_bytes) != 0) return XSEG_ECORRUPT;
  }
  if (at != seg->vs.base + seg->vs.size)
    BAD("xseg: check: device %d: blocks of segment %#lx end at %#lx, not at its end", d->id,
        (unsigned long)seg->vs.base, (unsigned long)at);
  if (live_bytes != seg->live_bytes)
    BAD("xseg: check: device %d: segment %#lx counts %zu live bytes, its blocks hold %zu", d->id,
        (unsigned long)seg->vs.base, seg->live_bytes, live_bytes);
  return 0;
}

/* Every node of a free set belongs to this pool and is in the right state. */
static int check_set(xs_device_t *d, const xs_pool_t *p, const xs_tree_t *tr, int mapped) {
  const char *why = xs_tree_check(tr);
  if (why) BAD("xseg: check: device %d: %s", d->id, why);
  for (xs_block_t *b = xs_tree_first(tr); b; b = xs_tree_next(b)) {
    if (b->state != XS_BLOCK_FREE || b->mapped != mapped || b->seg->pool != p)
      BAD("xseg: check: device %d: block %#lx sits in the wrong free set", d->id, (unsigned long)b->addr);
  }
  return 0;
}

#define EQ(what, a, b)                                                                            \
  do {                                                                                            \
    if ((int64_t)(a) != (int64_t)(b))                                                             \
      BAD("xseg: check: device %d: %s is %lld, the heap says %lld", d->id, what, (long long)(a), \
          (long long)(b));                                                                        \
  } while (0)

/* The chunks outside page tables: the cache, and chunks set aside still
 * mapped (their undo unmap was refused), which count as mapped. */
static int check_chunk_lists(xs_device_t *d, tally_t *t, size_t *cached, size_t *ncached) {
  const xs_vmm_t *v = &d->vmm;
  for (xs_chunk_t *c = v->cache; c; c = c->next) {
    if (c->vs != NULL) BAD("xseg: check: device %d: a cached chunk is marked mapped", d->id);
    *cached += c->size;
    (*ncached)++;
  }
  for (xs_chunk_t *c = v->stuck; c; c = c->next) {
    if (!c->vs) BAD("xseg: check: device %d: a stuck chunk is marked unmapped", d->id);
    t->mapped += c->size;
    t->chunks++;
    t->chunk_bytes += c->size;
    t->reserved[c->vs->tag] += (int64_t)c->size;
    t->segments[c->vs->tag]++;
  }
  EQ("the cache's byte count", v->cache_bytes, *cached);
  EQ("handles_cached", v->st.handles_cached.current, *ncached);
  EQ("cached_handle_bytes", v->st.cached_handle_bytes.current, *cached);
  return 0;
}

int xs_check_device(xs_device_t *d) {
  tally_t t;
  memset(&t, 0, sizeof t);
  for (size_t i = 0; i < d->nstreams; i++) {
    xs_stream_t *st = d->streams[i];
    if (st->safe_seq > st->free_seq)
      BAD("xseg: check: device %d: stream %p is safe beyond its frees", d->id, (void *)st->s);
    if (st->keep != (st->pool != 0 && xs_private_find(d, st->pool) != NULL))
      BAD("xseg: check: device %d: stream %p of pool %d is %s, its pool is %s", d->id, (void *)st->s, st->pool,
          st->keep ? "kept" : "not kept", xs_private_find(d, st->pool) ? "open" : "closed");
    for (int k = 0; k < XS_NCLASS; k++) {
      xs_pool_t *p = &st->pools[k];
      if (p->st != st || p->cls != k) BAD("xseg: check: device %d: pool links broken", d->id);
      poolsum_t ps = {0, 0, 0, 0};
      size_t nsegs = 0;
      for (xs_segment_t *seg = p->segs; seg; seg = seg->next) {
        if (seg->next && seg->next->prev != seg) BAD("xseg: check: device %d: segment list broken", d->id);
        if (check_segment(d, p, seg, &t, &ps) != 0) return XSEG_ECORRUPT;
        nsegs++;
      }
      if (nsegs != p->nsegs) BAD("xseg: check: device %d: pool counts %zu segments, has %zu", d->id, p->nsegs, nsegs);
      if (check_set(d, p, &p->free, 1) || check_set(d, p, &p->unmapped, 0)) return XSEG_ECORRUPT;
      if (ps.nfree != p->free.count || ps.free_bytes != p->free.bytes)
        BAD("xseg: check: device %d: free set holds %zu blocks (%zu bytes), the segments %zu (%zu bytes)", d->id,
            p->free.count, p->free.bytes, ps.nfree, ps.free_bytes);
      if (ps.nunmapped != p->unmapped.count || ps.unmapped_bytes != p->unmapped.bytes)
        BAD("xseg: check: device %d: unmapped set holds %zu blocks, the segments %zu", d->id, p->unmapped.count,
            ps.nunmapped);
    }
  }
  size_t cached = 0, ncached = 0;
  if (check_chunk_lists(d, &t, &cached, &ncached) != 0) return XSEG_ECORRUPT;
  const xs_vmm_t *v = &d->vmm;
  const xs_stats_t *s = &d->stats;
  const xs_vmm_stats_t *vs = &v->st;
  EQ("the pointer map's size", d->live.count, t.live[0] + t.live[1]);
  EQ("free_mapped_bytes", s->free_mapped_bytes.current, t.free_mapped);
  EQ("the free-mapped count", d->free_mapped, t.free_mapped);
  static const char *const pin_budgets[] = {[XS_PINS_SHARED] = "the pinned bytes",
                                             [XS_PINS_SURPLUS] = "the surplus-pinned bytes",
                                             [XS_PINS_ROOMY] = "the roomy-pinned bytes",
                                             [XS_PINS_EARLY] = "the early-pinned bytes",
                                             [XS_PINS_GROWN] = "the bytes pinned in growth chunks",
                                             [XS_PINS_COVERED] = "the bytes pinned in nearly covered chunks"};
  _Static_assert(sizeof pin_budgets / sizeof pin_budgets[0] == XS_PINS, "every pin budget needs a name here");
  for (int k = 0; k < XS_PINS; k++) EQ(pin_budgets[k], d->pinned[k], t.pinned[k]);
  EQ("pending_frees", s->pending_frees.current, t.pending);
  EQ("mapped_bytes", vs->mapped_bytes.current, t.mapped);
  /* Held: every chunk, mapped or cached, and every fixed range. */
  EQ("handles_live", vs->handles_live.current, t.chunks + ncached);
  EQ("held_bytes", vs->held_bytes.current, t.chunk_bytes + cached + t.fixed_bytes);
  EQ("the physical layer's held bytes", v->held, vs->held_bytes.current);
  for (int k = 0; k < XS_NCLASS; k++) {
    int ty = 1 + k;
    EQ("allocation", s->allocation[ty].current, t.live[k]);
    EQ("allocated_bytes", s->allocated_bytes[ty].current, t.live_bytes[k]);
    EQ("requested_bytes", s->requested_bytes[ty].current, t.requested[k]);
    EQ("active", s->active[ty].current, t.active[k]);
    EQ("active_bytes", s->active_bytes[ty].current, t.active_bytes[k]);
    EQ("inactive_split", s->inactive_split[ty].current, t.split[k]);
    EQ("inactive_split_bytes", s->inactive_split_bytes[ty].current, t.split_bytes[k]);
    EQ("reserved_bytes", vs->reserved_bytes[ty].current, t.reserved[k]);
    EQ("segment", vs->segment[ty].current, t.segments[k]);
  }
#define SUMS(name, help) \
  EQ(#name ".all", s->name[XS_STAT_ALL].current, s->name[XS_STAT_SMALL].current + s->name[XS_STAT_LARGE].current);
  XS_STATS_POOLED(SUMS)
#undef SUMS
#define VSUMS(name, help) \
  EQ(#name ".all", vs->name[XS_STAT_ALL].current, vs->name[XS_STAT_SMALL].current + vs->name[XS_STAT_LARGE].current);
  XS_VMM_POOLED(VSUMS)
#undef VSUMS
  return 0;
}
