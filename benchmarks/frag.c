/* benchmarks/frag.c: trace replay and the min-budget overhead.
 *
 * The headline fragmentation figure (docs/benchmarks.md): the smallest
 * device-memory budget in which a trace replays without running out of
 * memory, divided by the trace's peak live bytes.  1.00 is the physical
 * limit.  On the host backend the budget is host_capacity_mb, found by
 * bisection; each trial is a fresh xseg_init, so no state carries over.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "init.h"
#include "host_backend.h"

int bench_lag;

/* --lag K on the host backend: stream work completes only every K events,
 * as on a GPU that runs behind the host (events recorded at frees are
 * pending until then; a wait completes them at once). */
static void lag_streams(const trace_t *t, int how) {
  xs_backend_t *be = xs_current_backend();
  for (int s = 0; s < t->nstreams; s++) {
    xseg_stream_t st = (xseg_stream_t)(uintptr_t)s;
    if (how == 0) xs_host_stream_hold(be, st);
    else if (how == 1) xs_host_stream_complete(be, st);
    else xs_host_stream_release(be, st);
  }
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long long stat_of(const char *json, const char *key) {
  const char *p = strstr(json, key);
  if (!p) return -1;
  p = strstr(p, "\"peak\":");
  return p ? strtoll(p + 7, NULL, 10) : -1;
}

replay_t replay_xseg(const trace_t *t, const char *conf, int keep_running) {
  replay_t r = {0};
  if (xseg_init(conf) != 0) {
    fprintf(stderr, "xseg-bench: %s\n", xseg_last_error());
    return r;
  }
  void **ptr = calloc(t->nslots, sizeof *ptr);
  r.ok = 1;
  int lag = bench_lag > 0 && strstr(conf, "backend:host") != NULL;
  if (lag) lag_streams(t, 0);
  double t0 = now_s();
  for (size_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    if (lag && i % (size_t)bench_lag == 0) lag_streams(t, 1);
    if (e->alloc) {
      ptr[e->slot] = xseg_malloc(e->bytes, 0, (xseg_stream_t)(uintptr_t)e->stream);
      if (!ptr[e->slot]) {
        if (r.ok) r.failed_at = i;
        r.ok = 0;
        if (!keep_running) break;
      }
    } else if (ptr[e->slot]) {
      xseg_free(ptr[e->slot]);
      ptr[e->slot] = NULL;
    }
  }
  r.seconds = now_s() - t0;
  if (lag) lag_streams(t, 2);
  static char json[1 << 16];
  if (xseg_stats_json(0, json, sizeof json) < sizeof json) r.held_peak = (uint64_t)stat_of(json, "\"held_bytes\"");
  for (size_t s = 0; s < t->nslots; s++)
    if (ptr[s]) xseg_free(ptr[s]);
  free(ptr);
  xseg_shutdown();
  return r;
}

const char *const ak_names[AK__COUNT] = {"xseg", "xseg-binned", "cudaMalloc", "cudaMallocAsync"};

int replay_fits(const trace_t *t, alloc_kind_t k, int gpu, const char *extra, size_t mb) {
  char c[1024];
  const char *mode = k == AK_XSEG_BIN ? "expandable_segments:False" : "expandable_segments:True";
  const char *sep = extra && *extra ? "," : "";
  if (!gpu) {
    if (k != AK_XSEG_EXP && k != AK_XSEG_BIN) return 0;
    snprintf(c, sizeof c, "backend:host,host_capacity_mb:%zu,%s%s%s", mb, mode, sep, extra ? extra : "");
    return replay_xseg(t, c, 0).ok;
  }
  uint64_t filler;
  if (gpu_fill(mb << 20, &filler) != 0) return 0;
  int ok;
  if (k == AK_CUDAMALLOC || k == AK_MALLOCASYNC) {
    ok = replay_cuda(t, k == AK_CUDAMALLOC ? 0 : 1).ok;
  } else {
    snprintf(c, sizeof c, "backend:cuda,%s%s%s", mode, sep, extra ? extra : "");
    ok = replay_xseg(t, c, 0).ok;
  }
  gpu_unfill(filler);
  return ok;
}

size_t min_budget_mb(const trace_t *t, alloc_kind_t k, int gpu, const char *extra, size_t step, int *replays) {
  size_t lo = (size_t)((t->peak_live + (1u << 20) - 1) >> 20);
  lo = (lo + step - 1) / step * step; /* nothing below the peak can fit */
  (*replays)++;
  if (replay_fits(t, k, gpu, extra, lo)) return lo;
  size_t gap = lo / 16 + step, hi = lo + gap;
  for (;;) {
    (*replays)++;
    if (replay_fits(t, k, gpu, extra, hi)) break;
    if (hi > 16 * lo) return 0;
    lo = hi; /* known to fail */
    gap *= 2;
    hi = lo + gap;
  }
  /* lo fails, hi fits */
  while (hi - lo > step) {
    size_t mid = (lo + (hi - lo) / 2) / step * step;
    if (mid <= lo) mid = lo + step;
    (*replays)++;
    if (replay_fits(t, k, gpu, extra, mid))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}
