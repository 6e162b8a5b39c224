/* benchmarks/micro.c: latency, scaling with live blocks, growth, threads and
 * devices.
 *
 * Timing method (docs/benchmarks.md): CLOCK_MONOTONIC around batches of
 * operations, the batch time divided by its size is one sample; medians and
 * 99th percentiles are over samples.  Batches keep the clock's own cost
 * (about 20 ns) out of figures that are themselves tens of nanoseconds.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double pct(double *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp_d);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* ---- latency: cached alloc+free pairs ----------------------------------------------- */

int bench_latency(const char *conf, const size_t *sizes, int nsizes, int samples, latency_t *out) {
  if (bench_init(conf) != 0) return -1;
  const int batch = 16;
  double *v = malloc((size_t)samples * sizeof *v);
  for (int k = 0; k < nsizes; k++) {
    size_t s = sizes[k];
    void *p = xseg_malloc(s, 0, NULL); /* warm: the block is cached from now on */
    if (!p) {
      fprintf(stderr, "xseg-bench: latency: %zu bytes: %s\n", s, xseg_last_error());
      out[k].median_ns = out[k].p99_ns = -1;
      continue;
    }
    xseg_free(p);
    for (int i = 0; i < samples; i++) {
      double t0 = now_s();
      for (int j = 0; j < batch; j++) {
        p = xseg_malloc(s, 0, NULL);
        xseg_free(p);
      }
      v[i] = (now_s() - t0) * 1e9 / batch;
    }
    out[k].size = s;
    out[k].median_ns = pct(v, (size_t)samples, 0.5);
    out[k].p99_ns = pct(v, (size_t)samples, 0.99);
  }
  free(v);
  xseg_shutdown();
  return 0;
}

/* ---- scaling with the number of live blocks ------------------------------------------ */

static size_t small_size(void) { return 512 + rnd() % (8 * 1024); }

int bench_scale(const char *conf, size_t live, int samples, scale_t *out) {
  if (bench_init(conf) != 0) return -1;
  void **v = malloc(live * sizeof *v);
  for (size_t i = 0; i < live; i++) {
    v[i] = xseg_malloc(small_size(), 0, NULL);
    if (!v[i]) {
      fprintf(stderr, "xseg-bench: scale: %s\n", xseg_last_error());
      live = i;
      break;
    }
  }
  /* Free a random tenth, so the free sets are not trivial. */
  for (size_t i = 0; i < live / 10; i++) {
    size_t k = rnd() % live;
    xseg_free(v[k]);
    v[k] = xseg_malloc(small_size(), 0, NULL);
  }
  const int batch = 16;
  double *pair = malloc((size_t)samples * sizeof *pair), *churn = malloc((size_t)samples * sizeof *churn);
  for (int i = 0; i < samples; i++) {
    size_t sz[16];
    for (int j = 0; j < batch; j++) sz[j] = small_size();
    double t0 = now_s();
    for (int j = 0; j < batch; j++) xseg_free(xseg_malloc(sz[j], 0, NULL));
    pair[i] = (now_s() - t0) * 1e9 / batch;
    size_t idx[16];
    for (int j = 0; j < batch; j++) idx[j] = rnd() % live;
    t0 = now_s();
    for (int j = 0; j < batch; j++) {
      xseg_free(v[idx[j]]);
      v[idx[j]] = xseg_malloc(sz[j], 0, NULL);
    }
    churn[i] = (now_s() - t0) * 1e9 / batch;
  }
  out->live = live;
  out->pair_ns = pct(pair, (size_t)samples, 0.5);
  out->churn_ns = pct(churn, (size_t)samples, 0.5);
  for (size_t i = 0; i < live; i++) xseg_free(v[i]);
  free(v);
  free(pair);
  free(churn);
  xseg_shutdown();
  return 0;
}

/* ---- growth: new memory from an empty cache --------------------------------------------- */

int bench_growth(const char *conf, size_t size, size_t total, growth_t *out) {
  if (bench_init(conf) != 0) return -1;
  int n = (int)(total / size);
  if (n < 1) n = 1;
  void **v = calloc((size_t)n, sizeof *v);
  double *t = malloc((size_t)n * sizeof *t);
  int got = 0;
  for (int i = 0; i < n; i++) {
    double t0 = now_s();
    v[i] = xseg_malloc(size, 0, NULL);
    t[i] = now_s() - t0;
    if (!v[i]) break;
    got++;
  }
  out->size = size;
  out->count = got;
  out->median_us = got ? pct(t, (size_t)got, 0.5) * 1e6 : -1;
  double sum = 0;
  for (int i = 0; i < got; i++) sum += t[i];
  out->gbps = got ? (double)size * got / sum / 1e9 : 0;
  for (int i = 0; i < got; i++) xseg_free(v[i]);
  free(v);
  free(t);
  xseg_shutdown();
  return 0;
}

/* ---- threads ------------------------------------------------------------------------------ */

#define RING 64

typedef struct mailbox_s {
  pthread_mutex_t mu;
  void *slot[RING];
  int head, count;
} mailbox_t;

typedef struct worker_s {
  int id, nthreads, ops;
  xseg_stream_t stream;
  mailbox_t *boxes;
  double seconds;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  uint64_t r = 0x12345 + (uint64_t)w->id * 7919;
  xseg_stream_t s = w->stream;
  mailbox_t *next = &w->boxes[(w->id + 1) % w->nthreads], *mine = &w->boxes[w->id];
  double t0 = now_s();
  for (int i = 0; i < w->ops; i++) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    size_t sz = 512 + r % (256 * 1024);
    void *p = xseg_malloc(sz, 0, s);
    if (!p) continue;
    if (w->nthreads > 1 && (r >> 40) % 4 == 0) {
      /* A quarter of the blocks are freed by the next thread. */
      pthread_mutex_lock(&next->mu);
      if (next->count < RING) {
        next->slot[(next->head + next->count++) % RING] = p;
        p = NULL;
      }
      pthread_mutex_unlock(&next->mu);
    }
    if (p) xseg_free(p);
    pthread_mutex_lock(&mine->mu);
    void *q = mine->count ? mine->slot[mine->head] : NULL;
    if (q) {
      mine->head = (mine->head + 1) % RING;
      mine->count--;
    }
    pthread_mutex_unlock(&mine->mu);
    if (q) xseg_free(q);
  }
  w->seconds = now_s() - t0;
  return NULL;
}

int bench_threads(const char *conf, int nthreads, int ops, void *const *streams, double *mops) {
  if (bench_init(conf) != 0) return -1;
  mailbox_t boxes[8];
  worker_t w[8];
  pthread_t th[8];
  for (int i = 0; i < nthreads; i++) {
    pthread_mutex_init(&boxes[i].mu, NULL);
    boxes[i].head = boxes[i].count = 0;
  }
  double t0 = now_s();
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker_t){i, nthreads, ops, (xseg_stream_t)streams[i], boxes, 0};
    pthread_create(&th[i], NULL, worker, &w[i]);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  double dt = now_s() - t0;
  for (int i = 0; i < nthreads; i++) {
    for (int k = 0; k < boxes[i].count; k++) xseg_free(boxes[i].slot[(boxes[i].head + k) % RING]);
    pthread_mutex_destroy(&boxes[i].mu);
  }
  *mops = (double)nthreads * ops * 2 / dt / 1e6; /* an alloc and a free per op */
  int rc = xseg_check_heap(0);
  xseg_shutdown();
  return rc;
}

/* ---- devices: one thread per device ------------------------------------------------------ */

#define DEV_RING 32

typedef struct dworker_s {
  int dev, ops;
  pthread_barrier_t *start;
  double seconds;
  long failed;
} dworker_t;

/* A steady mix on one device: 32 blocks live, the oldest freed before each
 * new one; three in four small (up to 64 KiB), the rest up to 4 MiB. */
static void *device_worker(void *arg) {
  dworker_t *w = arg;
  void *ring[DEV_RING] = {0};
  uint64_t r = 0x51ED + (uint64_t)w->dev * 7919;
  pthread_barrier_wait(w->start);
  double t0 = now_s();
  for (int i = 0; i < w->ops; i++) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    size_t sz = (r >> 40) % 4 ? 512 + r % (64 * 1024) : 512 + r % (4u << 20);
    int k = i % DEV_RING;
    if (ring[k]) xseg_free(ring[k]);
    ring[k] = xseg_malloc(sz, w->dev, NULL);
    if (!ring[k]) w->failed++;
  }
  w->seconds = now_s() - t0;
  for (int k = 0; k < DEV_RING; k++) xseg_free(ring[k]);
  return NULL;
}

int bench_devices(const char *conf, int nthreads, int spread, int ops, double *mops) {
  if (bench_init(conf) != 0) return -1;
  if (spread && xseg_device_count() < nthreads) {
    fprintf(stderr, "xseg-bench: devices: %d threads need %d devices, %d present\n", nthreads, nthreads,
            xseg_device_count());
    xseg_shutdown();
    return -1;
  }
  dworker_t w[XS_BENCH_MAX_DEVICES];
  pthread_t th[XS_BENCH_MAX_DEVICES];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)nthreads);
  for (int i = 0; i < nthreads; i++) {
    w[i] = (dworker_t){spread ? i : 0, ops, &start, 0, 0};
    pthread_create(&th[i], NULL, device_worker, &w[i]);
  }
  double slowest = 0;
  long failed = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(th[i], NULL);
    if (w[i].seconds > slowest) slowest = w[i].seconds;
    failed += w[i].failed;
  }
  pthread_barrier_destroy(&start);
  *mops = (double)nthreads * ops * 2 / slowest / 1e6; /* an alloc and a free per op */
  int rc = failed ? -1 : 0;
  if (failed) fprintf(stderr, "xseg-bench: devices: %ld allocations failed: %s\n", failed, xseg_last_error());
  for (int i = 0; i < (spread ? nthreads : 1) && rc == 0; i++) rc = xseg_check_heap(i);
  xseg_shutdown();
  return rc;
}
