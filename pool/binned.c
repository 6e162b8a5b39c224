/* pool/binned.c: where memory comes from in binned mode, the fallback when
 * VMM is off (expandable_segments:False) or missing on the device.
 *
 * As the caching allocator PyTorch users know: memory comes in whole
 * segments, one cuMemAlloc each (on the host backend, one handle mapped
 * once), sized by the request - 2 MiB for requests up to 1 MiB, 20 MiB for
 * requests under 10 MiB, else the request rounded up to 2 MiB - and cut by
 * the same best fit, split and merge as expandable segments (block.c).  A
 * segment never grows or shrinks; it goes back to the driver only when
 * wholly free: on xseg_empty_cache, on the out-of-memory retry, past
 * garbage_collection_threshold (oldest first) or past release_threshold_mb.
 * Callers hold the device lock.
 */
#include <stdlib.h>

#include "internal.h"

static inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t segment_size(const xs_device_t *d, size_t size) {
  size_t s;
  if (size <= XS_SMALL_MAX)
    s = XS_BINNED_SMALL_SEG;
  else if (size < XS_BINNED_MID_MAX)
    s = XS_BINNED_MID_SEG;
  else
    s = size > SIZE_MAX - XS_BINNED_SMALL_SEG ? 0 : round_up(size, XS_BINNED_SMALL_SEG);
  return s == 0 || s > SIZE_MAX - d->phys.gran ? 0 : round_up(s, d->phys.gran);
}

static int new_segment(xs_device_t *d, xs_pool_t *p, size_t size, xs_segment_t **out) {
  xs_segment_t *seg = calloc(1, sizeof *seg);
  xs_block_t *b = xs_block_new(&d->slab);
  if (!seg || !b) {
    free(seg);
    if (b) xs_block_delete(&d->slab, b);
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  }
  int rc = xs_phys_mem_alloc(d, size, &seg->base);
  if (rc != 0) {
    free(seg);
    xs_block_delete(&d->slab, b);
    return rc;
  }
  seg->size = size;
  seg->binned = 1;
  seg->via_mem_alloc = 1;
  seg->page = d->phys.gran;
  xs_pool_add_segment(p, seg);
  b->addr = seg->base;
  b->size = size;
  b->seg = seg;
  b->mapped = 1;
  seg->head = b;
  xs_stat_add(d->stats.reserved_bytes, p->cls, (int64_t)size);
  xs_stat_add(d->stats.segment, p->cls, 1);
  xs_free_insert(d, b);
  *out = seg;
  return 0;
}

/* Free a wholly free segment; 0 or the error (the segment then stays). */
static int free_segment(xs_device_t *d, xs_segment_t *seg) {
  xs_pool_t *p = seg->pool;
  xs_block_t *b = seg->head;
  xs_free_remove(d, b);
  int rc = xs_phys_mem_free(d, seg->base, seg->size);
  if (rc != 0) {
    xs_free_insert(d, b);
    return rc;
  }
  xs_stat_add(d->stats.reserved_bytes, p->cls, -(int64_t)seg->size);
  xs_stat_add(d->stats.segment, p->cls, -1);
  xs_block_delete(&d->slab, b);
  xs_pool_remove_segment(p, seg);
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
  return x->size > y->size ? -1 : x->size < y->size;
}

size_t xs_bin_release(xs_device_t *d, size_t target, int oldest_first) {
  size_t n = 0, cap = 0, freed = 0;
  xs_segment_t **v = NULL;
  for (size_t i = 0; i < d->nstreams; i++) {
    for (int k = 0; k < XS_NCLASS; k++) {
      for (xs_segment_t *s = d->streams[i]->pools[k].segs; s; s = s->next) {
        if (!wholly_free(s)) continue;
        if (n == cap) {
          cap = cap ? cap * 2 : 32;
          xs_segment_t **nv = realloc(v, cap * sizeof *nv);
          if (!nv) goto done; /* out of host memory: free what was found */
          v = nv;
        }
        v[n++] = s;
      }
    }
  }
done:
  if (n) qsort(v, n, sizeof *v, oldest_first ? by_age : by_size_desc);
  for (size_t i = 0; i < n && freed < target; i++) {
    xs_segment_t *s = v[i];
    size_t size = s->size;
    /* cuMemFree synchronises anyway; the fence keeps the host backend and
     * the model honest about what the GPU may still touch. */
    if (!xs_stream_safe(d, s->pool->st, s->head->free_seq, 1)) continue;
    if (free_segment(d, s) == 0) freed += size;
  }
  free(v);
  return freed;
}

int xs_bin_grow(xs_device_t *d, xs_pool_t *p, size_t size, xs_block_t **out) {
  size_t ssz = segment_size(d, size);
  if (ssz == 0 || ssz > d->phys.limit) return XSEG_ENOMEM;
  double gc = d->cfg->gc_threshold;
  if (gc > 0) {
    size_t cap = (size_t)(gc * (double)d->phys.limit);
    if (d->phys.held + ssz > cap) xs_bin_release(d, d->phys.held + ssz - cap, 1);
  }
  xs_segment_t *seg;
  int rc = new_segment(d, p, ssz, &seg);
  if (rc == XSEG_ENOMEM) {
    /* Free every cached segment and retry once, as PyTorch does. */
    d->stats.num_alloc_retries++;
    if (xs_bin_release(d, SIZE_MAX, 0) > 0) rc = new_segment(d, p, ssz, &seg);
  }
  if (rc != 0) return rc;
  *out = seg->head;
  return 0;
}

void xs_bin_destroy_pool(xs_device_t *d, xs_pool_t *p) {
  xs_segment_t *seg = p->segs;
  while (seg) {
    xs_segment_t *next = seg->next;
    if (wholly_free(seg)) free_segment(d, seg);
    seg = next;
  }
}
