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
  void *p = xs_malloc(d, size, stream);
  debug_check(d);
  pthread_mutex_unlock(&d->lock);
  return p;
}

static int do_free(xs_device_t *d, xs_block_t *b, void *arg) {
  (void)arg;
  return xs_free(d, b); /* already out of the pointer map */
}

/* Find the live block of p on some device and run fn on it under that
 * device's lock; or explain why p is not a live pointer. */
static int with_live_block(void *ptr, const char *what, int (*fn)(xs_device_t *, xs_block_t *, void *),
                           void *arg) {
  if (xs_ensure_init() != 0) return xseg_last_error_code();
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < xs_ndevices(); i++) {
    xs_device_t *d = xs_device_ready(i);
    if (!d) continue;
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
