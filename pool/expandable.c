/* pool/expandable.c: the expandable strategy - where memory comes from
 * when pages are mapped on demand.
 *
 * A request first takes the best fit among the pool's mapped free blocks,
 * placed inside it by the expected-stranding rule (xs_exp_place).  When
 * none fits, memory is added.  Each pool owns
 * segments (one VA reservation each, vmm/segment.c) tiled by blocks; free
 * blocks are mapped or unmapped, and a maximal sequence of adjacent free
 * blocks is a "run".  To place a request, this file
 *   1. picks the run and start that need the fewest new pages (ties: the
 *      smallest run, then the lowest address), a new segment if none fits;
 *   2. maps the missing pages: chunks from the cache, then new ones;
 *   3. when the device (or the configured limit) has no memory left,
 *      unmaps wholly free chunks from holes elsewhere - after the GPU has
 *      finished with them, see fences below - and maps those same handles
 *      where the request needs them: remapping, not release and create.
 * So a request fails only when the pages that hold live data plus the
 * pages it needs exceed the device.  Reclaim leaves the request's own pages
 * alone; other blocks of its run may change (pages unmapped, unmapped
 * neighbours merged), so the run's blocks are found again from the live
 * block before it after every step.
 *
 * A block is never placed over part of a large free chunk (a handle of
 * several pages): that chunk is first re-made as smaller handles, each
 * wholly under the block or wholly outside it (pieces()), so every free
 * page stays reclaimable - unless a cheaper answer is within its bounds:
 * while memory is plentiful a pin, fresh memory or a place over whole
 * chunks, under pressure a place that covers whole chunks exactly
 * (avoid_conversion).
 *
 * Fences (pool/alloc.c, xs_stream_safe).  A block freed on stream S is reusable by S at once (stream
 * order), but its pages may be unmapped only when the GPU has finished
 * every kernel queued on S before the free.  Each free takes a number from
 * S's free sequence; an event recorded on S (a fence) covers every free
 * numbered before it.  Unmapping a block whose number is above S's safe
 * number records a fence and waits for it (pressure, empty_cache) or, for
 * the release policy, records it and tries again later without waiting.
 */
#include <stdlib.h>

#include "device.h"
#include "expandable.h"

/* ---- segments ------------------------------------------------------------------------ */

/* A new segment of pool p: a reservation of at least size bytes, its pages
 * unmapped, tiled by one unmapped free block. */
static int new_segment(xs_device_t *d, xs_pool_t *p, size_t size, xs_segment_t **out) {
  xs_segment_t *seg = calloc(1, sizeof *seg);
  if (!seg || xs_slab_reserve(&d->slab, 1) != 0) {
    free(seg);
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  }
  int rc = xs_vseg_reserve(&d->vmm, &seg->vs, size, p->cls);
  if (rc != 0) {
    free(seg);
    return xs_error_vmm(rc);
  }
  xs_segment_adopt(d, p, seg, 0);
  *out = seg;
  return 0;
}

/* The largest new chunk a mapping of seg may create (0: the gap).  Small
 * pools map single pages, so that each can move on its own; large pools map
 * each gap a request needs as one chunk (fast growth: one handle per
 * growth, as cudaMalloc), or page_size_mb chunks when configured
 * (docs/design.md, "Handle sizing"). */
static size_t new_chunk_max(const xs_device_t *d, const xs_segment_t *seg) {
  return seg->pool->cls == XS_SMALL ? seg->vs.page : d->large_page;
}

static xs_chunk_t *pins_big(const xs_device_t *d, const xs_block_t *f, uintptr_t addr, size_t size);
static int convert(xs_device_t *d, xs_block_t *f, xs_chunk_t *c, uintptr_t a, uintptr_t b, int *changed);
static int tight(const xs_device_t *d);

/* ---- unmapping wholly free chunks ----------------------------------------------------- */

/* Pages [lo, hi) of segment seg that reclaim must leave alone: those of
 * the request being placed (seg NULL: none). */
typedef struct excl_s {
  const xs_segment_t *seg;
  uintptr_t lo, hi;
} excl_t;

/* The first chunk wholly inside [a, b) and outside the exclusion. */
static xs_chunk_t *chunk_outside(const xs_segment_t *seg, uintptr_t a, uintptr_t b, const excl_t *x) {
  xs_chunk_t *c;
  while ((c = xs_vseg_chunk_within(&seg->vs, a, b)) != NULL) {
    if (seg != x->seg || c->addr + c->size <= x->lo || c->addr >= x->hi) return c;
    a = c->addr + c->size;
  }
  return NULL;
}

/* Unmap chunk c, wholly inside mapped free block cur, and split cur so the
 * chunk's pages become an unmapped block.  Returns the mapped free block
 * after the chunk (NULL if none) or cur itself on failure (*rc set). */
static xs_block_t *unmap_chunk_of(xs_device_t *d, xs_block_t *cur, xs_chunk_t *c, int *rc) {
  xs_segment_t *seg = cur->seg;
  uintptr_t ca = c->addr, cb = c->addr + c->size;
  if ((*rc = xs_slab_reserve(&d->slab, 2)) != 0) return cur;
  if ((*rc = xs_error_vmm(xs_vseg_unmap_chunk(&d->vmm, &seg->vs, c))) != 0) return cur;
  xs_free_remove(d, cur);
  xs_block_t *mid = cur, *right = NULL;
  if (ca > cur->addr) {
    mid = xs_split_at(d, cur, ca);
    xs_free_insert(d, cur); /* the mapped part before the chunk */
  }
  if (cb < xs_block_end(mid)) right = xs_split_at(d, mid, cb);
  mid->mapped = 0;
  mid->free_seq = 0;
  xs_merge_insert(d, mid); /* joins unmapped neighbours */
  if (right) xs_free_insert(d, right);
  return right;
}

/* Unmap wholly free chunks of mapped free block f (outside the exclusion),
 * up to about max bytes.  f's stream must be safe.  Returns the bytes
 * unmapped. */
static size_t unmap_free_block(xs_device_t *d, xs_block_t *f, size_t max, const excl_t *x) {
  size_t got = 0;
  xs_block_t *cur = f;
  while (cur && got < max) {
    xs_chunk_t *c = chunk_outside(cur->seg, cur->addr, xs_block_end(cur), x);
    if (!c) break;
    size_t size = c->size;
    int rc;
    xs_block_t *next = unmap_chunk_of(d, cur, c, &rc);
    if (rc != 0) break;
    got += size;
    cur = next;
  }
  return got;
}

typedef struct cand_s {
  xs_block_t **v;
  size_t n, cap;
} cand_t;

static int cand_push(cand_t *c, xs_block_t *b) {
  if (c->n == c->cap) {
    size_t n = c->cap ? c->cap * 2 : 64;
    xs_block_t **v = realloc(c->v, n * sizeof *v);
    if (!v) return -1;
    c->v = v;
    c->cap = n;
  }
  c->v[c->n++] = b;
  return 0;
}

/* Mapped free blocks holding a wholly free chunk outside the exclusion,
 * largest first within each pool; none of an open private pool. */
static void collect(xs_device_t *d, cand_t *c, const excl_t *x) {
  for (size_t i = 0; i < d->nstreams; i++) {
    if (d->streams[i]->keep) continue; /* an open private pool keeps its pages */
    for (int k = 0; k < XS_NCLASS; k++) {
      xs_pool_t *p = &d->streams[i]->pools[k];
      for (xs_block_t *b = xs_tree_last(&p->free); b; b = xs_tree_prev(b)) {
        if (b->size < d->vmm.gran) break; /* smaller blocks cannot hold a page */
        if (chunk_outside(b->seg, b->addr, xs_block_end(b), x) && cand_push(c, b) != 0) return;
      }
    }
  }
}

/* Unmap wholly free chunks from holes until `need` bytes sit in the cache
 * or nothing is left; waits for streams as needed. */
static size_t reclaim(xs_device_t *d, size_t need, const excl_t *x) {
  cand_t c = {0};
  collect(d, &c, x);
  size_t got = 0;
  for (size_t i = 0; i < c.n && got < need; i++) {
    xs_block_t *b = c.v[i];
    if (!xs_stream_safe(d, b->seg->pool->st, b->free_seq, 1)) continue;
    got += unmap_free_block(d, b, need - got, x);
  }
  free(c.v);
  return got;
}

static size_t trim_to(xs_device_t *d, size_t target, int wait) {
  if (d->free_mapped <= target) return 0;
  cand_t c = {0};
  const excl_t none = {NULL, 0, 0};
  collect(d, &c, &none);
  size_t got = 0;
  for (size_t i = 0; i < c.n && d->free_mapped > target; i++) {
    xs_block_t *b = c.v[i];
    if (!xs_stream_safe(d, b->seg->pool->st, b->free_seq, wait)) {
      d->trim_wanted = 1; /* a fence is on its way: try again when it completes */
      continue;
    }
    got += unmap_free_block(d, b, d->free_mapped - target, &none);
  }
  free(c.v);
  xs_error_vmm(xs_vmm_cache_release(&d->vmm, 0)); /* a trim returns memory to the driver */
  if (got) {
    d->stats.num_trims++;
    d->stats.trimmed_bytes += got;
  }
  return got;
}

static int exp_empty(xs_device_t *d) {
  trim_to(d, 0, 1);
  /* Whatever could not be unmapped is still in use; the cache must be gone. */
  return xs_error_vmm(xs_vmm_cache_release(&d->vmm, 0));
}

/* ---- placing a request ------------------------------------------------------------------ */

typedef struct span_s {
  xs_segment_t *seg;
  xs_block_t *anchor; /* the block before the run, NULL if the run starts the segment */
  uintptr_t addr;     /* where the request starts */
  uintptr_t lo, hi;   /* the run */
  size_t cost;        /* bytes to map */
  int found;
  int converts;       /* placing it would cover a large free chunk in part */
} span_t;

/* Does [a, e) cover chunk c in part, where c is of several pages and lies
 * wholly inside [lo, hi) - a chunk that holds no data and would have to be
 * converted?  The test of span_converts, pins_big and place_excess. */
static int covers_in_part(const xs_vseg_t *vs, xs_extent_t c, uintptr_t a, uintptr_t e, uintptr_t lo, uintptr_t hi) {
  return c.size > vs->page && (c.addr < a || c.addr + c.size > e) && c.addr >= lo && c.addr + c.size <= hi;
}

/* Would [x, x + size) cover in part a mapped chunk of several pages lying
 * wholly inside the free run [lo, hi) (one that would have to be converted)? */
static int span_converts(const xs_segment_t *seg, uintptr_t lo, uintptr_t hi, uintptr_t x, size_t size) {
  const xs_vseg_t *vs = &seg->vs;
  const uintptr_t ends[2] = {x, x + size - 1};
  for (int i = 0; i < 2; i++) {
    if (covers_in_part(vs, xs_vseg_extent_at(vs, ends[i]), x, x + size, lo, hi)) return 1;
  }
  return 0;
}

/* Bytes that must be mapped to place [s, e) starting at block b. */
static size_t span_cost(const xs_block_t *b, uintptr_t s, uintptr_t e, size_t page) {
  size_t cost = 0;
  uintptr_t pe = xs_round_up(e, page);
  for (; b && b->addr < e; b = b->next) {
    if (b->mapped) continue;
    uintptr_t lo = b->addr > s ? b->addr : s, hi = xs_block_end(b) < pe ? xs_block_end(b) : pe;
    cost += hi - lo;
  }
  return cost;
}

/* Consider every start of the run first..last for a request of size: the
 * fewest bytes to map, then the smallest run, then the lowest address.
 * With `cheap` (memory is plentiful), first of all no conversion: mapping
 * fresh pages costs a handle or two, converting a large chunk a handle a
 * page. */
static void consider_run(xs_block_t *first, xs_block_t *last, size_t size, int cheap, span_t *best) {
  uintptr_t lo = first->addr, hi = xs_block_end(last);
  if (hi - lo < size) return;
  size_t page = first->seg->vs.page;
  for (xs_block_t *b = first; b && b->addr + size <= hi; b = b->next) {
    size_t cost = span_cost(b, b->addr, b->addr + size, page);
    int conv = cheap && span_converts(first->seg, lo, hi, b->addr, size);
    int better = !best->found || conv < best->converts ||
                 (conv == best->converts &&
                  (cost < best->cost ||
                   (cost == best->cost && (hi - lo < best->hi - best->lo ||
                                           (hi - lo == best->hi - best->lo && b->addr < best->addr)))));
    if (better) {
      *best = (span_t){first->seg, first->prev, b->addr, lo, hi, cost, 1, conv};
    }
    if (b == last) break;
  }
}

static span_t find_span(xs_pool_t *p, size_t size, int cheap) {
  span_t best = {0};
  for (xs_block_t *u = xs_tree_first(&p->unmapped); u; u = xs_tree_next(u)) {
    /* Each run is visited from its leftmost unmapped block only. */
    xs_block_t *first = u;
    int leftmost = 1;
    for (xs_block_t *x = u->prev; xs_block_is_free(x); x = x->prev) {
      if (!x->mapped) {
        leftmost = 0;
        break;
      }
      first = x;
    }
    if (!leftmost) continue;
    xs_block_t *last = u;
    while (xs_block_is_free(last->next)) last = last->next;
    consider_run(first, last, size, cheap, &best);
    if (best.found && best.cost == 0 && !best.converts) break;
  }
  return best;
}

/* The first block of the run (recomputed: blocks inside change as pages map). */
static xs_block_t *run_first(const span_t *sp) {
  return sp->anchor ? sp->anchor->next : sp->seg->head;
}

/* Turn [a, b) of unmapped block u into mapped free (a < b; the slab has
 * room for two blocks).  The unmapped rest on either side stays as is. */
static xs_block_t *mark_mapped(xs_device_t *d, xs_block_t *u, uintptr_t a, uintptr_t b) {
  xs_free_remove(d, u);
  if (a > u->addr) {
    xs_block_t *m = xs_split_at(d, u, a);
    xs_free_insert(d, u);
    u = m;
  }
  if (b < xs_block_end(u)) {
    xs_block_t *r = xs_split_at(d, u, b);
    xs_free_insert(d, r);
  }
  u->mapped = 1;
  u->free_seq = 0;
  return xs_merge_insert(d, u);
}

/* Unmapped bytes still to map for the span of `size`. */
static size_t span_missing(const span_t *sp, size_t size) {
  const xs_block_t *b = run_first(sp);
  while (b && xs_block_end(b) <= sp->addr) b = b->next;
  return span_cost(b, sp->addr, sp->addr + size, sp->seg->vs.page);
}

/* A wholly free large chunk at an end of the span that reaches past it
 * holds free pages outside the span, but reclaim cannot take a chunk part
 * of which the span keeps.  Re-make such chunks as smaller handles (the
 * part outside the span gets handles of its own); returns how many changed
 * anything. */
static int convert_straddlers(xs_device_t *d, const span_t *sp, size_t size) {
  uintptr_t s = sp->addr, e = s + size;
  int n = 0;
  for (int end = 0; end < 2; end++) {
    uintptr_t x = end ? e - 1 : s;
    xs_block_t *b = run_first(sp);
    while (b && xs_block_end(b) <= x) b = b->next;
    if (!b || b->state != XS_BLOCK_FREE || !b->mapped) continue;
    xs_chunk_t *c = pins_big(d, b, s, size);
    int changed = 0;
    if (c && (convert(d, b, c, s, e, &changed) == 0 || changed)) n++;
  }
  return n;
}

static int map_span(xs_device_t *d, const span_t *sp, size_t size, int fold_tail, int *folded) {
  xs_segment_t *seg = sp->seg;
  uintptr_t s = sp->addr, e = s + size, pe = xs_round_up(e, seg->vs.page);
  *folded = 0;
  int retried = 0;
  for (;;) {
    xs_block_t *u = run_first(sp);
    while (u && u->addr < e && (u->mapped || xs_block_end(u) <= s)) u = u->next;
    if (!u || u->addr >= e) return 0;
    if (xs_slab_reserve(&d->slab, 2) != 0) return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
    uintptr_t ua = u->addr, ub = xs_block_end(u) < pe ? xs_block_end(u) : pe, done = ua;
    /* Large chunks only over pages the request fills: the page holding its
     * end gets a page-sized chunk, since later blocks may share it. */
    uintptr_t whole = e / seg->vs.page * seg->vs.page;
    size_t max_chunk = ua < whole ? 0 : seg->vs.page;
    if (ua < whole && ub > whole) {
      /* Fold only where the rest of the page is small next to the request:
       * a 3 MiB request does not take a 4 MiB page. */
      if (fold_tail && ub == pe && (pe - e) * XS_FOLD_DIV <= size) {
        *folded = 1; /* the request takes the whole tail page: one handle */
      } else {
        ub = whole;
      }
    }
    int rc = xs_vseg_map(&d->vmm, &seg->vs, ua, ub, max_chunk, new_chunk_max(d, seg), &done);
    if (done > ua) mark_mapped(d, u, ua, done);
    if (rc == 0) continue;
    if (rc != XSEG_ENOMEM) return xs_error_vmm(rc);
    /* Out of memory: take pages out of holes and try again. */
    if (!retried) {
      d->stats.num_alloc_retries++;
      retried = 1;
    }
    /* xs_vseg_map returns ENOMEM only after releasing every cached chunk
     * that did not fit, so what the span still needs must come from holes.
     * Each round unmaps at least one chunk or gives up, so this ends. */
    const excl_t x = {seg, s / seg->vs.page * seg->vs.page, pe};
    if (reclaim(d, span_missing(sp, size), &x) == 0 && convert_straddlers(d, sp, size) == 0) return XSEG_ENOMEM;
  }
}

/* The mapped free block that now holds [addr, addr+size). */
static xs_block_t *span_block(const span_t *sp, size_t size) {
  xs_block_t *b = run_first(sp);
  while (b && xs_block_end(b) <= sp->addr) b = b->next;
  xs_assert(b && b->state == XS_BLOCK_FREE && b->mapped && b->addr <= sp->addr &&
            xs_block_end(b) >= sp->addr + size);
  return b;
}

/* Placement.  Blocks are freed in an order nobody knows, so take each live
 * block to be freed independently (probability 1/2).  A page touched by n
 * blocks then strands memory unless all n are gone: expected stranded
 * bytes are page * (1 - 2^-n) minus half the data on it, and the data
 * part does not depend on where blocks go.  So a placement costs, per page
 * it touches, the rise of 1 - 2^-n: 1/2 for a page of its own, 1/4 for a
 * page it shares with one live neighbour, 1/8 with two (units: 1/8 page).
 * Sharing a neighbour's page is cheaper only when it saves a page; when it
 * does not, starting at the next page boundary leaves the neighbour's page
 * to the neighbour alone (a gap under a page that no large request fits
 * in, but one that is free as soon as the neighbour is).  On the shipped
 * traces this cut grow_then_split's min-budget overhead from 1.032 to
 * 1.025, logrand's from 1.012 to 1.010 and rmm_uniform's from 1.011 to
 * 1.008 (docs/benchmarks.md, "History").
 *
 * While the pool packs (packing) the neighbours are taken to live
 * to the end: a shared page then costs nothing more, a page of its own a
 * whole one, and ties go to the low end, so blocks lie back to back.  A
 * model's weights, whose sizes are often multiples of a quarter or an
 * eighth of a page, then fill their pages exactly; the rule above left a
 * gap at every tie and a recorded GPT-2 inference at 1.010 (1.002 packed). */
static unsigned place_cost(size_t page, uintptr_t f0, uintptr_t f1, uintptr_t x, size_t size, int pack) {
  const uintptr_t m = page - 1;
  uintptr_t q0 = x & ~m, q1 = (x + size - 1) & ~m;
  /* A page before f0 or after f1 holds the neighbour's data. */
  unsigned n0 = (q0 < f0) + (q0 + m >= f1), n1 = (q1 < f0) + (q1 + m >= f1);
  if (pack) { /* 4 >> 3: a shared page is free */
    n0 = n0 ? 3 : 0;
    n1 = n1 ? 3 : 0;
  }
  if (q0 == q1) return 4u >> n0;
  return (unsigned)(((q1 - q0) >> __builtin_ctzll(page)) - 1) * 4 + (4u >> n0) + (4u >> n1); /* page: a power of two */
}

static int packing(const xs_device_t *d, int cls) {
  const uint64_t base = d->pack_base[cls]; /* returned == handed == base then */
  return (d->returned[cls] - base) * XS_PACK_DIV < d->handed[cls] - base;
}

/* Place as while packing: the pool packs, or its shared pages empty
 * together (XS_TOGETHER_*). */
static int pack_places(const xs_device_t *d, int cls) {
  const uint32_t t = d->together, a = d->apart;
  return packing(d, cls) || (cls == XS_LARGE && t + a >= XS_TOGETHER_MIN && a * XS_TOGETHER_DIV < t + a);
}

/* A free left nothing live: this run's log becomes the latest.  It
 * replaces the log it followed from its first request on, if any, else
 * the oldest; that log's buffer takes the next run's places.  A run that
 * made no large request (a few small tensors between two workloads)
 * replaces none. */
static void rerun_turn(xs_device_t *d) {
  xs_rerun_t *r = &d->rerun;
  int out = r->guide >= 0 && r->next > 0 ? r->guide : XS_RERUN_LOGS - 1;
  r->guide = -1;
  r->following = 1;
  r->next = 0;
  if (r->rec.n == 0) return;
  const xs_runlog_t spare = r->logs[out];
  for (; out > 0; out--) r->logs[out] = r->logs[out - 1];
  r->logs[0] = r->rec;
  r->rec = (xs_runlog_t){spare.at, 0, spare.cap};
}

static void exp_note_free(xs_device_t *d, xs_block_t *b) {
  /* Nothing live: the program starts again.  The small pool packs again,
   * as after a new start (XS_PACK_DIV), and the next run follows the last
   * runs' places (rerun_turn); the large pool keeps what it learned
   * (expandable.h, XS_RERUN_*). */
  if (xs_live_bytes(d) == 0 && d->vmm.held > 0) {
    d->pack_base[XS_SMALL] = d->handed[XS_SMALL];
    rerun_turn(d);
  }
  if (b->seg->pool->cls != XS_LARGE) return; /* small blocks share pages by design, hundreds to a page */
  d->grown_streak = 0; /* the program no longer only allocates (grown_chunk) */
  const uint64_t n = ++d->large_frees;
  if (b->alone_since) {
    if (n - b->alone_since <= XS_TOGETHER_FREES)
      d->together++;
    else
      d->apart++;
    if (d->together + d->apart >= XS_TOGETHER_WINDOW) {
      d->together /= 2;
      d->apart /= 2;
    }
    b->alone_since = 0;
  }
  /* The live blocks on b's first and last pages are alone there now. */
  const uintptr_t m = b->seg->vs.page - 1, first = b->addr & ~m, last = ((xs_block_end(b) - 1) & ~m) + m;
  for (xs_block_t *x = b->prev; x && xs_block_end(x) > first; x = x->prev)
    if (x->state == XS_BLOCK_LIVE && !x->alone_since) x->alone_since = n;
  for (xs_block_t *x = b->next; x && x->addr < last; x = x->next)
    if (x->state == XS_BLOCK_LIVE && !x->alone_since) x->alone_since = n;
}

uintptr_t xs_exp_place(size_t page, uintptr_t f0, uintptr_t f1, size_t size, int both, int pack) {
  const uintptr_t m = page - 1;
  /* No neighbour's page to share (both ends aligned), or one page for
   * everything: the low end is as good as any. */
  if (((f0 | f1) & m) == 0 || (f0 & ~m) == ((f1 - 1) & ~m)) return f0;
  /* The ends, and the starts that keep each end off the neighbour's page. */
  const uintptr_t cand[5] = {f0, (f0 + m) & ~m, (f1 - size) & ~m, (f1 & ~m) - size, f1 - size};
  uintptr_t best = f0;
  unsigned best_cost = place_cost(page, f0, f1, f0, size, pack);
  for (int i = 1; i < (both ? 5 : 2); i++) {
    uintptr_t x = cand[i];
    if (x < f0 || x > f1 - size) continue; /* also (f1 & ~m) - size wrapped below zero */
    unsigned c = place_cost(page, f0, f1, x, size, pack);
    if (c < best_cost) {
      best_cost = c;
      best = x;
    }
  }
  return best;
}

static int holds_at_most(const xs_device_t *d, size_t div);
static int fresh_look(xs_device_t *d);

/* Does a device of this room have room for growth chunks (XS_GROWN_ROOM_DIV of
 * them: 64 GiB or more)?  Early pins then take chunks of any size too
 * (may_pin_early). */
static int large_room(size_t room) { return room / XS_GROWN_ROOM_DIV >= XS_GROWN_CHUNK; }

/* Has the growth chunks' budget room for `bytes` more: on a device with
 * room for XS_GROWN_ROOM_DIV chunks, within 1/XS_GROWN_PIN_DIV of the room
 * (expandable.h)?  Growth chunks use it first, small idle chunks what they
 * leave (idle_pin_budget). */
static int grown_budget_has(const xs_device_t *d, size_t bytes) {
  const size_t room = xs_vmm_room(&d->vmm);
  return !tight(d) && large_room(room) && d->pinned[XS_PINS_GROWN] + bytes <= room / XS_GROWN_PIN_DIV;
}

/* The chunk a growth for a large request of `size` bytes maps ahead, for
 * this request and the next ones (XS_GROWN_* in expandable.h), or 0: for a
 * request of at most 1/XS_GROWN_SPAN of the chunk, on a device that holds
 * at most 1/XS_EARLY_HELD_DIV of the room, within the budget.  Judged
 * again on a fresh look at the device, as every pin (fresh_look). */
static int grown_chunk_allowed(const xs_device_t *d) {
  return holds_at_most(d, XS_EARLY_HELD_DIV) && grown_budget_has(d, XS_GROWN_CHUNK);
}

static size_t grown_chunk(xs_device_t *d, const xs_pool_t *p, size_t size) {
  if (p->cls != XS_LARGE || size > XS_GROWN_CHUNK / XS_GROWN_SPAN || !grown_chunk_allowed(d)) return 0;
  if (fresh_look(d) && !grown_chunk_allowed(d)) return 0;
  /* While the program only allocates, each chunk may be twice the last, up
   * to XS_GROWN_STREAK_MAX, while it stays within 1/XS_GROWN_STREAK_DIV of
   * the chunks made since the last large free - but not while the pool
   * packs: what it hands out then lives to the end, and so would the pin
   * on a larger chunk's free rest (expandable.h). */
  size_t g = XS_GROWN_CHUNK;
  if (packing(d, p->cls)) return g;
  while (g < XS_GROWN_STREAK_MAX && g * 2 <= d->grown_streak / XS_GROWN_STREAK_DIV && grown_budget_has(d, g * 2))
    g *= 2;
  return g;
}

static int grow(xs_device_t *d, xs_pool_t *p, size_t size, int chunked, xs_fit_t *f) {
  size_t page = d->vmm.gran;
  if (xs_round_up(size, page) > d->vmm.limit || size > SIZE_MAX - page)
    return XSEG_ENOMEM; /* larger than the device: no remapping can help */
  /* garbage_collection_threshold: release cached memory before growing
   * past the fraction of the limit. */
  double gc = d->cfg->gc_threshold;
  if (gc > 0) {
    size_t cap = (size_t)(gc * (double)d->vmm.limit);
    if (d->vmm.held + size > cap && d->free_mapped > 0) {
      size_t over = d->vmm.held + size - cap;
      trim_to(d, d->free_mapped > over ? d->free_mapped - over : 0, 1);
    }
  }
  span_t sp = find_span(p, size, !tight(d));
  if (!sp.found) {
    xs_segment_t *seg = NULL;
    int rc = new_segment(d, p, size, &seg);
    if (rc != 0) return rc;
    sp = (span_t){seg, NULL, seg->vs.base, seg->vs.base, seg->vs.base + seg->vs.size, 0, 1, 0};
  }
  /* A new run starts at its low end (pages at the lowest address); whether
   * at the run's first byte or the next page boundary, xs_exp_place says. */
  int pack = packing(d, p->cls);
  if (sp.addr == sp.lo) sp.addr = xs_exp_place(page, sp.lo, sp.hi, size, 0, pack_places(d, p->cls));
  /* A chunk ahead: where the request's pages past the one it starts in
   * (mapped, and shared with the neighbour before, if the start is not
   * page-aligned) are fresh, with room behind them, one handle of g
   * bytes from the first fresh page on; the request takes its start and
   * pins it. */
  const size_t g = chunked ? grown_chunk(d, p, size) : 0;
  const size_t ext = g + (xs_round_up(sp.addr, page) - sp.addr);
  const int ahead = g && sp.hi - sp.addr >= ext && span_missing(&sp, ext) == g;
  /* Otherwise, while memory is plentiful, growth maps one handle per
   * request: the page holding the request's end goes into the request's
   * handle and the request takes that whole page, if the rest of it is at
   * most 1/XS_FOLD_DIV of the request (reported as rounding waste).  Under
   * pressure memory counts more than a driver call: the tail page gets a
   * page-sized handle that later blocks can share.  So it does while the
   * pool packs: what is allocated then is likely to live to the end, and
   * the next block would fill the rest. */
  int fold = !ahead && p->cls == XS_LARGE && !pack &&
             xs_vmm_headroom(&d->vmm) >= size + xs_vmm_room(&d->vmm) / XS_PLENTIFUL;
  int folded;
  int rc = map_span(d, &sp, ahead ? ext : size, fold, &folded);
  if (rc != 0) return rc;
  d->stats.num_grows++;
  const size_t take = folded ? xs_round_up(sp.addr + size, page) - sp.addr : size;
  *f = (xs_fit_t){span_block(&sp, take), sp.addr, take, NULL, 0};
  if (ahead) {
    f->pin = pins_big(d, f->b, f->addr, take);
    f->budget = XS_PINS_GROWN;
    d->grown_streak += g;
  }
  return 0;
}

/* ---- converting large chunks ------------------------------------------------------------ */

static xs_chunk_t *pins_big(const xs_device_t *d, const xs_block_t *f, uintptr_t addr, size_t size) {
  /* Only chunks at the two ends of the placement can be covered in part,
   * and only chunks wholly inside f hold no data: a chunk that reaches
   * into a neighbour is pinned by it already, and cannot be converted.
   * place_excess makes the same test inside the whole-chunk search. */
  const xs_vseg_t *vs = &f->seg->vs;
  const uintptr_t end = addr + size;
  const uintptr_t ends[2] = {addr, end - 1};
  (void)d;
  for (int i = 0; i < 2; i++) {
    if (covers_in_part(vs, xs_vseg_extent_at(vs, ends[i]), addr, end, f->addr, xs_block_end(f)))
      return xs_vseg_chunk_at(vs, ends[i]);
  }
  return NULL;
}

/* Does the device hold at most 1/div of the room (xs_vmm_room)? */
static int holds_at_most(const xs_device_t *d, size_t div) { return d->vmm.held <= xs_vmm_room(&d->vmm) / div; }

/* Less than 1/XS_PLENTIFUL of the room left: the room is the cap, or the
 * device's memory less what others hold (xs_vmm_room), so a device that
 * other processes or allocations outside xseg have nearly filled counts
 * as tight even far below the cap. */
static int tight(const xs_device_t *d) {
  const size_t room = xs_vmm_room(&d->vmm), held = d->vmm.held;
  return (held < room ? room - held : 0) < room / XS_PLENTIFUL;
}

/* A chunk of at most XS_PIECE_PAGES pages: converting it makes single
 * pages, so avoid_conversion pins it instead where it may. */
static int small_chunk(size_t size, size_t page) { return size < (size_t)(XS_PIECE_PAGES + 1) * page; }

/* The handles chunk [ca, cb) is re-made as when a block takes [a, b) of
 * it.  A large chunk (more than XS_PIECE_PAGES pages): the part before the
 * block, the page holding the block's start if the block shares it, the
 * pages the block fills, the page holding its end if shared, and the part
 * after - at most five parts, each wholly under the block or wholly
 * outside it, so every free page stays reclaimable, and each made as
 * handles of at most XS_PIECE_CAP_ROOMY while the device holds at most
 * 1/XS_PIECE_ROOMY_DIV of the room, else XS_PIECE_CAP (convert()); a later
 * block that covers a handle in part converts that handle again.  Under
 * pressure too: single pages there made a handle per page, and every move
 * of a page into a request an unmap, a map and a set access of its own
 * (docs/design.md, "Handle sizing").  A smaller chunk: single pages, which
 * never convert again.  Writes the page-aligned ends of the pieces into
 * cut[] and returns how many. */
static int pieces(uintptr_t ca, uintptr_t cb, uintptr_t a, uintptr_t b, size_t page,
                  uintptr_t cut[5]) {
  if (small_chunk(cb - ca, page)) return 0; /* pages */
  const uintptr_t m = page - 1;
  const uintptr_t raw[5] = {a & ~m, (a + m) & ~m, b & ~m, (b + m) & ~m, cb};
  int n = 0;
  uintptr_t last = ca;
  for (int i = 0; i < 5; i++) {
    uintptr_t x = raw[i] < ca ? ca : raw[i] > cb ? cb : raw[i];
    if (x > last) cut[n++] = last = x;
  }
  return n;
}

/* Does a conversion keep chunk c, just unmapped into the cache, rather than
 * release it (XS_KEEP_CUT_*)? */
static int keeps_cut(const xs_device_t *d, const xs_chunk_t *c) {
  const size_t room = xs_vmm_room(&d->vmm);
  return c->size >= XS_KEEP_CUT_MIN && large_room(room) && d->vmm.cache_bytes <= room / XS_KEEP_CUT_DIV;
}

/* Re-make chunk c (wholly inside free block f) as smaller handles, so that a
 * block placed at [a, b) covers each wholly or not at all (pieces()).
 * Waits for the GPU to be done with c if it is not.  *changed says whether
 * the blocks changed (the chunk was unmapped), even when the conversion
 * then failed. */
static int convert(xs_device_t *d, xs_block_t *f, xs_chunk_t *c, uintptr_t a, uintptr_t b, int *changed) {
  xs_segment_t *seg = f->seg;
  const size_t page = seg->vs.page;
  const uintptr_t ca = c->addr, cb = c->addr + c->size;
  const size_t size = c->size;
  *changed = 0;
  if (!xs_stream_safe(d, seg->pool->st, f->free_seq, 1)) return XSEG_EBACKEND; /* an event failed */
  uintptr_t cut[5];
  int n = pieces(ca, cb, a, b, page, cut);
  /* A block before the chunk that survives what follows: f itself if it
   * keeps a mapped part before the chunk, else its neighbour (live, or
   * unmapped and about to absorb the chunk's pages). */
  xs_block_t *anchor = ca > f->addr ? f : f->prev;
  /* [lo, hi): what is made again (XS_GIVE_BACK_PAGES). */
  uintptr_t lo = ca, hi = cb;
  /* Judged before the release below frees memory: */
  const int pressed = tight(d), small_pieces = holds_at_most(d, XS_PIECE_ROOMY_DIV);
  if (pressed) {
    const uintptr_t a0 = a / page * page, b1 = xs_round_up(b, page);
    if (a0 > ca && (a0 - ca) / page > XS_GIVE_BACK_PAGES) lo = a0;
    if (b1 < cb && (cb - b1) / page > XS_GIVE_BACK_PAGES) hi = b1;
  }
  int rc;
  unmap_chunk_of(d, f, c, &rc);
  if (rc != 0) return rc;
  *changed = 1; /* from here on the blocks around f are different */
  /* Give the large handle back first: its memory is what the new ones are
   * made of - unless memory is plentiful and it is worth keeping for a
   * later growth (keeps_cut).  (If the release fails it stays cached, and
   * the mapping below releases it or works around it.) */
  if (pressed || !keeps_cut(d, c)) xs_error_vmm(xs_vmm_cache_release_chunk(&d->vmm, c));
  if (xs_slab_reserve(&d->slab, 2) != 0) return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  uintptr_t done = lo;
  const size_t piece_max = xs_round_up(small_pieces ? XS_PIECE_CAP_ROOMY : XS_PIECE_CAP, page);
  if (n == 0) {
    rc = xs_error_vmm(xs_vseg_map(&d->vmm, &seg->vs, ca, cb, page, page, &done));
  } else {
    for (int i = 0; i < n && rc == 0; i++) {
      uintptr_t p0 = i ? cut[i - 1] : ca;
      if (cut[i] <= lo || p0 >= hi) continue; /* given back */
      if (done != p0) break;
      const size_t most = cut[i] - p0 < piece_max ? cut[i] - p0 : piece_max;
      rc = xs_error_vmm(xs_vseg_map(&d->vmm, &seg->vs, p0, cut[i], most, most, &done));
    }
  }
  if (done > lo) {
    xs_block_t *u = anchor ? anchor : seg->head;
    while (u && xs_block_end(u) <= lo) u = u->next;
    xs_assert(u && !u->mapped && u->addr <= lo && xs_block_end(u) >= hi);
    mark_mapped(d, u, lo, done);
  }
  d->stats.num_conversions++;
  d->stats.converted_bytes += size;
  /* What could not be mapped stays unmapped: consistent, and the caller
   * looks for a block again. */
  return rc;
}

/* ---- the strategy ------------------------------------------------------------------- */

/* Where to put `size` bytes in free block f: where it is expected to
 * strand the fewest free bytes in pages that hold data (xs_exp_place). */
static uintptr_t place(const xs_device_t *d, const xs_block_t *f, size_t size) {
  if (f->size == size) return f->addr;
  return xs_exp_place(d->vmm.gran, f->addr, xs_block_end(f), size, 1, pack_places(d, f->seg->pool->cls));
}

/* Fresh memory for `size` bytes that covers no large chunk in part: 1 and
 * *f set, or -1 (the attempt may have remapped pages: what was found is
 * stale, look again without growing). */
static int grow_whole(xs_device_t *d, xs_pool_t *p, size_t size, xs_fit_t *f) {
  xs_fit_t g;
  if (grow(d, p, size, 0, &g) == 0 && xs_slab_reserve(&d->slab, 2) == 0 && !pins_big(d, g.b, g.addr, g.take)) {
    *f = g;
    return 1;
  }
  xs_error_clear();
  return -1;
}

/* May a block pin large chunk c instead of converting it: while memory is
 * plentiful and pinned chunks stay within 1/XS_PIN_DIV of the room
 * (xs_vmm_room: the cap, or the device less what others hold). */
static int may_pin(const xs_device_t *d, const xs_chunk_t *c) {
  return !tight(d) && d->pinned[XS_PINS_SHARED] + c->size <= xs_vmm_room(&d->vmm) / XS_PIN_DIV;
}

/* Which budget may a small idle chunk c be pinned in, instead of being
 * converted into single pages: the shared one (may_pin), or, while the
 * device holds at most 1/XS_ROOMY_PIN_HELD_DIV of the room, a second one
 * of 1/XS_ROOMY_PIN_DIV that only such pins use, or, on a device with room
 * for growth chunks, what of their budget they leave (expandable.h).  -1:
 * none. */
static int idle_pin_budget(const xs_device_t *d, const xs_chunk_t *c) {
  if (may_pin(d, c)) return XS_PINS_SHARED;
  const size_t room = xs_vmm_room(&d->vmm);
  /* Holding a quarter of the room, the device is not tight. */
  if (holds_at_most(d, XS_ROOMY_PIN_HELD_DIV) && d->pinned[XS_PINS_ROOMY] + c->size <= room / XS_ROOMY_PIN_DIV)
    return XS_PINS_ROOMY;
  if (grown_budget_has(d, c->size)) return XS_PINS_GROWN;
  return -1;
}

/* Has the live peak held (risen by at most 1/XS_SETTLE_RISE) while the
 * program handed out XS_SETTLE_TURNS times that peak? */
static int peak_held(const xs_device_t *d) {
  return xs_handed_bytes(d) - d->peak_step_at >= d->live_peak * XS_SETTLE_TURNS;
}

/* Has the workload settled: has its peak held, on a device with room for
 * XS_SETTLED_ROOM times it and times what the device holds? */
static int settled(const xs_device_t *d) {
  return peak_held(d) && d->live_peak <= xs_vmm_room(&d->vmm) / XS_SETTLED_ROOM && holds_at_most(d, XS_SETTLED_ROOM);
}

/* Was a large request of `size` bytes asked for lately?  Records it too:
 * each size in a slot picked by a hash of it, the latest winning, so a
 * training step's sizes are seen again at the next step and random sizes
 * almost never (d->asked).  Decides whether the whole-chunk search uses
 * its memo, and, where the workload has settled, whether the best fit
 * moves away from pinned chunks and how far the search looks. */
static int asked_lately(xs_device_t *d, size_t size) {
  uint64_t *slot = &d->asked[((uint64_t)size * 0x9e3779b97f4a7c15ull >> 40) & (XS_ASKED_SLOTS - 1)];
  const int seen = *slot == (uint64_t)size;
  *slot = size;
  return seen;
}

/* May a block pin large chunk c of any size, charged to the surplus
 * budget: while memory is plentiful, and either the workload has settled
 * (surplus pins then within 1/XS_SETTLED_PIN_DIV of the room), or the
 * device holds more than 1/XS_SURPLUS_DIV above the live peak and at most
 * 1/XS_SURPLUS_HELD_DIV of the room and c is at most
 * 1/XS_SURPLUS_CHUNK_DIV of it (1/XS_TURNED_CHUNK_DIV once turned), or the
 * peak has held and it and c leave 1/XS_ROOMY_DIV of the room free (a
 * large workload that repeats; within 1/XS_PIN_DIV of the room,
 * 1/XS_TURNED_PIN_DIV once the program has handed out XS_TURNED times
 * that peak since its last new start; expandable.h). */
static int may_pin_surplus(const xs_device_t *d, const xs_chunk_t *c) {
  if (tight(d)) return 0;
  const size_t room = xs_vmm_room(&d->vmm);
  if (settled(d)) return d->pinned[XS_PINS_SURPLUS] + c->size <= room / XS_SETTLED_PIN_DIV;
  const uint64_t peak = d->live_peak;
  /* Handed out since the last new start (xs_empty_cache), as the peak. */
  const uint64_t handed = xs_handed_bytes(d) - d->start_handed;
  const int turned = handed >= peak * XS_TURNED;
  if (d->pinned[XS_PINS_SURPLUS] + c->size > room / (turned ? XS_TURNED_PIN_DIV : XS_PIN_DIV)) return 0;
  return (d->vmm.held > peak + peak / XS_SURPLUS_DIV && holds_at_most(d, XS_SURPLUS_HELD_DIV) &&
          c->size <= room / (turned ? XS_TURNED_CHUNK_DIV : XS_SURPLUS_CHUNK_DIV)) ||
         (peak_held(d) && peak + c->size + room / XS_ROOMY_DIV <= room);
}

/* May a block pin large idle chunk c, charged to the early budget, where
 * `uncovered` bytes of c lie outside the block: while the device holds at
 * most 1/XS_EARLY_HELD_DIV of the room, for a chunk of at most
 * 1/XS_EARLY_CHUNK_DIV of it, or of at most 1/XS_EARLY_WIDE_DIV of it
 * that the block leaves at most 1/XS_EARLY_CHUNK_DIV of uncovered, or of
 * any size on a device with room for growth chunks, within
 * 1/XS_EARLY_PIN_DIV of it (expandable.h).  Holding so little of the
 * room, the device is not tight. */
static int may_pin_early(const xs_device_t *d, const xs_chunk_t *c, size_t uncovered) {
  const size_t room = xs_vmm_room(&d->vmm);
  const int small = c->size <= room / XS_EARLY_CHUNK_DIV;
  const int covered = c->size <= room / XS_EARLY_WIDE_DIV && uncovered <= room / XS_EARLY_CHUNK_DIV;
  return holds_at_most(d, XS_EARLY_HELD_DIV) && (small || covered || large_room(room)) &&
         d->pinned[XS_PINS_EARLY] + c->size <= room / XS_EARLY_PIN_DIV;
}

/* May a block pin large idle chunk c, charged to the covered budget,
 * where it leaves `uncovered` bytes of c outside it: on a settled
 * workload, where those are at most XS_COVERED_PAGES pages and at most
 * 1/XS_COVERED_DIV of c, within 1/XS_SETTLED_PIN_DIV of the room
 * (expandable.h).  A settled device holds at most half the room, so it
 * is not tight. */
static int may_pin_covered(const xs_device_t *d, const xs_chunk_t *c, size_t uncovered) {
  return uncovered <= (size_t)XS_COVERED_PAGES * d->vmm.gran && uncovered <= c->size / XS_COVERED_DIV && settled(d) &&
         d->pinned[XS_PINS_COVERED] + c->size <= xs_vmm_room(&d->vmm) / XS_SETTLED_PIN_DIV;
}

/* May a request of `size` bytes take fresh memory rather than wait for
 * the GPU to finish with a chunk it would convert: on a device with room
 * to spare, only while the device then holds little more than the live
 * peak (XS_AHEAD_DIV, XS_AHEAD_ROOM in expandable.h). */
static int may_grow_ahead(const xs_device_t *d, size_t size) {
  const uint64_t need = xs_round_up(size, d->vmm.gran), live = xs_live_bytes(d) + size;
  const uint64_t peak = live > d->live_peak ? live : d->live_peak;
  return xs_vmm_room(&d->vmm) / XS_AHEAD_ROOM <= peak || d->vmm.held + need <= peak + peak / XS_AHEAD_DIV;
}

/* A pin outlives the moment it is made, and every pin budget is a share of
 * the room, so a pin about to be made is judged again on a fresh look at
 * the device if xseg has created since its last one: others may have taken
 * memory meanwhile.  An allocation outside xseg made after its last look
 * (a filler set up after empty_cache) let pins be made on a room eight
 * times the real one, and they lived on to the peak (docs/benchmarks.md,
 * "Early pins").  1: looked (judge again), 0: the last look stands.  A
 * look costs about 6 us, a conversion saved some 100. */
static int fresh_look(xs_device_t *d) {
  if (!d->vmm.unlooked) return 0;
  xs_vmm_look(&d->vmm);
  return 1;
}

/* May a request of n bytes pin large idle chunk c as a growth chunk again,
 * charged to the growth chunks' budget: c is at most a growth chunk in
 * size, the request at most 1/XS_GROWN_SPAN of it, on a device with room
 * for growth chunks, within their budget (XS_GROWN_* in expandable.h).
 * However much the device holds: a growth chunk's blocks freed, the next
 * step's requests of the same sizes land on it and would otherwise cut it
 * into three handles each. */
static int may_pin_regrown(const xs_device_t *d, const xs_chunk_t *c, size_t n) {
  return c->size <= XS_GROWN_CHUNK && n <= c->size / XS_GROWN_SPAN && grown_budget_has(d, c->size);
}

/* Which budget a large idle chunk c that a request at [a, a + n) covers
 * in part may be pinned in instead of being converted (avoid_conversion),
 * or -1. */
static int idle_pin_budget_of(const xs_device_t *d, const xs_chunk_t *c, uintptr_t a, size_t n) {
  if (small_chunk(c->size, d->vmm.gran)) return idle_pin_budget(d, c);
  if (may_pin_surplus(d, c)) return XS_PINS_SURPLUS;
  const uintptr_t lo = a > c->addr ? a : c->addr, hi = a + n < c->addr + c->size ? a + n : c->addr + c->size;
  const size_t uncovered = c->size - (hi > lo ? hi - lo : 0);
  if (may_pin_early(d, c, uncovered)) return XS_PINS_EARLY;
  if (may_pin_covered(d, c, uncovered)) return XS_PINS_COVERED;
  if (may_pin_regrown(d, c, n)) return XS_PINS_GROWN;
  return -1;
}

/* The request would pin large chunk c, whose stream the GPU may still be
 * using, and unmapping c would mean waiting.  Carving the block over it
 * anyway (a pin) costs nothing now, but the chunk's free pages stay stuck
 * for the block's life: so only while memory is plentiful and pins stay
 * within their budget (f->pin set, 1 returned).  Otherwise, with try_grow
 * and within may_grow_ahead, take fresh memory if the device has some (*f
 * replaced, 1), else -1: what was found is stale, look again ready to
 * wait.  0: wait and convert. */
static int pin_or_grow(xs_device_t *d, xs_pool_t *p, size_t size, xs_chunk_t *c, int try_grow, xs_fit_t *f) {
  if (may_pin(d, c) && (!fresh_look(d) || may_pin(d, c))) {
    f->pin = c;
    return 1;
  }
  if (!try_grow || !may_grow_ahead(d, size)) return 0;
  return grow_whole(d, p, size, f);
}

/* How much of free block f a request of `size` bytes at addr takes: size,
 * or, while memory is plentiful, up to the end of a large chunk that it
 * covers but for the rest of the chunk's last page, if that rest is at
 * most 1/XS_FOLD_DIV of the request.  This is the fold of growth (see
 * grow()) met again: a repeated request lands on the chunk its earlier
 * self folded, and takes it whole instead of converting it.
 * place_excess makes the same test inside the whole-chunk search. */
static size_t fit_take(const xs_device_t *d, const xs_block_t *f, uintptr_t addr, size_t size) {
  const xs_vseg_t *vs = &f->seg->vs;
  const uintptr_t end = addr + size;
  if (f->seg->pool->cls != XS_LARGE || tight(d)) return size;
  const xs_extent_t c = xs_vseg_extent_at(vs, end - 1);
  const uintptr_t cend = c.addr + c.size;
  if (c.size > vs->page && c.addr >= addr && cend > end && cend - end < vs->page && cend <= xs_block_end(f) &&
      cend - end <= size / XS_FOLD_DIV)
    return cend - addr;
  return size;
}

/* A place for `size` bytes inside pool p's mapped free memory that covers
 * every large chunk it touches wholly, so that nothing has to be
 * converted: the start of a free block or of a chunk in it.  Of those
 * whose chunks exceed the request by fewer than `limit` bytes, the one
 * that exceeds it by the fewest, and at once one that fits a chunk to
 * within a page: a shape met before finds the chunk its earlier self
 * left, and does not take a run of chunks that other shapes will want
 * (docs/design.md, "Handle sizing").  Smallest free blocks first, from
 * `first` (the best fit's block: xs_pool_fit's answer, so that the tree is
 * not walked down again), and only so many blocks and chunks are looked
 * at, to bound the search.
 * Where the workload has settled (settled()) and the size was not asked
 * for lately (`lately`: asked_lately, a random size), the first block that
 * has a place ends the search: there the walk on through later blocks for a
 * closer fit was most of a warm pass's time (rmm_uniform: 10.7 blocks and
 * 28 chunk steps a search, 87 % of allocations searching), and a closer
 * fit for a size that does not come back keeps no chunk for a later self.
 * Training steps repeat their sizes, and keep the full search.  A device
 * settles only with room for twice its live peak so far, so under a
 * budget near the final peak only an early plateau below half of it can
 * (host min budgets identical on every shipped trace; docs/benchmarks.md,
 * "The whole-chunk search for random sizes"). */
#define WHOLE_FIT_BLOCKS 32
#define WHOLE_FIT_CHUNKS 512

/* A place at a for `size` bytes in free block f, judged as fit_take and
 * pins_big judge it (a change to either belongs here too; the decisions
 * were checked equal on every shipped trace), from the two chunks that
 * decide it: lo, the chunk at a, and hi, the chunk holding the request's
 * last byte, which also holds the last byte taken (a fold takes up to that
 * chunk's end).  The caller has both where the place lies in one chunk.
 * The bytes of the chunks under the place beyond what it takes, or
 * SIZE_MAX if it covers a large chunk in f in part; *take set.  `fold`:
 * fit_take may fold (large pool, not tight). */
static size_t place_excess(const xs_vseg_t *vs, const xs_block_t *f, xs_extent_t lo, xs_extent_t hi, uintptr_t a,
                           size_t size, int fold, size_t *take) {
  const uintptr_t f0 = f->addr, f1 = xs_block_end(f), end = a + size;
  const uintptr_t hend = hi.addr + hi.size;
  *take = size;
  if (fold && hi.size > vs->page && hi.addr >= a && hend > end && hend - end < vs->page && hend <= f1 &&
      hend - end <= size / XS_FOLD_DIV)
    *take = hend - a;
  const uintptr_t tend = a + *take;
  if (covers_in_part(vs, lo, a, tend, f0, f1) || covers_in_part(vs, hi, a, tend, f0, f1))
    return SIZE_MAX; /* a conversion */
  return hend - lo.addr - *take;
}

/* What a block's search depends on - its bounds, the request, the fold
 * rule and the device's chunk layout (vmm.layout counts every map and
 * unmap) - hashed, with the low bits left for the steps it took (at most
 * WHOLE_FIT_CHUNKS).  Where a walk finds no place at all, the search keeps
 * this in d->no_fit, in a slot picked by the hash, and the next search for
 * that request skips the block while nothing of it changed: repeating
 * shapes otherwise walk the same chunks of the same blocks at every step,
 * and a training step asks for several sizes in turn (of the steps in
 * blocks without a place, two warm passes of torch_gpt2s_train keep 30 k
 * with 4,096 slots, 337 k with one memo per block; a memo of the range of
 * sizes a block has no place for, which random sizes hit too, was slower
 * on an H100 machine's CPU: docs/benchmarks.md, "The whole-chunk
 * search").  A collision of the stored bits (about 2^-54) would skip a
 * block that has a place, which only makes the search find another. */
#define NO_FIT_STEPS 1023u
_Static_assert(WHOLE_FIT_CHUNKS <= NO_FIT_STEPS, "a block's steps must fit under the hash");
static uint64_t no_fit_key(const xs_device_t *d, const xs_block_t *f, size_t size, int fold) {
  uint64_t h = (uint64_t)f->addr * 0x9e3779b97f4a7c15ull;
  h ^= (uint64_t)f->size + 0x632be59bd9b4e019ull * (uint64_t)size;
  h ^= (d->vmm.layout << 1 | (uint64_t)fold) * 0xc2b2ae3d27d4eb4full;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return h & ~(uint64_t)NO_FIT_STEPS;
}

static int whole_chunk_fit(xs_device_t *d, xs_pool_t *p, size_t size, size_t limit, xs_block_t *first, int lately,
                           xs_fit_t *out) {
  const size_t page = d->vmm.gran;
  const int fold = p->cls == XS_LARGE && !tight(d);
  /* The memo pays only for sizes asked for again: a size not asked for
   * lately (asked_lately; or since another size took its slot) neither
   * reads nor writes it.  Random sizes, which rarely repeat, then skip a
   * hash and a likely cache miss per block; skipping the memo never
   * changes a decision. */
  const int use_memo = lately;
  const int first_block = !lately && settled(d);
  size_t best = limit;
  int steps = 0;
  for (xs_block_t *f = first; f && steps < WHOLE_FIT_BLOCKS * 16; f = xs_tree_next(f)) {
    uint64_t key = 0, *memo = NULL;
    int known = 0;
    if (use_memo) {
      key = no_fit_key(d, f, size, fold);
      memo = &d->no_fit[(key / (NO_FIT_STEPS + 1)) & (XS_NO_FIT_SLOTS - 1)];
      known = (*memo & ~(uint64_t)NO_FIT_STEPS) == key;
      if (known && !XS_DEBUG_CHECKS) { /* debug builds walk it anyway, and check the memo below */
        steps += (int)(*memo & NO_FIT_STEPS);
        continue;
      }
    }
    const xs_vseg_t *vs = &f->seg->vs;
    const uintptr_t f0 = f->addr, f1 = xs_block_end(f);
    uintptr_t x = f0;
    int k = 0, placed = 0;
    for (; k < WHOLE_FIT_CHUNKS && x + size <= f1; k++, steps++) {
      const xs_extent_t c = xs_vseg_extent_at(vs, x);
      const uintptr_t cend = c.addr + c.size;
      /* A place starting here.  (One ending at c's end instead, where the
       * request fits inside c, covers the same chunks, c alone, takes as
       * much and so exceeds by as much: it can never beat this one.) */
      size_t take;
      const xs_extent_t hi = x + size <= cend ? c : xs_vseg_extent_at(vs, x + size - 1);
      const size_t e = place_excess(vs, f, c, hi, x, size, fold, &take);
      placed |= e != SIZE_MAX;
      if (e < best) {
        best = e;
        *out = (xs_fit_t){f, x, take, NULL, 0};
        if (e < page) return 1;
      }
      x = cend;
    }
    xs_assert_internal(!known || (!placed && (uint64_t)k == (*memo & NO_FIT_STEPS)));
    if (memo && !placed) *memo = key | (uint64_t)k;
    if (first_block && best != limit) return 1;
  }
  return best != limit;
}

/* May a request of `need` bytes (whole pages) take fresh memory rather
 * than convert large chunk c, which is at least XS_SPARE_RATIO times as
 * large (XS_SPARE_* in expandable.h)?  The caller has checked that
 * `headroom` holds the request, and passes the room and the live peak it
 * has read. */
static int spares_chunk(const xs_device_t *d, size_t need, size_t headroom, size_t room, uint64_t peak,
                        const xs_chunk_t *c) {
  return c->size >= XS_SPARE_MIN && c->size / XS_SPARE_RATIO >= need && headroom - need >= room / XS_ROOMY_DIV &&
         (peak + need) * XS_SPARE_ROOM <= room && d->vmm.held + need <= peak + peak / XS_SPARE_SLACK_DIV;
}

/* May a request of `size` bytes take fresh memory rather than convert
 * chunk c (XS_SPARE_*, XS_ROOMY_DIV, XS_SLACK_DIV, XS_NEAR_PEAK_DIV,
 * XS_NEAR_ROOM_MIN in expandable.h)?  The caller has checked that memory
 * is plentiful. */
static int grow_instead(const xs_device_t *d, size_t size, const xs_chunk_t *c) {
  const size_t need = xs_round_up(size, d->vmm.gran);
  const size_t headroom = xs_vmm_headroom(&d->vmm), room = xs_vmm_room(&d->vmm);
  const uint64_t peak = d->live_peak;
  const uint64_t live = xs_live_bytes(d);
  if (headroom < need) return 0;
  if (spares_chunk(d, need, headroom, room, peak, c)) return 1;
  if (live + size < peak - peak / XS_NEAR_PEAK_DIV) return 0;
  if (headroom - need >= room / XS_ROOMY_DIV) return d->vmm.held + need <= peak + peak / XS_SLACK_DIV;
  /* Near the room, for a workload that fills much of it, at its peak. */
  return size >= XS_NEAR_ROOM_MIN && peak >= room / XS_NEAR_ROOM_FILL_DIV &&
         live + size >= peak - peak / XS_NEAR_ROOM_PEAK_DIV;
}

/* The request's best fit would cover large free chunk c in part, and
 * converting c (an unmap and a release, then a create, map and set-access
 * per piece) is the costly answer.  Under pressure, where every byte
 * counts, a request of whole pages goes instead where it covers a run of
 * whole free chunks exactly (whole_chunk_fit with no excess), if there is
 * one: nothing is stranded in or beside it and no handle is made.  Looser
 * places (any size, within a page) left recorded ViT training twice the
 * partly used pages at its peak, gaps under a page between live blocks
 * (docs/benchmarks.md, "Exact whole-chunk places under pressure").  While
 * memory is plentiful: place the request where it covers whole chunks
 * (whole_chunk_fit); else, if c
 * would become single pages (XS_PIECE_PAGES: up to 16 handles) and a pin
 * budget allows, pin c, as for a busy chunk (idle_pin_budget: the shared
 * budget, or on a roomy device a second one; no driver call; its free pages
 * stay usable in place, and reclaimable once no block in it lives); else,
 * while the device holds well over the live peak, pin c whatever its size
 * within the surplus budget (may_pin_surplus); else, early in a run, while
 * the device holds a small part of the room, pin c if it is a small part of
 * it too, or if the request leaves a small part of it uncovered
 * (may_pin_early); else, where c is large and at least twice the request
 * and the room holds twice the live peak (spares_chunk, XS_SPARE_*), or
 * while the device is roomy and holds little more than the live peak
 * (grow_instead, XS_ROOMY_DIV and XS_SLACK_DIV), or near
 * the room at the peak of a workload that fills half of it
 * (XS_NEAR_ROOM_MIN), take fresh memory (one or two handles) and leave c
 * whole for a request of its own size.  1: *f holds the new place; 0:
 * convert after all; -1: a growth attempt failed and may have moved
 * pages, look again. */
static int avoid_conversion(xs_device_t *d, xs_pool_t *p, size_t size, int may_grow, int lately, xs_chunk_t *c,
                            xs_block_t *first, xs_fit_t *f) {
  if (tight(d)) return (size & (d->vmm.gran - 1)) == 0 && whole_chunk_fit(d, p, size, 1, first, lately, f);
  if (whole_chunk_fit(d, p, size, SIZE_MAX, first, lately, f)) return 1;
  int budget = idle_pin_budget_of(d, c, f->addr, f->take);
  if (budget >= 0 && fresh_look(d)) budget = idle_pin_budget_of(d, c, f->addr, f->take);
  if (budget >= 0) {
    f->pin = c;
    f->budget = budget;
    return 1;
  }
  if (!may_grow || !grow_instead(d, size, c)) return 0;
  return grow_whole(d, p, size, f);
}

/* Does [a, a + n) in free block f touch a chunk that reaches past f, into
 * a live block (a chunk larger than a page holds data only when pinned)? */
static int in_pinned(const xs_block_t *f, uintptr_t a, size_t n) {
  const xs_vseg_t *vs = &f->seg->vs;
  const uintptr_t ends[2] = {a, a + n - 1};
  for (int i = 0; i < 2; i++) {
    const xs_extent_t c = xs_vseg_extent_at(vs, ends[i]);
    if (c.size > vs->page && (c.addr < f->addr || c.addr + c.size > xs_block_end(f))) return 1;
  }
  return 0;
}

/* Does free block f lie wholly inside one chunk that reaches past it (so
 * that in_pinned holds for every place in f)? */
static int inside_pinned(const xs_block_t *f) {
  const xs_vseg_t *vs = &f->seg->vs;
  const xs_extent_t c = xs_vseg_extent_at(vs, f->addr);
  const uintptr_t f1 = xs_block_end(f), cend = c.addr + c.size;
  return c.size > vs->page && cend >= f1 && (c.addr < f->addr || cend > f1);
}

/* The best fit *f lies in a pinned chunk: move it, if a place outside
 * every pinned chunk is among the next free blocks up in size (XS_GUEST_*
 * in expandable.h).  The caller skips this where the workload has settled
 * and the size was not asked for lately (asked_lately): the rule of the
 * whole-chunk search's early stop.  There, with room for twice the live
 * peak, a guest of a pin strands nothing that is needed, and a size that
 * does not come back leaves no layout for a later self; the walk up the
 * free blocks was a fifth of a warm pass of rmm_uniform on the host, and
 * what it found was most often replaced by the whole-chunk search's answer
 * (docs/benchmarks.md, "Moving away from pins once settled"). */
static void away_from_pins(const xs_device_t *d, size_t size, xs_fit_t *f) {
  int k = 0;
  for (xs_block_t *b = xs_tree_next(f->b); b && k < XS_GUEST_LOOK && b->size / XS_GUEST_SPAN <= size;
       b = xs_tree_next(b), k++) {
    if (inside_pinned(b)) continue; /* every place in b is: no need to find one */
    uintptr_t a = place(d, b, size);
    size_t take = fit_take(d, b, a, size);
    if (!in_pinned(b, a, take)) {
      f->b = b;
      f->addr = a;
      f->take = take;
      return;
    }
  }
}

/* A place for a small request of `size` bytes in large pool `large`
 * (XS_GAP_ROOM_PAGES in expandable.h): the free bytes of a page that a
 * live block holds in part, at the head or tail of a free block, beside
 * that live neighbour, and on a page-sized chunk, so that no free page
 * and no pin is held longer.  Of those that fit, the smallest; the place
 * lies against the neighbour.  1: *out set. */
static int small_in_gap(const xs_device_t *d, const xs_pool_t *large, size_t size, xs_fit_t *out) {
  const uintptr_t m = d->vmm.gran - 1;
  size_t best = SIZE_MAX;
  for (xs_block_t *f = xs_tree_lower_bound(&large->free, size); f; f = xs_tree_next(f)) {
    const uintptr_t f0 = f->addr, f1 = xs_block_end(f);
    for (int tail = 0; tail < 2; tail++) {
      const xs_block_t *nb = tail ? f->next : f->prev;
      if (!nb || nb->state == XS_BLOCK_FREE || ((tail ? f1 : f0) & m) == 0) continue;
      /* The part of f on the page it shares with nb. */
      const uintptr_t g0 = tail && (f1 & ~m) > f0 ? f1 & ~m : f0;
      const uintptr_t g1 = !tail && ((f0 + m) & ~m) < f1 ? (f0 + m) & ~m : f1;
      if (g1 - g0 < size || g1 - g0 >= best || xs_vseg_extent_at(&f->seg->vs, g0).size != m + 1) continue;
      best = g1 - g0;
      *out = (xs_fit_t){f, tail ? g1 - size : g0, size, NULL, 0};
    }
  }
  return best != SIZE_MAX;
}

/* May a small request take a large page's free bytes (small_in_gap)? */
static int small_may_share(const xs_device_t *d) {
  return xs_vmm_room(&d->vmm) <= (size_t)XS_GAP_ROOM_PAGES * d->vmm.gran && packing(d, XS_SMALL);
}

/* ---- running again: the last run's layout (XS_RERUN_* in expandable.h) ------------------- */

/* Large request of `size` bytes placed at *f: note it in this run's log. */
static void rerun_note(xs_device_t *d, size_t size, const xs_fit_t *f) {
  xs_runlog_t *l = &d->rerun.rec;
  if (l->n == l->cap) {
    const uint32_t cap = l->cap ? 2 * l->cap : XS_RERUN_FIRST;
    xs_place_t *at = cap <= XS_RERUN_CAP ? realloc(l->at, cap * sizeof *at) : NULL;
    if (!at) return; /* the rest of this run is not followed: no harm */
    l->at = at;
    l->cap = cap;
  }
  if (size / XS_ALIGN > UINT32_MAX || f->take / XS_ALIGN > UINT32_MAX) return;
  const uintptr_t tag = f->pin ? (uintptr_t)f->budget + 1 : 0;
  l->at[l->n++] = (xs_place_t){f->addr | tag, (uint32_t)(size / XS_ALIGN), (uint32_t)(f->take / XS_ALIGN)};
}

/* The free mapped block of pool p that holds [a, a + n): looked for among
 * the XS_RERUN_LOOK blocks up from n in size (a hole the size of the
 * request) and the XS_RERUN_LOOK largest (the free range a run carves
 * from); NULL if neither holds it. */
static xs_block_t *rerun_block(const xs_pool_t *p, uintptr_t a, size_t n) {
  xs_block_t *b = xs_tree_lower_bound(&p->free, n);
  for (int k = 0; b && k < XS_RERUN_LOOK; k++, b = xs_tree_next(b))
    if (b->addr <= a && xs_block_end(b) >= a + n) return b;
  b = xs_tree_last(&p->free);
  for (int k = 0; b && k < XS_RERUN_LOOK && b->size >= n; k++, b = xs_tree_prev(b))
    if (b->addr <= a && xs_block_end(b) >= a + n) return b;
  return NULL;
}

/* The budget a followed place that covers idle chunk c in part pins it
 * in: the one it was charged to last time; else one the usual rules allow
 * (c was made later in the last run, over places it had taken fresh),
 * else the shared one; -1 under pressure, or where pins of every budget
 * would hold more than 1/XS_RERUN_PIN_DIV of the room (expandable.h).
 * No single budget's bound is checked: a run that takes its last run's
 * places maps nothing, and the chunks it pins are that run's, mapped and
 * free.  Where a place was refused for a budget (within what it held last
 * time), the request went elsewhere, took a later request's place, and so
 * on: half a run followed left rmm_uniform's later runs at 11,628 MiB
 * with 24 GiB of room, 307 driver calls in the second, against 11,126 MiB
 * and none now. */
static int rerun_budget(const xs_device_t *d, const xs_chunk_t *c, int budget, uintptr_t a, size_t n) {
  size_t pinned = c->size;
  for (int k = 0; k < XS_PINS; k++) pinned += d->pinned[k];
  if (tight(d) || pinned > xs_vmm_room(&d->vmm) / XS_RERUN_PIN_DIV) return -1;
  if (budget >= 0) return budget;
  const int k = idle_pin_budget_of(d, c, a, n);
  return k >= 0 ? k : XS_PINS_SHARED;
}

/* Where the last run's request of this ordinal went, if this one has its
 * size and that place is free and mapped in pool p, pinning an idle chunk
 * it covers in part only within a budget (rerun_budget): 1 and *out set;
 * else 0, and the usual path places the request.  A run's first request
 * picks the log to follow: the latest that began with its size (runs of
 * a few kinds may alternate).  A request of another size than the
 * guide's ends the following until the next run. */
static int rerun_fit(xs_device_t *d, xs_pool_t *p, size_t size, xs_fit_t *out) {
  xs_rerun_t *r = &d->rerun;
  if (!r->following) return 0;
  if (r->guide < 0) {
    for (int i = 0; i < XS_RERUN_LOGS && r->guide < 0; i++)
      if (r->logs[i].n && (size_t)r->logs[i].at[0].size * XS_ALIGN == size) r->guide = i;
  }
  const xs_runlog_t *g = r->guide >= 0 ? &r->logs[r->guide] : NULL;
  if (!g || r->next >= g->n || (size_t)g->at[r->next].size * XS_ALIGN != size) {
    r->following = 0; /* another workload, or the same one taking another path */
    return 0;
  }
  const xs_place_t e = g->at[r->next++];
  const uintptr_t a = e.addr & ~(uintptr_t)(XS_ALIGN - 1);
  const size_t take = (size_t)e.take * XS_ALIGN;
  const int budget = (int)(e.addr & (XS_ALIGN - 1)) - 1;
  xs_block_t *b = rerun_block(p, a, take);
  if (!b || (size < d->max_split && b->size >= d->max_split)) return 0;
  *out = (xs_fit_t){b, a, take, pins_big(d, b, a, take), budget};
  if (!out->pin) return 1;
  out->budget = rerun_budget(d, out->pin, budget, a, take);
  if (out->budget >= 0 && fresh_look(d)) out->budget = rerun_budget(d, out->pin, budget, a, take);
  return out->budget >= 0;
}

static int place_request(xs_device_t *d, xs_pool_t *p, size_t size, int lately, xs_fit_t *out);

static int exp_acquire(xs_device_t *d, xs_pool_t *p, size_t size, xs_fit_t *out) {
  if (p->cls != XS_LARGE) return place_request(d, p, size, 0, out);
  const int lately = asked_lately(d, size);
  if (rerun_fit(d, p, size, out)) {
    if (xs_slab_reserve(&d->slab, 2) != 0) {
      xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
      return XS_FAILED;
    }
  } else {
    int rc = place_request(d, p, size, lately, out);
    if (rc != 0) return rc;
  }
  rerun_note(d, size, out);
  return 0;
}

/* A place for `size` bytes in pool p by the usual rules (exp_acquire). */
static int place_request(xs_device_t *d, xs_pool_t *p, size_t size, int lately, xs_fit_t *out) {
  int may_grow = 1; /* may take fresh memory rather than wait for the GPU or convert */
  for (;;) {
    xs_fit_t f = {xs_pool_fit(d, p, size), 0, size, NULL, 0};
    xs_block_t *const first = f.b; /* the smallest free block that fits: where the whole-chunk search starts */
    if (!f.b && p->cls == XS_SMALL && small_may_share(d) && small_in_gap(d, &p->st->pools[XS_LARGE], size, &f)) {
      *out = f;
      return 0;
    }
    int grown = f.b == NULL;
    if (grown) {
      int rc = grow(d, p, size, 1, &f);
      if (rc != 0) return rc;
    } else {
      f.addr = place(d, f.b, size);
      f.take = fit_take(d, f.b, f.addr, size);
      if (p->cls == XS_LARGE && (lately || !settled(d)) && in_pinned(f.b, f.addr, f.take))
        away_from_pins(d, size, &f);
    }
    if (xs_slab_reserve(&d->slab, 2) != 0) {
      xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
      return XS_FAILED;
    }
    /* Keep every free page reclaimable: a block must not pin a whole page
     * of a large handle that holds no data, so that handle is re-made as
     * smaller ones first (pieces, or pages, which never convert again),
     * and the search starts over - unless avoid_conversion or pin_or_grow
     * finds a cheaper answer within their bounds (docs/design.md, "Handle
     * sizing"). */
    xs_chunk_t *c = f.pin ? NULL : pins_big(d, f.b, f.addr, f.take); /* a growth chunk is pinned already */
    if (c && !grown) {
      int r = avoid_conversion(d, p, size, may_grow, lately, c, first, &f);
      if (r < 0) {
        may_grow = 0;
        continue;
      }
      if (r > 0) c = NULL;
    }
    if (c && !xs_stream_safe(d, f.b->seg->pool->st, f.b->free_seq, 0)) {
      int r = pin_or_grow(d, p, size, c, may_grow && !grown, &f);
      if (r < 0) {
        may_grow = 0;
        continue;
      }
      if (r > 0) c = NULL; /* pinned, or fresh memory */
    }
    if (!c) {
      *out = f;
      return 0;
    }
    /* A conversion changes the blocks around f.b: look again afterwards.
     * One that ran out of memory after unmapping the handle left its pages
     * unmapped, which the next growth maps through the pressure path.
     * Otherwise a failure fails the allocation: carving would pin the
     * handle, and retrying would meet the same refusal. */
    int changed;
    int rc = convert(d, f.b, c, f.addr, f.addr + f.take, &changed);
    if (rc == 0 || (rc == XSEG_ENOMEM && changed)) continue;
    return rc;
  }
}

static int exp_should_split(const xs_device_t *d, const xs_block_t *b, size_t size) {
  (void)d;
  return b->size - size >= XS_ALIGN; /* pages keep any remainder reusable */
}

static void exp_trim(xs_device_t *d, size_t keep) { trim_to(d, keep, 0); }

static int exp_enable_peer(xs_device_t *d, int peer) {
  int can = 0;
  if (xs_vmm_can_access_peer(&d->vmm, peer, &can) != 0 || !can)
    return xs_error(XSEG_ENOTSUP, "xseg: device %d cannot access device %d", peer, d->id);
  xs_vmm_add_peer(&d->vmm, peer);
  /* Pages mapped before now get access too; later ones get it when mapped. */
  for (size_t i = 0; i < d->nstreams; i++) {
    for (int k = 0; k < XS_NCLASS; k++) {
      for (xs_segment_t *s = d->streams[i]->pools[k].segs; s; s = s->next) {
        int rc = xs_vseg_set_access(&d->vmm, &s->vs);
        if (rc != 0) return xs_error_vmm(rc);
      }
    }
  }
  return 0;
}

static void exp_destroy_pool(xs_device_t *d, xs_pool_t *p) {
  xs_segment_t *seg = p->segs;
  while (seg) {
    xs_segment_t *next = seg->next;
    /* Still mapped (an unmap was refused) or blocks left: leave it
     * allocated rather than free what the driver may still map. */
    if (seg->vs.mapped == 0 && seg->head && !seg->head->next) {
      xs_segment_drop(d, seg);
      xs_vseg_free(&d->vmm, &seg->vs); /* a failure leaves the range reserved, nothing worse */
      free(seg);
    }
    seg = next;
  }
}

const xs_strategy_t xs_expandable_strategy = {
    .name = "expandable",
    .auto_max_split = SIZE_MAX, /* expandable segments have no split problem */
    .acquire = exp_acquire,
    .should_split = exp_should_split,
    .note_free = exp_note_free,
    .trim = exp_trim,
    .empty = exp_empty,
    .enable_peer = exp_enable_peer,
    .destroy_pool = exp_destroy_pool,
};
