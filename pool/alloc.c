/* pool/alloc.c: the device allocator: malloc and free, streams, events
 * and fences, the release policy and the out-of-memory path - the policy
 * common to both strategies.
 *
 * Hot path (a cached block fits): round the size, find the stream's pool,
 * best fit in its free set, carve, record in the pointer map, count.  No
 * backend call, no system allocation (slab entries are reserved ahead).
 * Where the block goes and where memory comes from when none fits is the
 * strategy's business (xs_strategy_t, pool/device.h): expandable.c maps
 * pages and remaps them from holes, binned.c allocates whole segments.
 *
 * A block freed with other streams recorded (xseg_record_stream) becomes
 * pending: an event is recorded on each of those streams and the block
 * returns to its free set when all have completed, checked without
 * blocking at the start of later calls.  Every function here expects the
 * device lock held (pool/api.c takes it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "trace.h"

size_t xs_round_size(const xs_device_t *d, size_t size) {
  if (size == 0) size = 1; /* a unique minimal block, as malloc(0) */
  size_t r = d->roundup ? xs_config_roundup(d->cfg, size) : size;
  if (r == 0 || r > SIZE_MAX - (XS_ALIGN - 1)) return 0;
  return xs_round_up(r, XS_ALIGN);
}

/* ---- setup ----------------------------------------------------------------------------- */

int xs_device_init(xs_device_t *d, xs_backend_t *be, int id, const xs_config_t *cfg) {
  d->id = id;
  d->cfg = cfg;
  int rc = xs_vmm_init(&d->vmm, be, id, cfg->memory_fraction, cfg->max_memory, cfg->peer_access);
  if (rc != 0) return xs_error_vmm(rc);
  d->strat = cfg->expandable && d->vmm.vmm ? &xs_expandable_strategy : &xs_binned_strategy;
  if (cfg->verbose)
    fprintf(stderr, "xseg: device %d (%s): %s mode%s; granularity %zu KiB, %zu MiB, limit %zu MiB\n", id,
            d->vmm.name, d->strat->name,
            cfg->expandable && !d->vmm.vmm
                ? " (the device does not support virtual memory management, which needs CUDA 10.2's driver "
                  "(440) or later and a device reporting CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)"
                : "",
            d->vmm.gran >> 10, d->vmm.total >> 20, d->vmm.limit >> 20);
  d->large_page = cfg->page_size ? xs_round_up(cfg->page_size, d->vmm.gran) : 0;
  for (int i = 0; i < XS_ROUNDUP_BINS; i++) d->roundup |= cfg->roundup_div[i] > 1;
  d->max_split = cfg->max_split_size ? cfg->max_split_size : d->strat->auto_max_split;
  if (xs_ptrmap_init(&d->live, 1024) != 0) return xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  d->trim_floor = 0;
  d->rerun.guide = -1; /* nothing to follow until a run ends (expandable.c, rerun_turn) */
  return 0;
}

void xs_device_destroy(xs_device_t *d) {
  for (size_t i = 0; i < d->nstreams; i++) {
    xs_stream_t *st = d->streams[i];
    for (int k = 0; k < XS_NCLASS; k++) d->strat->destroy_pool(d, &st->pools[k]);
    if (st->fence) xs_vmm_event_put(&d->vmm, st->fence);
    free(st);
  }
  for (size_t i = 0; i < d->npending; i++)
    if (d->pending[i].ev) xs_vmm_event_put(&d->vmm, d->pending[i].ev);
  xs_vmm_fini(&d->vmm);
  free(d->streams);
  free(d->pending);
  free(d->privs);
  xs_ptrmap_destroy(&d->live);
  xs_slab_destroy(&d->slab);
  free(d->rerun.rec.at);
  for (int i = 0; i < XS_RERUN_LOGS; i++) free(d->rerun.logs[i].at);
}

/* The state of stream s in private pool `pool` (0: the device's own),
 * made on first use. */
static xs_stream_t *stream_get(xs_device_t *d, xseg_stream_t s, int pool) {
  if (d->last_stream && d->last_stream->s == s && d->last_stream->pool == pool) return d->last_stream;
  for (size_t i = 0; i < d->nstreams; i++) {
    if (d->streams[i]->s == s && d->streams[i]->pool == pool) return d->last_stream = d->streams[i];
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
  st->pool = pool;
  st->keep = pool != 0;
  st->dev = d;
  for (int k = 0; k < XS_NCLASS; k++) {
    st->pools[k].st = st;
    st->pools[k].cls = k;
  }
  d->streams[d->nstreams++] = st;
  return d->last_stream = st;
}

/* ---- fences ------------------------------------------------------------------------ */

/* A block freed on stream S is reusable by S at once (stream order), but
 * its memory may be unmapped or freed only when the GPU has finished every
 * kernel queued on S before the free.  Each free takes a number from S's
 * free sequence; an event recorded on S (a fence) covers every free
 * numbered before it.  An event failure leaves the stream unsafe (and the
 * thread's error set): holding memory is better than freeing it early. */

int xs_stream_safe(xs_device_t *d, xs_stream_t *st, uint64_t seq, int wait) {
  for (;;) {
    if (seq <= st->safe_seq) return 1;
    if (d->capturing) return 0; /* no event may be recorded or queried now */
    if (st->fence) {
      int rc = wait ? xs_vmm_event_sync(&d->vmm, st->fence) : xs_vmm_event_query(&d->vmm, st->fence);
      if (rc != 0 && rc != XSEG_ENOTREADY) xs_error_vmm(rc);
      if (rc == XSEG_ENOTREADY) return 0;
      if (wait) d->stats.num_fence_waits++;
      xs_vmm_event_put(&d->vmm, st->fence);
      st->fence = NULL;
      if (rc != 0) return 0; /* an event error: stay conservative */
      st->safe_seq = st->fence_seq;
      continue;
    }
    xs_event_t ev;
    if (xs_error_vmm(xs_vmm_event_get(&d->vmm, &ev)) != 0) return 0;
    if (xs_error_vmm(xs_vmm_event_record(&d->vmm, ev, st->s)) != 0) {
      xs_vmm_event_put(&d->vmm, ev);
      return 0;
    }
    st->fence = ev;
    st->fence_seq = st->free_seq; /* covers every free so far */
  }
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
  d->strat->trim(d, thr);
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
  if (b->seg->binned && b->seg->live_bytes == 0) b->seg->last_free_ns = xs_vmm_now(&d->vmm);
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
  /* If the event cannot be recorded now (or not during a capture), the
   * entry stays and is retried: the block is never reused before that
   * stream's work is known done. */
  if (!d->capturing && xs_error_vmm(xs_vmm_event_get(&d->vmm, &e->ev)) == 0 &&
      xs_error_vmm(xs_vmm_event_record(&d->vmm, e->ev, s)) != 0) {
    xs_vmm_event_put(&d->vmm, e->ev);
    e->ev = NULL;
  }
  return 0;
}

void xs_process_events(xs_device_t *d) {
  if (d->capturing) return; /* no event may be queried now: later */
  size_t j = 0;
  for (size_t i = 0; i < d->npending; i++) {
    xs_pending_t e = d->pending[i];
    int done = 0;
    if (!e.ev && xs_error_vmm(xs_vmm_event_get(&d->vmm, &e.ev)) == 0 &&
        xs_error_vmm(xs_vmm_event_record(&d->vmm, e.ev, e.s)) != 0) {
      xs_vmm_event_put(&d->vmm, e.ev);
      e.ev = NULL;
    }
    /* An event error is kept pending: reusing memory the GPU may still
     * touch would be worse than holding it. */
    if (e.ev) {
      int rc = xs_vmm_event_query(&d->vmm, e.ev);
      if (rc != 0 && rc != XSEG_ENOTREADY) xs_error_vmm(rc);
      done = rc == 0;
    }
    if (!done) {
      d->pending[j++] = e;
      continue;
    }
    xs_vmm_event_put(&d->vmm, e.ev);
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
        x->pin_budget = b->pin_budget;
        return;
      }
    }
  }
  d->pinned[b->pin_budget] -= c->size;
}

int xs_free(xs_device_t *d, xs_block_t *b) {
  int cls = b->seg->pool->cls;
  if (b->pin) unpin(d, b);
  xs_stat_add(d->stats.allocation, cls, -1);
  xs_stat_add(d->stats.allocated_bytes, cls, -(int64_t)b->size);
  xs_stat_add(d->stats.requested_bytes, cls, -(int64_t)b->requested);
  if (b->size >= d->max_split) xs_stat_one(&d->stats.oversize_allocations, -(int64_t)1);
  d->returned[cls] += b->size;
  if (d->strat->note_free) d->strat->note_free(d, b);
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

/* ---- malloc -------------------------------------------------------------------------------- */

static void *oom(xs_device_t *d, size_t size, size_t rounded) {
  char msg[1024];
  d->stats.num_ooms++;
  xs_stats_oom_message(d, size, rounded, msg, sizeof msg);
  xs_error(XSEG_ENOMEM, "%s", msg);
  if (d->cfg->verbose) fprintf(stderr, "%s\n", msg);
  return NULL;
}

/* Hand out [f->addr, f->addr + f->take) of f->b as a live block. */
static void *hand_out(xs_device_t *d, const xs_fit_t *f, size_t size, xseg_stream_t s) {
  xs_block_t *b = xs_carve(d, f->b, f->addr, f->take);
  if (xs_ptrmap_put(&d->live, b->addr, b) != 0) {
    xs_merge_insert(d, b);
    xs_error(XSEG_ENOMEM, "xseg: out of host memory for the pointer map");
    return NULL;
  }
  if (f->pin) {
    b->pin = f->pin;
    b->pin_budget = (uint8_t)f->budget;
    d->pinned[b->pin_budget] += f->pin->size;
  }
  int cls = b->seg->pool->cls;
  b->state = XS_BLOCK_LIVE;
  b->alone_since = 0;
  b->requested = size;
  b->seg->live_bytes += b->size;
  xs_stat_add(d->stats.allocation, cls, 1);
  xs_stat_add(d->stats.allocated_bytes, cls, (int64_t)b->size);
  xs_stat_add(d->stats.requested_bytes, cls, (int64_t)size);
  xs_stat_add(d->stats.active, cls, 1);
  xs_stat_add(d->stats.active_bytes, cls, (int64_t)b->size);
  if (b->size >= d->max_split) xs_stat_one(&d->stats.oversize_allocations, 1);
  d->handed[cls] += b->size;
  uint64_t live = xs_live_bytes(d);
  if (live > d->live_peak) {
    d->live_peak = live;
    if (live - d->peak_step > d->peak_step / XS_SETTLE_RISE) {
      d->peak_step = live;
      d->peak_step_at = xs_handed_bytes(d);
    }
  }
  if (d->cfg->trace_file[0]) {
    b->trace_id = xs_trace_next_id();
    xs_trace_alloc(b->trace_id, size, d->id, s);
  }
  return (void *)b->addr;
}

void *xs_malloc(xs_device_t *d, size_t size, xseg_stream_t s, int pool) {
  size_t rsize = xs_round_size(d, size);
  if (rsize == 0) return oom(d, size, SIZE_MAX);
  if (d->npending) xs_process_events(d);
  xs_stream_t *st = stream_get(d, s, pool);
  if (!st || xs_slab_reserve(&d->slab, 2) != 0) {
    xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
    return NULL;
  }
  xs_fit_t f;
  xs_pool_t *p = &st->pools[rsize <= XS_SMALL_MAX ? XS_SMALL : XS_LARGE];
  int rc = d->strat->acquire(d, p, rsize, &f);
  /* Memory the driver refused once may be free now: it has the last word. */
  if (rc == XSEG_ENOMEM && xs_vmm_forget_unseen(&d->vmm)) rc = d->strat->acquire(d, p, rsize, &f);
  if (rc == XSEG_ENOMEM) return oom(d, size, rsize);
  if (rc != 0) return NULL; /* the error says why */
  return hand_out(d, &f, size, s);
}

void *xs_malloc_at(xs_device_t *d, uintptr_t addr, size_t size, xseg_stream_t s, int pool) {
  if (d->npending) xs_process_events(d);
  xs_stream_t *st = stream_get(d, s, pool);
  if (!st || xs_slab_reserve(&d->slab, 2) != 0) {
    xs_error(XSEG_ENOMEM, "xseg: out of host memory for the allocator's bookkeeping");
    return NULL;
  }
  xs_segment_t *seg = xs_seg_of(d, addr);
  xs_block_t *b = seg && seg->pool->st == st ? seg->head : NULL;
  while (b && xs_block_end(b) <= addr) b = b->next;
  if (!b || size == 0 || size % XS_ALIGN || addr % XS_ALIGN || b->state != XS_BLOCK_FREE || !b->mapped ||
      size > xs_block_end(b) - addr) {
    xs_error(XSEG_EINVAL, "xseg: xseg_malloc_at(%#lx, %zu): not a free mapped range of stream %p, pool %d on device %d",
             (unsigned long)addr, size, (void *)s, pool, d->id);
    return NULL;
  }
  xs_fit_t f = {b, addr, size, NULL, 0};
  return hand_out(d, &f, size, s);
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
  /* Emptied with nothing live, the device starts again, and what it
   * learned of the last workload is dropped, so that the next one is
   * placed as in a fresh process: what is allocated next is
   * packed as at first use (expandable.c, XS_PACK_DIV); the live peak that
   * bounds growing instead of converting (XS_SLACK_DIV) and growing ahead
   * of the GPU (XS_AHEAD_DIV) is the new workload's own; and so are the
   * evidence of how it frees (XS_TOGETHER_*), the sizes it asks for
   * again (the whole-chunk search's memos, whose "asked for lately" decides
   * how far a search looks) and the layouts of its last runs (XS_RERUN_*,
   * whose places are gone with the memory).  Kept, the last workload's
   * evidence, its teardown last, put up to 95 % of a repeated replay's
   * blocks elsewhere (docs/design.md, "Learning how the program frees").
   * The physical layer starts again too (xs_vmm_new_start: pacing off,
   * what others hold looked at again), keeping only the driver's pace it
   * learned. */
  const int new_start = d->stats.allocated_bytes[XS_STAT_ALL].current == 0;
  if (new_start) {
    for (int k = 0; k < XS_NCLASS; k++) d->pack_base[k] = d->handed[k];
    d->start_handed = xs_handed_bytes(d);
    d->live_peak = 0;
    d->peak_step = 0;
    d->together = d->apart = 0;
    d->grown_streak = 0;
    memset(d->no_fit, 0, sizeof d->no_fit);
    memset(d->asked, 0, sizeof d->asked);
    xs_rerun_t *r = &d->rerun;
    r->rec.n = 0;
    for (int i = 0; i < XS_RERUN_LOGS; i++) r->logs[i].n = 0;
    r->guide = -1;
    r->following = 0;
    r->next = 0;
  }
  if (d->npending) xs_process_events(d);
  if (d->vmm.stuck) xs_vmm_unstick(&d->vmm);
  int rc = d->strat->empty(d);
  if (new_start) xs_vmm_new_start(&d->vmm);
  return rc;
}

int xs_enable_peer_access(xs_device_t *d, int peer) { return d->strat->enable_peer(d, peer); }

xs_segment_t *xs_seg_of(xs_device_t *d, uintptr_t p) {
  for (size_t i = 0; i < d->nstreams; i++) {
    for (int k = 0; k < XS_NCLASS; k++) {
      for (xs_segment_t *s = d->streams[i]->pools[k].segs; s; s = s->next)
        if (p >= s->vs.base && p < s->vs.base + s->vs.size) return s;
    }
  }
  return NULL;
}

/* The live block holding p, found through its segment's blocks when p is
 * not a block's start. */
xs_block_t *xs_live_block_at(xs_device_t *d, uintptr_t p) {
  xs_block_t *b = xs_ptrmap_get(&d->live, p);
  if (b) return b;
  xs_segment_t *seg = xs_seg_of(d, p);
  for (b = seg ? seg->head : NULL; b && b->addr <= p; b = b->next)
    if (p < xs_block_end(b)) return b->state == XS_BLOCK_LIVE ? b : NULL;
  return NULL;
}

size_t xs_cache_info(xs_device_t *d) {
  size_t largest = 0;
  for (size_t i = 0; i < d->nstreams; i++) {
    if (d->streams[i]->pool) continue; /* private pools keep theirs */
    for (int k = 0; k < XS_NCLASS; k++) {
      const xs_block_t *b = xs_tree_last(&d->streams[i]->pools[k].free);
      if (b && b->size > largest) largest = b->size;
    }
  }
  if (largest) return largest;
  /* Nothing cached: what the driver has free, plus handles held unmapped,
   * within the cap. */
  size_t drv_free = 0, total = 0;
  if (xs_vmm_mem_info(&d->vmm, &drv_free, &total) != 0) drv_free = 0;
  size_t can = drv_free + d->vmm.cache_bytes, head = xs_vmm_headroom(&d->vmm) + d->vmm.cache_bytes;
  return can < head ? can : head;
}

/* ---- private pools --------------------------------------------------------------------- */

xs_private_t *xs_private_find(xs_device_t *d, int id) {
  for (size_t i = 0; i < d->nprivs; i++)
    if (d->privs[i].id == id) return &d->privs[i];
  return NULL;
}

int xs_private_create(xs_device_t *d, int *id) {
  if (d->nprivs == d->cappriv) {
    size_t n = d->cappriv ? d->cappriv * 2 : 4;
    xs_private_t *v = realloc(d->privs, n * sizeof *v);
    if (!v) return xs_error(XSEG_ENOMEM, "xseg: out of host memory for a private pool");
    d->privs = v;
    d->cappriv = n;
  }
  if (d->next_pool == INT32_MAX) return xs_error(XSEG_ERANGE, "xseg: device %d: no private pool ids left", d->id);
  xs_private_t *pp = &d->privs[d->nprivs++];
  pp->id = ++d->next_pool;
  pp->open = 1;
  *id = pp->id;
  return 0;
}

/* A closed pool takes no more allocations; its memory becomes the device's
 * to release or remap like any other free memory. */
void xs_private_close(xs_device_t *d, xs_private_t *pp) {
  int id = pp->id;
  for (size_t i = 0; i < d->nstreams; i++)
    if (d->streams[i]->pool == id) d->streams[i]->keep = 0;
  *pp = d->privs[--d->nprivs];
}

size_t xs_private_live(xs_device_t *d, int id) {
  size_t live = 0;
  for (size_t i = 0; i < d->nstreams; i++) {
    if (d->streams[i]->pool != id) continue;
    for (int k = 0; k < XS_NCLASS; k++)
      for (const xs_segment_t *seg = d->streams[i]->pools[k].segs; seg; seg = seg->next) live += seg->live_bytes;
  }
  return live;
}
