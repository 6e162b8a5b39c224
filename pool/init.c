/* pool/init.c: the library's global state - the configuration, the
 * backend and the devices - and its life: initialisation on first use from
 * XSEG_ALLOC_CONF (or xseg_init), each device's allocator created on its
 * first use, the statistics file at exit, and xseg_shutdown.
 *
 * An invalid configuration leaves the library refusing every allocation
 * with the parser's message (printed once to stderr) until xseg_init is
 * given a valid one: nothing is allocated under a configuration the user
 * did not mean.
 *
 * Locks: g_lock serialises initialisation and shutdown; each device has
 * one lock, taken in pool/api.c around every operation on it.
 */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_backend.h"
#include "init.h"
#include "trace.h"

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
static char *g_pending;         /* xseg_configure's text for the first use, instead of XSEG_ALLOC_CONF */

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
  if (rc == 0) rc = xs_error_vmm(xs_vmm_device_count(be, &n));
  if (rc == 0 && n <= 0) rc = xs_error(XSEG_ENODEV, "no %s device found", cfg.backend == XS_BACKEND_HOST ? "host" : "CUDA");
  xs_device_t *devs = rc == 0 ? aligned_alloc(XS_CACHE_LINE, (size_t)n * sizeof *devs) : NULL;
  if (devs) memset(devs, 0, (size_t)n * sizeof *devs);
  if (rc == 0 && !devs) rc = xs_error(XSEG_ENOMEM, "out of host memory");
  if (rc == 0 && cfg.trace_file[0]) rc = xs_trace_open(cfg.trace_file);
  if (rc != 0) {
    /* Without a driver or a GPU, say where to go: the host backend runs
     * everything but GPU kernels. */
    int no_gpu = cfg.backend == XS_BACKEND_CUDA && (rc == XSEG_ENODRIVER || rc == XSEG_ENODEV);
    snprintf(msg, sizeof msg, "xseg: cannot start the %s backend: %s%s",
             cfg.backend == XS_BACKEND_HOST ? "host" : "cuda", xseg_last_error(),
             no_gpu ? ". To run without a GPU (tests, CI, simulation), use the host backend: "
                      "XSEG_ALLOC_CONF=backend:host" : "");
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

int xs_ensure_init(void) {
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == ST_READY) return 0;
  pthread_mutex_lock(&g_lock);
  int rc = 0;
  if (g_state == ST_UNINIT) rc = g_pending ? init_locked(g_pending, XS_SRC_API) : init_locked(NULL, XS_SRC_ENV);
  else if (g_state == ST_FAILED) rc = xs_error(g_err_code, "%s", g_err);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* Parse without starting anything: 0, or XSEG_ECONFIG with the message. */
static int check_text(const char *conf, const char *origin, xs_config_t *cfg) {
  xs_config_defaults(cfg);
  const char *text = conf ? conf : getenv("XSEG_ALLOC_CONF");
  char err[768];
  if (xs_config_parse(cfg, text, conf ? XS_SRC_API : XS_SRC_ENV, origin, err, sizeof err) != 0)
    return xs_error(XSEG_ECONFIG, "xseg: %s", err);
  return 0;
}

size_t xseg_config_check(const char *conf, char *buf, size_t len) {
  xs_config_t cfg;
  if (check_text(conf, conf ? "xseg_config_check" : "XSEG_ALLOC_CONF", &cfg) != 0) return 0;
  xs_error_clear();
  return xs_config_describe(&cfg, buf, len);
}

int xseg_configure(const char *conf) {
  xs_config_t cfg;
  int rc = check_text(conf, "xseg_configure", &cfg);
  if (rc != 0) return rc;
  pthread_mutex_lock(&g_lock);
  if (g_state == ST_READY) {
    pthread_mutex_unlock(&g_lock);
    return xseg_init(conf); /* already started: start again with it */
  }
  char *copy = conf ? strdup(conf) : NULL;
  if (conf && !copy) rc = xs_error(XSEG_ENOMEM, "xseg: out of host memory");
  if (rc == 0) {
    free(g_pending);
    g_pending = copy;
    g_state = ST_UNINIT; /* a failed start is forgotten: the next use tries this one */
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

xs_device_t *xs_device_get(int dev) {
  if (xs_ensure_init() != 0) return NULL;
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
    xs_owners_reset();
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
  free(g_pending); /* an explicit start replaces what xseg_configure left for later */
  g_pending = NULL;
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

/* ---- what the rest of the library reads ------------------------------------------- */

int xs_ndevices(void) { return g_ndev; }

xs_device_t *xs_device_ready(int dev) {
  xs_device_t *d = &g_devs[dev];
  return __atomic_load_n(&d->ready, __ATOMIC_ACQUIRE) ? d : NULL;
}

const char *xs_backend_name(void) { return g_be->name; }

const xs_config_t *xs_global_config(void) { return &g_cfg; }

xs_backend_t *xs_current_backend(void) {
  return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == ST_READY ? g_be : NULL;
}

xs_device_t *xs_device_peek(int dev) {
  if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != ST_READY || dev < 0 || dev >= g_ndev) return NULL;
  return xs_device_ready(dev);
}
