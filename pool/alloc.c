/* pool/alloc.c: the device allocator: malloc and free, streams, events,
 * the release policy and the out-of-memory path.
 *
 * Hot path (a cached block fits): round the size, find the stream's pool,
 * best fit in its free set, carve, record in the pointer map, count.  No
 * backend call, no system allocation (slab entries are reserved ahead).
 * Slow path: ask the mode's memory source for a free block that holds the
 * request - expandable.c (map pages, remap from holes) or binned.c (a new
 * segment) - then carve as above.
 *
 * A block freed with other streams recorded (xseg_record_stream) becomes
 * pending: an event is recorded on each of those streams and the block
 * returns to its free set when all have completed, checked without
 * blocking at the start of later calls.  Every function here expects the
 * device lock held (api.c takes it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

size_t xs_round_size(const xs_device_t *d, size_t size) {
  if (size == 0) size = 1; /* a unique minimal block, as malloc(0) */
  size_t r = d->roundup ? xs_config_roundup(d->cfg, size) : size;
  if (r == 0 || r > SIZE_MAX - (XS_ALIGN - 1)) return 0;
  return round_up(r, XS_ALIGN);
}

/* ---- setup ----------------------------------------------------------------------------- */

int xs_device_init(xs_device_t *d, xs_backend_t *be, int id, const xs_config_t *cfg) {
  d->id = id;
  d->cfg = cfg;
  int rc = xs_phys_init(d, be, id, cfg);
  if (rc != 0) return rc;
  d->mode = cfg->expandable && d->phys.vmm ? XS_MODE_EXPANDABLE : XS_MODE_BINNED;
  if (cfg->verbose) {
    xs_devinfo_t info;
    if (be->device_info(be, id, &info) != 0) snprintf(info.name, sizeof info.name, "?");
    fprintf(stderr, "xseg: device %d (%s): %s mode%s; granularity %zu KiB, %zu MiB, limit %zu MiB\n", id, info.name,
            d->mode == XS_MODE_EXPANDABLE ? "expandable" : "binned",
            cfg->expandable && !d->phys.vmm ? " (the device does not support virtual memory management)" : "",
            d->phys.gran >> 10, d->phys.total >> 20, d->phys.limit >> 20);
  }
  d->large_page = cfg->page_size ? round_up(cfg->page_size, d->phys.gran) : 0;
  for (int i = 0; i < XS_ROUNDUP_BINS; i++) d->roundup |= cfg->roundup_div[i] > 1;
  /* max_split_size_mb:auto: expandable segments have no split problem; the
   * binned pool keeps blocks of 64 MiB and more for requests that large,
   * which cut its worst min-budget overhead on the shipped traces from
   * 1.63 to 1.14 (docs/design.md). */
  d->max_split = cfg->max_split_size ? cfg->max_split_size
                                     : d->mode == XS_MODE_EXPANDABLE ? SIZE_MAX : XS_BINNED_AUTO_SPLIT;
  if (xs_ptrmap_init(&d->live, 1024) != 0) return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  d->trim_floor = 0;
  return 0;
}

void xs_device_destroy(xs_device_t *d) {
  for (size_t i = 0; i < d->nstreams; i++) {
    xs_stream_t *st = d->streams[i];
    for (int k = 0; k < XS_NCLASS; k++) {
      if (d->mode == XS_MODE_EXPANDABLE)
        xs_exp_destroy_pool(d, &st->pools[k]);
      else
        xs_bin_destroy_pool(d, &st->pools[k]);
    }
    if (st->fence) xs_phys_event_put(d, st->fence);
    free(st);
  }
  for (size_t i = 0; i < d->npending; i++)
    if (d->pending[i].ev) xs_phys_event_put(d, d->pending[i].ev);
  xs_seg_unstick(d);
  xs_cache_release(d, 0);
  xs_phys_destroy_events(d);
  free(d->streams);
  free(d->pending);
  xs_ptrmap_destroy(&d->live);
  xs_slab_destroy(&d->slab);
}

static xs_stream_t *xs_stream_get(xs_device_t *d, xseg_stream_t s) {
  if (d->last_stream && d->last_stream->s == s) return d->last_stream;
  for (size_t i = 0; i < d->nstreams; i++) {
    if (d->streams[i]->s == s) return d->last_stream = d->streams[i];
  }
  if (d->nstreams == d->capstreams) {
    size_t n = d->capstreams ? d->capstreams * 2 : 8;
    xs_stream_t **v = realloc(d->streams, n * sizeof *v);
    if (!v) return NULL;
    d->streams = v;
    d->capstreams = n;
  }
  xs_stream_t *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->s = s;
  st->dev = d;
  for (int k = 0; k < XS_NCLASS; k++) {
    st->pools[k].st = st;
    st->pools[k].cls = k;
  }
  d->streams[d->nstreams++] = st;
  return d->last_stream = st;
}

/* ---- the release policy ------------------------------------------------------------------ */

/* Has any outstanding fence completed since the last look? */
static int fences_progressed(xs_device_t *d) {
  int moved = 0;
  for (size_t i = 0; i < d->nstreams; i++) {
    xs_stream_t *st = d->streams[i];
    if (st->fence && xs_stream_safe(d, st, st->fence_seq, 0)) moved = 1;
  }
  return moved;
}

/* release_threshold_mb: keep at most that much mapped free memory.  Never
 * blocks: blocks the GPU may still use get a fence, and are released on a
 * later call once it has completed. */
static void maybe_trim(xs_device_t *d) {
  size_t thr = d->cfg->release_threshold;
  if (d->free_mapped <= thr) {
    d->trim_wanted = 0;
    d->trim_floor = 0;
    return;
  }
  if (d->trim_wanted ? !fences_progressed(d) : d->free_mapped <= d->trim_floor) return;
  d->trim_wanted = 0;
  if (d->mode == XS_MODE_EXPANDABLE)
    xs_exp_trim(d, thr, 0);
  else
    xs_bin_release(d, d->free_mapped - thr, 1);
  /* What is left could not be released now: try again when more is freed
   * or a fence completes. */
  d->trim_floor = d->free_mapped;
}

/* ---- free ---------------------------------------------------------------------------------- */

static void finalize_free(xs_device_t *d, xs_block_t *b) {
  int cls = b->seg->pool->cls;
  xs_stat_add(d->stats.active, cls, -1);
  xs_stat_add(d->stats.active_bytes, cls, -(int64_t)b->size);
  b->seg->live_bytes -= b->size;
  b->requested = 0;
  b = xs_merge_insert(d, b);
  if (b->seg->binned && b->seg->live_bytes == 0) b->seg->last_free_ns = d->phys.be->now_ns(d->phys.be);
}

static int pending_add(xs_device_t *d, xs_block_t *b, xseg_stream_t s) {
  if (d->npending == d->cappending) {
    size_t n = d->cappending ? d->cappending * 2 : 16;
    xs_pending_t *v = realloc(d->pending, n * sizeof *v);
    if (!v) return XSEG_ENOMEM;
    d->pending = v;
    d->cappending = n;
  }
  xs_pending_t *e = &d->pending[d->npending++];
  e->b = b;
  e->s = s;
  e->ev = NULL;
  b->events++;
  /* If the event cannot be recorded now, the entry stays and is retried:
   * the block is never reused before that stream's work is known done. */
  if (xs_phys_event_get(d, &e->ev) == 0 && xs_phys_event_record(d, e->ev, s) != 0) {
    xs_phys_event_put(d, e->ev);
    e->ev = NULL;
  }
  return 0;
}

void xs_process_events(xs_device_t *d) {
  size_t j = 0;
  for (size_t i = 0; i < d->npending; i++) {
    xs_pending_t e = d->pending[i];
    int done = 0;
    if (!e.ev && xs_phys_event_get(d, &e.ev) == 0 && xs_phys_event_record(d, e.ev, e.s) != 0) {
      xs_phys_event_put(d, e.ev);
      e.ev = NULL;
    }
    /* An event error is kept pending: reusing memory the GPU may still
     * touch would be worse than holding it. */
    if (e.ev) done = xs_phys_event_query(d, e.ev) == 0;
    if (!done) {
      d->pending[j++] = e;
      continue;
    }
    xs_phys_event_put(d, e.ev);
    if (--e.b->events == 0) {
      xs_gauge_add(&d->stats.pending_frees, -1);
      finalize_free(d, e.b);
    }
  }
  d->npending = j;
  if (d->trim_wanted || d->free_mapped > d->cfg->release_threshold) maybe_trim(d);
}

/* b, which pins chunk c, is being freed: the charge passes to another
 * live block in c (not a pending one: it has been through xs_free), or the
 * pin is over. */
static void unpin(xs_device_t *d, xs_block_t *b) {
  xs_chunk_t *c = b->pin;
  b->pin = NULL;
  for (int dir = 0; dir < 2; dir++) {
    for (xs_block_t *x = dir ? b->next : b->prev; x && x->addr < c->addr + c->size && xs_block_end(x) > c->addr;
         x = dir ? x->next : x->prev) {
      if (x->state == XS_BLOCK_LIVE && !x->pin) {
        x->pin = c;
        return;
      }
    }
  }
  d->pinned -= c->size;
}

int xs_free(xs_device_t *d, xs_block_t *b) {
  int cls = b->seg->pool->cls;
  if (b->pin) unpin(d, b);
  xs_stat_add(d->stats.allocation, cls, -1);
  xs_stat_add(d->stats.allocated_bytes, cls, -(int64_t)b->size);
  xs_stat_add(d->stats.requested_bytes, cls, -(int64_t)b->requested);
  if (d->cfg->trace_file[0]) xs_trace_free(b->trace_id, d->id);
  xs_stream_t *st = b->seg->pool->st;
  b->free_seq = ++st->free_seq;
  if (b->nuses == 0) {
    finalize_free(d, b);
    if (d->free_mapped > d->cfg->release_threshold) maybe_trim(d);
    return 0;
  }
  b->state = XS_BLOCK_PENDING;
  b->events = 0;
  xs_gauge_add(&d->stats.pending_frees, 1);
  int rc = 0;
  for (uint32_t i = 0; i < b->nuses; i++) {
    if (pending_add(d, b, b->uses[i]) != 0) rc = XSEG_ENOMEM;
  }
  free(b->uses);
  b->uses = NULL;
  b->nuses = b->capuses = 0;
  if (b->events == 0) {
    /* Not one entry could be stored (host out of memory): the only safe
     * course left is to keep the block out of use forever. */
    return xs_error(XSEG_ENOMEM, "xseg: out of host memory while freeing %#lx: the block is held back",
                    (unsigned long)b->addr);
  }
  (void)rc;
  return 0;
}

int xs_record_stream(xs_device_t *d, xs_block_t *b, xseg_stream_t s) {
  if (s == b->seg->pool->st->s) return 0;
  for (uint32_t i = 0; i < b->nuses; i++)
    if (b->uses[i] == s) return 0;
  if (b->nuses == b->capuses) {
    uint32_t n = b->capuses ? b->capuses * 2 : 2;
    xseg_stream_t *v = realloc(b->uses, n * sizeof *v);
    if (!v) return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
    b->uses = v;
    b->capuses = n;
  }
  b->uses[b->nuses++] = s;
  return 0;
}

/* Where to put `size` bytes in free block f: in expandable segments, where
 * it is expected to strand the fewest free bytes in pages that hold data
 * (xs_exp_place); binned segments have no pages to keep free: the low end. */
static uintptr_t xs_place(const xs_device_t *d, const xs_block_t *f, size_t size) {
  if (d->mode != XS_MODE_EXPANDABLE || f->size == size) return f->addr;
  return xs_exp_place(d->phys.gran, f->addr, xs_block_end(f), size, 1, xs_exp_packing(d, f->seg->pool->cls));
}

/* ---- malloc -------------------------------------------------------------------------------- */

static int grow(xs_device_t *d, xs_pool_t *p, size_t size, xs_block_t **b, uintptr_t *addr, size_t *take) {
  *take = size;
  if (d->mode == XS_MODE_EXPANDABLE) return xs_exp_grow(d, p, size, b, addr, take);
  int rc = xs_bin_grow(d, p, size, b);
  if (rc == 0) *addr = (*b)->addr;
  return rc;
}

static void *oom(xs_device_t *d, size_t size, size_t rounded) {
  char msg[1024];
  d->stats.num_ooms++;
  xs_stats_oom_message(d, size, rounded, msg, sizeof msg);
  xs_error(XSEG_ENOMEM, "%s", msg);
  if (d->cfg->verbose) fprintf(stderr, "%s\n", msg);
  return NULL;
}

void *xs_malloc(xs_device_t *d, size_t size, xseg_stream_t s) {
  size_t rsize = xs_round_size(d, size);
  if (rsize == 0) return oom(d, size, SIZE_MAX);
  if (d->npending) xs_process_events(d);
  xs_stream_t *st = xs_stream_get(d, s);
  if (!st || xs_slab_reserve(&d->slab, 2) != 0) {
    xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
    return NULL;
  }
  int cls = rsize <= XS_SMALL_MAX ? XS_SMALL : XS_LARGE;
  xs_pool_t *p = &st->pools[cls];
  xs_block_t *b;
  uintptr_t addr;
  size_t take = rsize; /* what the block gets: rsize, or up to its last page's end */
  int may_grow = 1;    /* may take fresh memory rather than wait for the GPU */
  xs_chunk_t *pin = NULL; /* the large chunk the block will pin */
  for (;;) {
    b = xs_pool_fit(d, p, rsize);
    addr = b ? xs_place(d, b, rsize) : 0;
    take = rsize;
    pin = NULL;
    int grown = b == NULL;
    if (grown) {
      int rc = grow(d, p, rsize, &b, &addr, &take);
      if (rc == XSEG_ENOMEM) return oom(d, size, rsize);
      if (rc != 0) return NULL; /* the error says why */
    }
    if (xs_slab_reserve(&d->slab, 2) != 0) {
      xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
      return NULL;
    }
    if (d->mode != XS_MODE_EXPANDABLE) break;
    /* Keep every free page reclaimable: a block must not pin a whole page
     * of a large handle that holds no data, so that handle is re-made as
     * page-sized ones first (once: pages are never converted again), and
     * the search starts over (docs/design.md, "Handle sizing"). */
    xs_chunk_t *c = xs_exp_pins_big(d, b, addr, take);
    if (!c) break;
    if (!xs_stream_safe(d, b->seg->pool->st, b->free_seq, 0)) {
      /* The GPU may still be using that handle, and unmapping it would
       * mean waiting.  Carving the block over it anyway (a pin) costs
       * nothing now, but the handle's free pages stay stuck for the
       * block's life: so only while memory is plentiful and pins stay
       * within their budget.  Otherwise take fresh memory if the device
       * has some, else look again and wait (docs/design.md). */
      if (!xs_exp_tight(d) && d->pinned + c->size <= d->phys.limit / XS_PIN_DIV) {
        pin = c;
        break;
      }
      if (may_grow && !grown) {
        xs_block_t *nb;
        uintptr_t na;
        size_t nt;
        if (grow(d, p, rsize, &nb, &na, &nt) == 0 && xs_slab_reserve(&d->slab, 2) == 0 &&
            !xs_exp_pins_big(d, nb, na, nt)) {
          b = nb;
          addr = na;
          take = nt;
          break;
        }
        /* The attempt may have remapped pages: what was found before is
         * stale.  Look again, this time ready to wait. */
        xs_error_clear();
        may_grow = 0;
        continue;
      }
    }
    /* A conversion changes the blocks around b: look again afterwards.  One
     * that ran out of memory after unmapping the handle left its pages
     * unmapped, which the next growth maps through the pressure path.
     * Otherwise a failure fails the allocation: carving would pin the
     * handle, and retrying would meet the same refusal. */
    int changed;
    int rc = xs_exp_convert(d, b, c, addr, addr + take, &changed);
    if (rc == 0 || (rc == XSEG_ENOMEM && changed)) continue;
    return rc == XSEG_ENOMEM ? oom(d, size, rsize) : NULL; /* the error says why */
  }
  b = xs_carve(d, b, addr, take);
  if (xs_ptrmap_put(&d->live, b->addr, b) != 0) {
    xs_merge_insert(d, b);
    xs_error(XSEG_ENOMEM, "xseg: out of host memory for the pointer map");
    return NULL;
  }
  if (pin) {
    b->pin = pin;
    d->pinned += pin->size;
  }
  b->state = XS_BLOCK_LIVE;
  b->requested = size;
  b->seg->live_bytes += b->size;
  xs_stat_add(d->stats.allocation, cls, 1);
  xs_stat_add(d->stats.allocated_bytes, cls, (int64_t)b->size);
  xs_stat_add(d->stats.requested_bytes, cls, (int64_t)size);
  xs_stat_add(d->stats.active, cls, 1);
  xs_stat_add(d->stats.active_bytes, cls, (int64_t)b->size);
  if (d->cfg->trace_file[0]) {
    b->trace_id = xs_trace_next_id();
    xs_trace_alloc(b->trace_id, size, d->id, s);
  }
  return (void *)b->addr;
}

/* ---- lookups and diagnosis ------------------------------------------------------------------- */

xs_block_t *xs_find_live(xs_device_t *d, uintptr_t p) { return xs_ptrmap_get(&d->live, p); }

int xs_diagnose_bad_pointer(xs_device_t *d, uintptr_t p, const char *what) {
  xs_segment_t *seg = xs_seg_of(d, p);
  if (!seg) return 0; /* not this device's */
  xs_block_t *b = seg->head;
  while (b && xs_block_end(b) <= p) b = b->next;
  if (!b) return 0;
  if (b->state == XS_BLOCK_LIVE)
    return xs_error(XSEG_EINVAL,
                    "xseg: %s(%p): interior pointer, %zu bytes into the block at %#lx of %zu bytes on device %d",
                    what, (void *)p, (size_t)(p - b->addr), (unsigned long)b->addr, b->size, d->id);
  return xs_error(XSEG_EINVAL, "xseg: %s(%p): not allocated (double free, or freed memory) on device %d",
                  what, (void *)p, d->id);
}

/* ---- empty_cache ----------------------------------------------------------------------------- */

int xs_empty_cache(xs_device_t *d) {
  /* Emptied with nothing live, the device starts again: what is allocated
   * next is packed as at first use (xs_exp_packing). */
  if (d->stats.allocated_bytes[XS_STAT_ALL].current == 0)
    for (int k = 0; k < XS_NCLASS; k++) d->pack_base[k] = d->stats.allocated_bytes[1 + k].allocated;
  if (d->npending) xs_process_events(d);
  if (d->stuck) xs_seg_unstick(d);
  if (d->mode == XS_MODE_EXPANDABLE) return xs_exp_empty(d);
  xs_bin_release(d, SIZE_MAX, 0);
  return 0;
}
