/* pool/binned.c: the binned strategy, the fallback when VMM is off
 * (expandable_segments:False) or missing on the device.
 *
 * As the caching allocator PyTorch users know: memory comes in whole
 * segments, one cuMemAlloc each (a fixed range, vmm/segment.c), sized by
 * the request - 2 MiB for requests up to 1 MiB, 20 MiB for requests under
 * 10 MiB, else the request rounded up to 2 MiB - and cut by the same best
 * fit, split and merge as expandable segments (block.c).  A segment never
 * grows or shrinks; it goes back to the driver only when wholly free: on
 * xseg_empty_cache, on the out-of-memory retry, past
 * garbage_collection_threshold (oldest first) or past release_threshold_mb.
 * Callers hold the device lock.
 */
#include <stdlib.h>

#include "device.h"

static size_t segment_size(const xs_device_t *d, size_t size) {
  size_t s;
  if (size <= XS_SMALL_MAX)
    s = XS_BINNED_SMALL_SEG;
  else if (size < XS_BINNED_MID_MAX)
    s = XS_BINNED_MID_SEG;
  else
    s = size > SIZE_MAX - XS_BINNED_SMALL_SEG ? 0 : xs_round_up(size, XS_BINNED_SMALL_SEG);
  return s == 0 || s > SIZE_MAX - d->vmm.gran ? 0 : xs_round_up(s, d->vmm.gran);
}

static int new_segment(xs_device_t *d, xs_pool_t *p, size_t size, xs_segment_t **out) {
  xs_segment_t *seg = calloc(1, sizeof *seg);
  if (!seg || xs_slab_reserve(&d->slab, 1) != 0) {
    free(seg);
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  }
  int rc = xs_vseg_alloc_fixed(&d->vmm, &seg->vs, size, p->cls);
  if (rc != 0) {
    free(seg);
    return xs_error_vmm(rc);
  }
  seg->binned = 1;
  xs_segment_adopt(d, p, seg, 1);
  if (size >= d->max_split) xs_stat_one(&d->stats.oversize_segments, 1);
  *out = seg;
  return 0;
}

/* Free a wholly free segment; 0 or the error (the segment then stays). */
static int free_segment(xs_device_t *d, xs_segment_t *seg) {
  size_t size = seg->vs.size;
  int rc = xs_vseg_free(&d->vmm, &seg->vs);
  if (rc != 0) return xs_error_vmm(rc);
  if (size >= d->max_split) xs_stat_one(&d->stats.oversize_segments, -1);
  xs_segment_drop(d, seg);
  free(seg);
  return 0;
}

static int wholly_free(const xs_segment_t *seg) {
  const xs_block_t *b = seg->head;
  return b->state == XS_BLOCK_FREE && b->next == NULL;
}

static int by_age(const void *a, const void *b) {
  const xs_segment_t *x = *(xs_segment_t *const *)a, *y = *(xs_segment_t *const *)b;
  return x->last_free_ns < y->last_free_ns ? -1 : x->last_free_ns > y->last_free_ns;
}

static int by_size_desc(const void *a, const void *b) {
  const xs_segment_t *x = *(xs_segment_t *const *)a, *y = *(xs_segment_t *const *)b;
  return x->vs.size > y->vs.size ? -1 : x->vs.size < y->vs.size;
}

/* Every wholly free segment of the device outside open private pools, in
 * a new array (*n of them); what fits in host memory when it runs out. */
static xs_segment_t **free_segments(xs_device_t *d, size_t *n) {
  size_t cap = 0;
  xs_segment_t **v = NULL;
  *n = 0;
  for (size_t i = 0; i < d->nstreams; i++) {
    if (d->streams[i]->keep) continue; /* an open private pool keeps its segments */
    for (int k = 0; k < XS_NCLASS; k++) {
      for (xs_segment_t *s = d->streams[i]->pools[k].segs; s; s = s->next) {
        if (!wholly_free(s)) continue;
        if (*n == cap) {
          cap = cap ? cap * 2 : 32;
          xs_segment_t **nv = realloc(v, cap * sizeof *nv);
          if (!nv) return v; /* out of host memory: free what was found */
          v = nv;
        }
        v[(*n)++] = s;
      }
    }
  }
  return v;
}

/* Free wholly free segments until `target` bytes are freed; oldest first
 * (garbage_collection_threshold) or largest first.  Returns bytes freed. */
static size_t release(xs_device_t *d, size_t target, int oldest_first) {
  size_t n, freed = 0;
  xs_segment_t **v = free_segments(d, &n);
  if (n) qsort(v, n, sizeof *v, oldest_first ? by_age : by_size_desc);
  for (size_t i = 0; i < n && freed < target; i++) {
    xs_segment_t *s = v[i];
    size_t size = s->vs.size;
    /* cuMemFree synchronises anyway; the fence keeps the host backend and
     * the model honest about what the GPU may still touch. */
    if (!xs_stream_safe(d, s->pool->st, s->head->free_seq, 1)) continue;
    if (free_segment(d, s) == 0) freed += size;
  }
  free(v);
  return freed;
}

static int grow(xs_device_t *d, xs_pool_t *p, size_t size, xs_block_t **out) {
  size_t ssz = segment_size(d, size);
  if (ssz == 0 || ssz > d->vmm.limit) return XSEG_ENOMEM;
  double gc = d->cfg->gc_threshold;
  if (gc > 0) {
    size_t cap = (size_t)(gc * (double)d->vmm.limit);
    if (d->vmm.held + ssz > cap) release(d, d->vmm.held + ssz - cap, 1);
  }
  xs_segment_t *seg;
  int rc = new_segment(d, p, ssz, &seg);
  if (rc == XSEG_ENOMEM) {
    /* Free every cached segment and retry once, as PyTorch does. */
    d->stats.num_alloc_retries++;
    if (release(d, SIZE_MAX, 0) > 0) rc = new_segment(d, p, ssz, &seg);
  }
  if (rc != 0) return rc;
  d->stats.num_grows++;
  *out = seg->head;
  return 0;
}

/* ---- the strategy -------------------------------------------------------------------- */

static int bin_acquire(xs_device_t *d, xs_pool_t *p, size_t size, xs_fit_t *out) {
  /* Oversize blocks are handed out unsplit, so, as PyTorch, an oversize
   * request takes one only if little is wasted.  A request counts as
   * oversize when the segment it would get is: otherwise a request just
   * under max_split_size would make a segment that no request of its own
   * size could use again, and a repeating workload would add one per
   * pass. */
  int oversize = size >= d->max_split || segment_size(d, size) >= d->max_split;
  xs_block_t *b = oversize ? xs_tree_lower_bound(&p->free, size) : xs_pool_fit(d, p, size);
  if (b && oversize && b->size >= size + XS_OVERSIZE_SLACK) b = NULL;
  if (!b) {
    int rc = grow(d, p, size, &b);
    if (rc != 0) return rc;
  }
  if (xs_slab_reserve(&d->slab, 2) != 0) {
    xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
    return XS_FAILED;
  }
  /* No pages to keep free: the low end. */
  *out = (xs_fit_t){b, b->addr, size, NULL, 0};
  return 0;
}

static int bin_should_split(const xs_device_t *d, const xs_block_t *b, size_t size) {
  size_t rest = b->size - size;
  if (rest < XS_ALIGN) return 0;
  if (b->size >= d->max_split) return 0; /* oversize blocks stay whole */
  if (b->seg->pool->cls == XS_LARGE) return rest > XS_SMALL_MAX; /* a sliver under 1 MiB would never be reused */
  return 1;
}

static void bin_trim(xs_device_t *d, size_t keep) { release(d, d->free_mapped - keep, 1); }

static int bin_empty(xs_device_t *d) {
  release(d, SIZE_MAX, 0);
  return 0;
}

static int bin_enable_peer(xs_device_t *d, int peer) {
  (void)peer;
  return xs_error(XSEG_ENOTSUP, "xseg: peer access needs expandable segments (device %d runs the binned pool)",
                  d->id);
}

static void bin_destroy_pool(xs_device_t *d, xs_pool_t *p) {
  xs_segment_t *seg = p->segs;
  while (seg) {
    xs_segment_t *next = seg->next;
    if (wholly_free(seg)) free_segment(d, seg);
    seg = next;
  }
}

const xs_strategy_t xs_binned_strategy = {
    .name = "binned",
    .auto_max_split = XS_BINNED_AUTO_SPLIT,
    .acquire = bin_acquire,
    .should_split = bin_should_split,
    .trim = bin_trim,
    .empty = bin_empty,
    .enable_peer = bin_enable_peer,
    .destroy_pool = bin_destroy_pool,
};
