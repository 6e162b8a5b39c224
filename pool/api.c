/* pool/api.c: the public API (include/xseg.h) and the library's global
 * state.
 *
 * The library initialises itself on first use from XSEG_ALLOC_CONF (or
 * from xseg_init): it parses the configuration, creates the backend and
 * counts the devices; each device's allocator is created on its first use.
 * An invalid configuration leaves the library refusing every allocation
 * with the parser's message (printed once to stderr) until xseg_init is
 * given a valid one: nothing is allocated under a configuration the user
 * did not mean.
 *
 * Locks: g_lock serialises initialisation and shutdown; each device has
 * one lock, taken here and nowhere else, around every operation on it.
 * No lock is held across a call that waits for the GPU except the device
 * lock during fence waits in the out-of-memory and empty_cache paths,
 * where the allocator cannot make progress without the wait anyway.
 */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_backend.h"
#include "internal.h"

enum { ST_UNINIT = 0, ST_READY = 1, ST_FAILED = 2 };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_state;             /* ST_*, read with acquire */
static int g_err_code;          /* why the last initialisation failed */
static char g_err[1024];
static int g_err_printed;
static xs_config_t g_cfg;
static xs_backend_t *g_be;
static int g_ndev;
static xs_device_t *g_devs;
static int g_atexit;

/* ---- errors ------------------------------------------------------------------------------- */

static _Thread_local char t_err[1024];
static _Thread_local int t_code;

int xs_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_err, sizeof t_err, fmt, ap);
  va_end(ap);
  t_code = code;
  return code;
}

void xs_error_clear(void) {
  t_err[0] = '\0';
  t_code = 0;
}

const char *xseg_last_error(void) { return t_err; }
int xseg_last_error_code(void) { return t_code; }

void xs_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "xseg: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  abort();
}

const char *xseg_version(void) { return "0.1.0"; }

/* ---- initialisation ------------------------------------------------------------------------ */

static void write_stats_file(void) {
  if (!g_cfg.stats_file[0]) return;
  FILE *f = fopen(g_cfg.stats_file, "w");
  if (!f) {
    fprintf(stderr, "xseg: stats_file: cannot write '%s'\n", g_cfg.stats_file);
    return;
  }
  fputs("[", f);
  int first = 1;
  for (int i = 0; i < g_ndev; i++) {
    xs_device_t *d = &g_devs[i];
    if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) continue;
    pthread_mutex_lock(&d->lock);
    size_t n = xs_stats_json_device(d, g_be->name, NULL, 0);
    char *buf = malloc(n + 1);
    if (buf) {
      xs_stats_json_device(d, g_be->name, buf, n + 1);
      fprintf(f, "%s%s", first ? "" : ",\n", buf);
      first = 0;
      free(buf);
    }
    pthread_mutex_unlock(&d->lock);
  }
  fputs("]\n", f);
  fclose(f);
}

/* At exit: write the statistics and flush the trace, but free nothing,
 * since frameworks free their tensors after atexit handlers have run. */
static void at_exit(void) {
  pthread_mutex_lock(&g_lock);
  if (g_state == ST_READY) {
    write_stats_file();
    xs_trace_flush();
  }
  pthread_mutex_unlock(&g_lock);
}

static int init_fail(int code, const char *msg) {
  snprintf(g_err, sizeof g_err, "%s", msg);
  g_err_code = code;
  g_state = ST_FAILED;
  if (!g_err_printed) {
    fprintf(stderr, "%s\n", g_err);
    g_err_printed = 1;
  }
  return xs_error(code, "%s", g_err);
}

static int init_locked(const char *conf, int source) {
  xs_config_t cfg;
  xs_config_defaults(&cfg);
  const char *origin = source == XS_SRC_API ? "xseg_init" : "XSEG_ALLOC_CONF";
  const char *text = source == XS_SRC_API ? conf : getenv("XSEG_ALLOC_CONF");
  char err[768], msg[1024];
  if (xs_config_parse(&cfg, text, source, origin, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "xseg: %s", err);
    return init_fail(XSEG_ECONFIG, msg);
  }
  xs_backend_t *be = NULL;
  int rc;
  if (cfg.backend == XS_BACKEND_HOST) {
    xs_host_params_t hp = {cfg.host_devices, cfg.host_capacity, cfg.host_granularity};
    rc = xs_host_backend_create(&hp, &be);
  } else {
#if XSEG_HAVE_CUDA
    rc = xs_cuda_backend_create(&be);
#else
    rc = xs_error(XSEG_ENODRIVER, "this build of xseg has no CUDA backend (no CUDA headers at build time)");
#endif
  }
  int n = 0;
  if (rc == 0) {
    rc = be->device_count(be, &n);
    if (rc != 0) xs_error(rc, "%s", be->error_string(be));
  }
  if (rc == 0 && n <= 0) rc = xs_error(XSEG_ENODEV, "no %s device found", cfg.backend == XS_BACKEND_HOST ? "host" : "CUDA");
  xs_device_t *devs = rc == 0 ? calloc((size_t)n, sizeof *devs) : NULL;
  if (rc == 0 && !devs) rc = xs_error(XSEG_ENOMEM, "out of host memory");
  if (rc == 0 && cfg.trace_file[0]) rc = xs_trace_open(cfg.trace_file);
  if (rc != 0) {
    snprintf(msg, sizeof msg, "xseg: cannot start the %s backend: %s",
             cfg.backend == XS_BACKEND_HOST ? "host" : "cuda", xseg_last_error());
    free(devs);
    if (be) be->destroy(be);
    return init_fail(rc, msg);
  }
  /* Critical sections are a few hundred nanoseconds: spin briefly before
   * sleeping, where the C library offers it (glibc's adaptive mutex). */
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  for (int i = 0; i < n; i++) pthread_mutex_init(&devs[i].lock, &ma);
  pthread_mutexattr_destroy(&ma);
  g_cfg = cfg;
  g_be = be;
  g_ndev = n;
  g_devs = devs;
  g_err_printed = 0;
  if (!g_atexit) {
    atexit(at_exit);
    g_atexit = 1;
  }
  if (cfg.verbose) {
    char d[4096];
    xs_config_describe(&g_cfg, d, sizeof d);
    fprintf(stderr, "xseg %s: %s backend, %d device(s); configuration:\n%s", xseg_version(), be->name, n, d);
  }
  __atomic_store_n(&g_state, ST_READY, __ATOMIC_RELEASE);
  return 0;
}

static int ensure_init(void) {
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == ST_READY) return 0;
  pthread_mutex_lock(&g_lock);
  int rc = 0;
  if (g_state == ST_UNINIT) rc = init_locked(NULL, XS_SRC_ENV);
  else if (g_state == ST_FAILED) rc = xs_error(g_err_code, "%s", g_err);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* The device's allocator, created on first use; NULL with an error. */
static xs_device_t *device_get(int dev) {
  if (ensure_init() != 0) return NULL;
  if (dev < 0 || dev >= g_ndev) {
    xs_error(XSEG_ENODEV, "xseg: device %d out of range: %d device(s) on the %s backend", dev, g_ndev, g_be->name);
    return NULL;
  }
  xs_device_t *d = &g_devs[dev];
  if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) return d;
  pthread_mutex_lock(&d->lock);
  int rc = 0;
  if (!d->ready) {
    rc = xs_device_init(d, g_be, dev, &g_cfg);
    if (rc == 0) {
      __atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
    } else {
      char keep[1024];
      snprintf(keep, sizeof keep, "%s", xseg_last_error());
      xs_device_destroy(d);
      memset((char *)d + sizeof d->lock, 0, sizeof *d - sizeof d->lock);
      xs_error(rc, "%s", keep);
    }
  }
  pthread_mutex_unlock(&d->lock);
  return rc == 0 ? d : NULL;
}

static int busy(void) {
  for (int i = 0; i < g_ndev; i++) {
    xs_device_t *d = &g_devs[i];
    if (!d->ready) continue;
    pthread_mutex_lock(&d->lock);
    if (d->npending) xs_process_events(d); /* frees whose streams are done are not busy */
    int b = d->live.count != 0 || d->npending != 0;
    pthread_mutex_unlock(&d->lock);
    if (b) return xs_error(XSEG_EBUSY, "xseg: device %d still has %zu live and %zu pending allocation(s)", i,
                           d->live.count, d->npending);
  }
  return 0;
}

static void shutdown_locked(void) {
  if (g_state == ST_READY) {
    write_stats_file();
    for (int i = 0; i < g_ndev; i++) {
      xs_device_t *d = &g_devs[i];
      if (d->ready) {
        pthread_mutex_lock(&d->lock);
        xs_empty_cache(d);
        xs_device_destroy(d);
        pthread_mutex_unlock(&d->lock);
      }
      pthread_mutex_destroy(&d->lock);
    }
    free(g_devs);
    xs_trace_close();
    g_be->destroy(g_be);
  }
  g_devs = NULL;
  g_be = NULL;
  g_ndev = 0;
  __atomic_store_n(&g_state, ST_UNINIT, __ATOMIC_RELEASE);
}

int xseg_init(const char *conf) {
  pthread_mutex_lock(&g_lock);
  int rc = g_state == ST_READY ? busy() : 0;
  if (rc == 0) {
    shutdown_locked();
    rc = init_locked(conf, conf ? XS_SRC_API : XS_SRC_ENV);
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

int xseg_shutdown(void) {
  pthread_mutex_lock(&g_lock);
  int rc = g_state == ST_READY ? busy() : 0;
  if (rc == 0) shutdown_locked();
  pthread_mutex_unlock(&g_lock);
  return rc;
}

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
  xs_device_t *d = device_get(device);
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
  if (ensure_init() != 0) return xseg_last_error_code();
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < g_ndev; i++) {
    xs_device_t *d = &g_devs[i];
    if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) continue;
    pthread_mutex_lock(&d->lock);
    /* A free takes the block out of the map in the same probe. */
    xs_block_t *b = fn == do_free ? xs_ptrmap_take(&d->live, p) : xs_find_live(d, p);
    int rc = b ? fn(d, b, arg) : -1;
    if (b) debug_check(d);
    pthread_mutex_unlock(&d->lock);
    if (rc >= 0) return rc;
  }
  for (int i = 0; i < g_ndev; i++) {
    xs_device_t *d = &g_devs[i];
    if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) continue;
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

void *xseg_torch_alloc(ssize_t size, int device, xseg_stream_t stream) {
  if (size < 0) {
    xs_error(XSEG_EINVAL, "xseg: xseg_torch_alloc: negative size %zd", size);
    return NULL;
  }
  if (size == 0) {
    xs_error_clear();
    return NULL; /* PyTorch keeps a NULL data pointer for empty tensors and never frees it */
  }
  void *p = xseg_malloc((size_t)size, device, stream);
  if (!p) fprintf(stderr, "%s\n", xseg_last_error()); /* PyTorch does not check, so say it */
  return p;
}

void xseg_torch_free(void *ptr, ssize_t size, int device, xseg_stream_t stream) {
  (void)size;
  (void)device;
  (void)stream;
  if (xseg_free(ptr) != 0) fprintf(stderr, "%s\n", xseg_last_error()); /* no way to return it to PyTorch */
}

void xseg_torch_record_stream(void *ptr, xseg_stream_t stream) {
  if (xseg_record_stream(ptr, stream) != 0) fprintf(stderr, "%s\n", xseg_last_error());
}

void xseg_torch_empty_cache(void) {
  if (xseg_empty_cache(-1) != 0) fprintf(stderr, "%s\n", xseg_last_error());
}

void xseg_torch_set_memory_fraction(double fraction, int device) {
  if (xseg_set_memory_fraction(fraction, device) != 0) fprintf(stderr, "%s\n", xseg_last_error());
}

int xseg_set_memory_fraction(double fraction, int device) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    return xs_error(XSEG_EINVAL, "xseg: xseg_set_memory_fraction(%g): the fraction must be in (0, 1]", fraction);
  xs_device_t *d = device_get(device);
  if (!d) return xseg_last_error_code();
  pthread_mutex_lock(&d->lock);
  size_t limit = (size_t)(fraction * (double)d->phys.total);
  if (g_cfg.max_memory != 0 && g_cfg.max_memory < limit) limit = g_cfg.max_memory;
  d->phys.limit = limit / d->phys.gran * d->phys.gran;
  pthread_mutex_unlock(&d->lock);
  return 0;
}

/* ---- per-device operations ---------------------------------------------------------------------- */

/* Run fn on `device`, or on every initialised device when device is -1. */
static int for_devices(int device, int (*fn)(xs_device_t *)) {
  if (ensure_init() != 0) return xseg_last_error_code();
  if (device != -1) {
    xs_device_t *d = device_get(device);
    if (!d) return xseg_last_error_code();
    pthread_mutex_lock(&d->lock);
    int rc = fn(d);
    pthread_mutex_unlock(&d->lock);
    return rc;
  }
  int rc = 0;
  for (int i = 0; i < g_ndev; i++) {
    xs_device_t *d = &g_devs[i];
    if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) continue;
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
  return 0;
}

int xseg_reset_peak_stats(int device) { return for_devices(device, do_reset_peaks); }

int xseg_check_heap(int device) { return for_devices(device, xs_check_device); }

size_t xseg_stats_json(int device, char *buf, size_t len) {
  xs_device_t *d = device_get(device);
  if (!d) return 0;
  pthread_mutex_lock(&d->lock);
  size_t n = xs_stats_json_device(d, g_be->name, buf, len);
  pthread_mutex_unlock(&d->lock);
  return n;
}

size_t xseg_snapshot_json(int device, char *buf, size_t len) {
  xs_device_t *d = device_get(device);
  if (!d) return 0;
  pthread_mutex_lock(&d->lock);
  size_t n = xs_snapshot_device(d, buf, len);
  pthread_mutex_unlock(&d->lock);
  return n;
}

void xseg_print_summary(int device, FILE *out) {
  if (!out) out = stderr;
  xs_device_t *d = device_get(device);
  if (!d) {
    fprintf(out, "%s\n", xseg_last_error());
    return;
  }
  pthread_mutex_lock(&d->lock);
  xs_stats_summary(d, g_be->name, out);
  pthread_mutex_unlock(&d->lock);
}

size_t xseg_config_describe(char *buf, size_t len) {
  if (ensure_init() != 0) return 0;
  return xs_config_describe(&g_cfg, buf, len);
}

int xseg_device_count(void) {
  if (ensure_init() != 0) return -xseg_last_error_code();
  return g_ndev;
}

int xseg_enable_peer_access(int device, int peer) {
  xs_device_t *d = device_get(device);
  if (!d) return xseg_last_error_code();
  if (peer < 0 || peer >= g_ndev || peer == device)
    return xs_error(XSEG_ENODEV, "xseg: xseg_enable_peer_access(%d, %d): bad peer device", device, peer);
  pthread_mutex_lock(&d->lock);
  int rc = 0, can = 0;
  if (d->mode != XS_MODE_EXPANDABLE) {
    rc = xs_error(XSEG_ENOTSUP, "xseg: peer access needs expandable segments (device %d runs the binned pool)", device);
  } else if (g_be->can_access_peer(g_be, device, peer, &can) != 0 || !can) {
    rc = xs_error(XSEG_ENOTSUP, "xseg: device %d cannot access device %d", peer, device);
  } else {
    int known = 0;
    for (int i = 0; i < d->phys.npeers; i++) known |= d->phys.peers[i] == peer;
    if (!known && d->phys.npeers < 64) d->phys.peers[d->phys.npeers++] = peer;
    /* Pages mapped before now get access too; later ones get it when mapped. */
    for (size_t i = 0; i < d->nstreams && rc == 0; i++) {
      for (int k = 0; k < XS_NCLASS && rc == 0; k++) {
        for (xs_segment_t *s = d->streams[i]->pools[k].segs; s && rc == 0; s = s->next) {
          for (size_t pg = 0; pg < s->npages && rc == 0;) {
            xs_chunk_t *c = s->pages[pg];
            if (!c) {
              pg++;
              continue;
            }
            rc = xs_phys_set_access(d, c->addr, c->size);
            pg += c->size / s->page;
          }
        }
      }
    }
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

/* ---- for tests and benchmarks ---------------------------------------------------------------------- */

xs_backend_t *xs_current_backend(void) {
  return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == ST_READY ? g_be : NULL;
}

xs_device_t *xs_device_peek(int dev) {
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != ST_READY || dev < 0 || dev >= g_ndev) return NULL;
  xs_device_t *d = &g_devs[dev];
  return __atomic_load_n(&d->ready, __ATOMIC_ACQUIRE) ? d : NULL;
}
