/* pool/api.c: the public API (include/xseg.h), over the devices of
 * pool/init.c.
 *
 * Each call finds its device (creating its allocator on first use), takes
 * that device's one lock, and calls into pool/alloc.c.  This is the only
 * place a device lock is taken.  No lock is held across a call that waits
 * for the GPU except the device lock during fence waits in the
 * out-of-memory and empty_cache paths, where the allocator cannot make
 * progress without the wait anyway.
 */
#include <stdio.h>
#include <stdlib.h>

#include "init.h"

/* ---- allocation ------------------------------------------------------------------------------ */

#if defined(XSEG_DEBUG_CHECKS)
static void debug_check(xs_device_t *d) {
  if (xs_check_device(d) != 0) {
    fprintf(stderr, "%s\n", xseg_last_error());
    abort();
  }
}
#else
#define debug_check(d) ((void)0)
#endif

void *xseg_malloc(size_t size, int device, xseg_stream_t stream) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return NULL;
  pthread_mutex_lock(&d->lock);
  void *p = xs_malloc(d, size, stream, 0);
  debug_check(d);
  pthread_mutex_unlock(&d->lock);
  return p;
}

void *xseg_malloc_in_pool(size_t size, int device, xseg_stream_t stream, int pool) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return NULL;
  pthread_mutex_lock(&d->lock);
  void *p = NULL;
  if (pool != 0 && !xs_private_find(d, pool))
    xs_error(XSEG_EINVAL, "xseg: xseg_malloc_in_pool: device %d has no open private pool %d", device, pool);
  else
    p = xs_malloc(d, size, stream, pool);
  debug_check(d);
  pthread_mutex_unlock(&d->lock);
  return p;
}

static int do_free(xs_device_t *d, xs_block_t *b, void *arg) {
  (void)arg;
  return xs_free(d, b); /* already out of the pointer map */
}

/* Find the live block of p on some device and run fn on it under that
 * device's lock; or explain why p is not a live pointer.  Only devices
 * whose address range holds p are locked (xs_device_may_own): a thread
 * freeing on one GPU never waits for another GPU's lock. */
static int with_live_block(void *ptr, const char *what, int (*fn)(xs_device_t *, xs_block_t *, void *),
                           void *arg) {
  if (xs_ensure_init() != 0) return xseg_last_error_code();
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < xs_ndevices(); i++) {
    xs_device_t *d = xs_device_ready(i);
    if (!d || !xs_device_may_own(d, p)) continue;
    pthread_mutex_lock(&d->lock);
    /* A free takes the block out of the map in the same probe. */
    xs_block_t *b = fn == do_free ? xs_ptrmap_take(&d->live, p) : xs_find_live(d, p);
    int rc = b ? fn(d, b, arg) : -1;
    if (b) debug_check(d);
    pthread_mutex_unlock(&d->lock);
    if (rc >= 0) return rc;
  }
  for (int i = 0; i < xs_ndevices(); i++) {
    xs_device_t *d = xs_device_ready(i);
    if (!d) continue;
    pthread_mutex_lock(&d->lock);
    int rc = xs_diagnose_bad_pointer(d, p, what);
    pthread_mutex_unlock(&d->lock);
    if (rc) return rc;
  }
  return xs_error(XSEG_EINVAL, "xseg: %s(%p): not a pointer returned by xseg_malloc", what, ptr);
}


int xseg_free(void *ptr) {
  if (!ptr) return 0;
  return with_live_block(ptr, "xseg_free", do_free, NULL);
}

static int do_record(xs_device_t *d, xs_block_t *b, void *arg) {
  return xs_record_stream(d, b, *(xseg_stream_t *)arg);
}

int xseg_record_stream(void *ptr, xseg_stream_t stream) {
  if (!ptr) return xs_error(XSEG_EINVAL, "xseg: xseg_record_stream(NULL): not a pointer returned by xseg_malloc");
  return with_live_block(ptr, "xseg_record_stream", do_record, &stream);
}

int xseg_set_memory_fraction(double fraction, int device) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    return xs_error(XSEG_EINVAL, "xseg: xseg_set_memory_fraction(%g): the fraction must be in (0, 1]", fraction);
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  xs_vmm_set_limit(&d->vmm, fraction, xs_global_config()->max_memory);
  pthread_mutex_unlock(&d->lock);
  return 0;
}

/* ---- per-device operations ---------------------------------------------------------------------- */

/* Run fn on `device`, or on every initialised device when device is -1. */
static int for_devices(int device, int (*fn)(xs_device_t *)) {
  if (xs_ensure_init() != 0) return xseg_last_error_code();
  if (device != -1) {
    xs_device_t *d = xs_device_get(device);
    if (!d) return xseg_last_error_code();
    pthread_mutex_lock(&d->lock);
    int rc = fn(d);
    pthread_mutex_unlock(&d->lock);
    return rc;
  }
  int rc = 0;
  for (int i = 0; i < xs_ndevices(); i++) {
    xs_device_t *d = xs_device_ready(i);
    if (!d) continue;
    pthread_mutex_lock(&d->lock);
    int r = fn(d);
    pthread_mutex_unlock(&d->lock);
    if (r && !rc) rc = r;
  }
  return rc;
}

static int do_empty(xs_device_t *d) {
  int rc = xs_empty_cache(d);
  debug_check(d);
  return rc;
}

int xseg_empty_cache(int device) { return for_devices(device, do_empty); }

static int do_reset_peaks(xs_device_t *d) {
  xs_stats_reset_peaks(&d->stats);
  xs_vmm_reset_peaks(&d->vmm.st);
  return 0;
}

int xseg_reset_peak_stats(int device) { return for_devices(device, do_reset_peaks); }

int xseg_check_heap(int device) { return for_devices(device, xs_check_device); }

size_t xseg_stats_json(int device, char *buf, size_t len) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return 0;
  pthread_mutex_lock(&d->lock);
  size_t n = xs_stats_json_device(d, xs_backend_name(), buf, len);
  pthread_mutex_unlock(&d->lock);
  return n;
}

size_t xseg_snapshot_json(int device, char *buf, size_t len) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return 0;
  pthread_mutex_lock(&d->lock);
  size_t n = xs_snapshot_device(d, buf, len);
  pthread_mutex_unlock(&d->lock);
  return n;
}

void xseg_print_summary(int device, FILE *out) {
  if (!out) out = stderr;
  xs_device_t *d = xs_device_get(device);
  if (!d) {
    fprintf(out, "%s\n", xseg_last_error());
    return;
  }
  pthread_mutex_lock(&d->lock);
  xs_stats_summary(d, xs_backend_name(), out);
  pthread_mutex_unlock(&d->lock);
}

size_t xseg_config_describe(char *buf, size_t len) {
  if (xs_ensure_init() != 0) return 0;
  return xs_config_describe(xs_global_config(), buf, len);
}

int xseg_device_count(void) {
  if (xs_ensure_init() != 0) return -xseg_last_error_code();
  return xs_ndevices();
}

int xseg_enable_peer_access(int device, int peer) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  if (peer < 0 || peer >= xs_ndevices() || peer == device)
    return xs_error(XSEG_ENODEV, "xseg: xseg_enable_peer_access(%d, %d): bad peer device", device, peer);
  pthread_mutex_lock(&d->lock);
  int rc = xs_enable_peer_access(d, peer);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

#define XS_STR_(x) #x
#define XS_STR(x) XS_STR_(x)

const char *xseg_version(void) {
  return XS_STR(XSEG_VERSION_MAJOR) "." XS_STR(XSEG_VERSION_MINOR) "." XS_STR(XSEG_VERSION_PATCH);
}

/* ---- for framework allocators ------------------------------------------------------------------ */

static void copy_stats(xseg_stat_t *to, const xs_stat_t *from, int n) {
  for (int i = 0; i < n; i++) to[i] = (xseg_stat_t){from[i].current, from[i].peak, from[i].allocated, from[i].freed};
}

int xseg_device_stats(int device, xseg_device_stats_t *out) {
  if (!out || out->struct_size < sizeof *out)
    return xs_error(XSEG_EINVAL, "xseg: xseg_device_stats: out->struct_size must be sizeof(xseg_device_stats_t) "
                                 "(%zu); this library writes that many bytes", sizeof *out);
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  const xs_stats_t *s = &d->stats;
  const xs_vmm_stats_t *v = &d->vmm.st;
  copy_stats(out->allocation, s->allocation, 3);
  copy_stats(out->segment, v->segment, 3);
  copy_stats(out->active, s->active, 3);
  copy_stats(out->inactive_split, s->inactive_split, 3);
  copy_stats(out->allocated_bytes, s->allocated_bytes, 3);
  copy_stats(out->reserved_bytes, v->reserved_bytes, 3);
  copy_stats(out->active_bytes, s->active_bytes, 3);
  copy_stats(out->inactive_split_bytes, s->inactive_split_bytes, 3);
  copy_stats(out->requested_bytes, s->requested_bytes, 3);
  copy_stats(&out->oversize_allocations, &s->oversize_allocations, 1);
  copy_stats(&out->oversize_segments, &s->oversize_segments, 1);
  out->num_alloc_retries = s->num_alloc_retries;
  out->num_ooms = s->num_ooms;
  out->num_sync_all_streams = 0;
  out->num_device_alloc = v->num_device_alloc;
  out->num_device_free = v->num_device_free;
  out->max_split_size = d->max_split == SIZE_MAX ? UINT64_MAX : (uint64_t)d->max_split;
  out->held_bytes = v->held_bytes.current;
  out->limit_bytes = (int64_t)d->vmm.limit;
  out->total_bytes = (int64_t)d->vmm.total;
  out->num_fence_waits = s->num_fence_waits;
  pthread_mutex_unlock(&d->lock);
  return 0;
}

static int do_reset_accumulated(xs_device_t *d) {
  xs_stats_reset_accumulated(&d->stats);
  xs_vmm_reset_accumulated(&d->vmm.st);
  return 0;
}

int xseg_reset_accumulated_stats(int device) { return for_devices(device, do_reset_accumulated); }

int xseg_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
  if (!free_bytes || !total_bytes) return xs_error(XSEG_EINVAL, "xseg: xseg_mem_info: NULL argument");
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  int rc = xs_error_vmm(xs_vmm_mem_info(&d->vmm, free_bytes, total_bytes));
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int xseg_cache_info(int device, size_t *largest) {
  if (!largest) return xs_error(XSEG_EINVAL, "xseg: xseg_cache_info: largest is NULL");
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  *largest = xs_cache_info(d);
  pthread_mutex_unlock(&d->lock);
  xs_error_clear();
  return 0;
}

int xs_on_block_holding(uintptr_t p, int (*fn)(xs_device_t *, xs_block_t *, void *), void *arg) {
  for (int i = 0; i < xs_ndevices(); i++) {
    xs_device_t *d = xs_device_ready(i);
    if (!d || !xs_device_may_own(d, p)) continue;
    pthread_mutex_lock(&d->lock);
    xs_block_t *b = xs_live_block_at(d, p);
    int rc = b ? fn(d, b, arg) : -1;
    pthread_mutex_unlock(&d->lock);
    if (rc >= 0) return rc;
  }
  return -1;
}

static int do_base(xs_device_t *d, xs_block_t *b, void *arg) {
  (void)d;
  void **out = arg; /* {base, size} */
  *(void **)out[0] = (void *)b->addr;
  *(size_t *)out[1] = b->size;
  return 0;
}

int xseg_base_allocation(void *ptr, void **base, size_t *size) {
  if (!base || !size) return xs_error(XSEG_EINVAL, "xseg: xseg_base_allocation: base and size must not be NULL");
  if (xs_ensure_init() != 0) return xseg_last_error_code();
  void *out[2] = {base, size};
  if (xs_on_block_holding((uintptr_t)ptr, do_base, out) == 0) return 0;
  return xs_error(XSEG_EINVAL, "xseg: xseg_base_allocation(%p): not inside a live allocation", ptr);
}

int xseg_walk(int device, const xseg_walker_t *w, void *arg) {
  if (!w) return xs_error(XSEG_EINVAL, "xseg: xseg_walk: no walker");
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  int rc = xs_walk_device(d, w, arg);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

/* ---- private pools and captures ----------------------------------------------------------------- */

int xseg_pool_create(int device, int *pool) {
  if (!pool) return xs_error(XSEG_EINVAL, "xseg: xseg_pool_create: pool is NULL");
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  int rc = xs_private_create(d, pool);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int xseg_pool_release(int device, int pool) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  xs_private_t *pp = xs_private_find(d, pool);
  int rc = 0;
  if (!pp)
    rc = xs_error(XSEG_EINVAL, "xseg: xseg_pool_release: device %d has no open private pool %d", device, pool);
  else
    xs_private_close(d, pp);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int xseg_pool_live(int device, int pool, size_t *live) {
  if (!live) return xs_error(XSEG_EINVAL, "xseg: xseg_pool_live: live is NULL");
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  *live = xs_private_live(d, pool);
  pthread_mutex_unlock(&d->lock);
  return 0;
}

static int capture(int device, int delta) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  int rc = 0;
  if (d->capturing + delta < 0)
    rc = xs_error(XSEG_EINVAL, "xseg: xseg_capture_end(%d) without a matching xseg_capture_begin", device);
  else
    d->capturing += delta;
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int xseg_capture_begin(int device) { return capture(device, 1); }
int xseg_capture_end(int device) { return capture(device, -1); }

void *xseg_malloc_at(void *addr, size_t size, int device, xseg_stream_t stream, int pool) {
  xs_device_t *d = xs_device_get(device);
  if (!d) return NULL;
  pthread_mutex_lock(&d->lock);
  void *p = NULL;
  if (pool != 0 && !xs_private_find(d, pool))
    xs_error(XSEG_EINVAL, "xseg: xseg_malloc_at: device %d has no open private pool %d", device, pool);
  else
    p = xs_malloc_at(d, (uintptr_t)addr, size, stream, pool);
  debug_check(d);
  pthread_mutex_unlock(&d->lock);
  return p;
}

int xseg_device_active(int device) {
  if (xs_ensure_init() != 0) return -xseg_last_error_code();
  if (device < 0 || device >= xs_ndevices())
    return -xs_error(XSEG_ENODEV, "xseg: device %d out of range: %d device(s) on the %s backend", device,
                     xs_ndevices(), xs_backend_name());
  return xs_device_ready(device) != NULL;
}
