/* benchmarks/frag.c: replaying a trace through xseg, and the bisection
 * behind the min-budget overhead.
 *
 * The headline fragmentation figure (docs/benchmarks.md): the smallest
 * device-memory budget in which a trace replays without running out of
 * memory, divided by the trace's peak live bytes.  1.00 is the physical
 * limit.  The bisection only asks "does it fit in this budget?": the
 * caller (main.c) answers, with whichever allocator it measures (xseg here,
 * or the GPU's own allocators in cuda_alt.c), so this file knows nothing of
 * the others.  Each xseg trial is a fresh xseg_init, so no state carries
 * over.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "init.h"
#include "host_backend.h"

int bench_lag;
size_t bench_filler_mb, bench_budget_mb;
int bench_model;

/* The H100's scrub after releases, for --model (docs/design.md, "Creates
 * after releases"): 64 MiB back within 0.1 ms, 512 MiB within 1-2 ms, and
 * a create that needs memory still being scrubbed waits 6-8 ms. */
#define MODEL_SCRUB_NS_PER_MIB 2500
#define MODEL_SCRUB_WAIT_NS 6500000

void bench_model_on(void) {
  xs_backend_t *be = xs_current_backend();
  if (!bench_model || !be || !xs_host_is(be)) return;
  xs_host_model_time(be, &xs_host_h100_costs);
  xs_host_scrub(be, MODEL_SCRUB_NS_PER_MIB, MODEL_SCRUB_WAIT_NS);
  /* xseg's clock counts modelled time only, so that pacing and the scrub
   * decide alike in every run, however busy the host. */
  xs_host_model_clock(be, 1);
}

double bench_clock_s(void) {
  xs_backend_t *be = xs_current_backend();
  if (!be) return now_s();
  double t = (double)be->now_ns(be) * 1e-9;
  /* Under --model that is modelled time only: a replay's time adds the
   * host's own, as on the GPU. */
  if (bench_model && xs_host_is(be)) t += now_s();
  return t;
}

/* --lag K on the host backend: stream work completes only every K events,
 * as on a GPU that runs behind the host (events recorded at frees are
 * pending until then; a wait completes them at once). */
void bench_lag_streams(const trace_t *t, int how) {
  xs_backend_t *be = xs_current_backend();
  for (int s = 0; s < t->nstreams; s++) {
    xseg_stream_t st = (xseg_stream_t)(uintptr_t)s;
    if (how == 0) xs_host_stream_hold(be, st);
    else if (how == 1) xs_host_stream_complete(be, st);
    else xs_host_stream_release(be, st);
  }
}

static int lagging; /* a replay under --lag on the host backend is running */

int replay_lag_begin(const trace_t *t, const char *conf) {
  lagging = bench_lag > 0 && strstr(conf, "backend:host") != NULL;
  if (lagging) bench_lag_streams(t, 0);
  return lagging;
}

void replay_lag_tick(const trace_t *t, size_t i) {
  if (lagging && i % (size_t)bench_lag == 0) bench_lag_streams(t, 1);
}

void replay_lag_end(const trace_t *t) {
  if (lagging) bench_lag_streams(t, 2);
  lagging = 0;
}

static long long stat_of(const char *json, const char *key) {
  const char *p = strstr(json, key);
  if (!p) return -1;
  p = strstr(p, "\"peak\":");
  return p ? strtoll(p + 7, NULL, 10) : -1;
}

replay_t replay_xseg(const trace_t *t, const char *conf, int keep_running, size_t fill) {
  replay_t r = {0};
  if (bench_init(conf) != 0) return r;
  uintptr_t filler = 0;
  xs_backend_t *be = xs_current_backend();
  if (fill && be->mem_alloc(be, 0, fill, &filler) != 0) {
    fprintf(stderr, "xseg-bench: a filler of %zu MiB: %s\n", fill >> 20, be->error_string(be));
    xseg_shutdown();
    return r;
  }
  void **ptr = calloc(t->nslots, sizeof *ptr);
  r.ok = 1;
  replay_lag_begin(t, conf);
  double t0 = bench_clock_s();
  for (size_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    replay_lag_tick(t, i);
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
  r.seconds = bench_clock_s() - t0;
  replay_lag_end(t);
  static char json[1 << 16];
  if (xseg_stats_json(0, json, sizeof json) < sizeof json) r.held_peak = (uint64_t)stat_of(json, "\"held_bytes\"");
  for (size_t s = 0; s < t->nslots; s++)
    if (ptr[s]) xseg_free(ptr[s]);
  free(ptr);
  if (filler) be->mem_free(be, 0, filler, fill);
  xseg_shutdown();
  return r;
}

/* A replay's path depends on its budget (whether memory counts as
 * plentiful, how much may be pinned), so a trace can fit in one budget and
 * fail in several just above it: torch_vit_train with a filler fitted in
 * 4,753 MiB and failed in 18 of the 27 budgets from 4,754 to 4,780 MiB
 * (host backend, 1 MiB apart).  Bisection lands on whichever edge it meets
 * first, and nobody picks a budget that lands on a lucky one, so the
 * figure is the smallest budget above which FRAG_STABLE_TRIES budgets,
 * evenly spread over the next 1/FRAG_STABLE_DIV of the peak (at least one
 * step apart), fit too. */
#define FRAG_STABLE_TRIES 16
#define FRAG_STABLE_DIV 200

size_t min_budget_mb(uint64_t peak_live, size_t step, budget_fits_fn fits, void *ctx, int *replays) {
  size_t lo = (size_t)((peak_live + (1u << 20) - 1) >> 20);
  lo = (lo + step - 1) / step * step; /* nothing below the peak can fit */
  (*replays)++;
  if (fits(ctx, lo)) return lo;
  /* The limit is 16 x the first budget tried, not the last: hi / lo stays
   * under 2 as the gap doubles, so a test against lo would never stop. */
  size_t limit = 16 * lo, gap = lo / 16 + step, hi = lo + gap;
  for (;;) {
    (*replays)++;
    if (fits(ctx, hi)) break;
    if (hi >= limit) return 0;
    lo = hi; /* known to fail */
    gap *= 2;
    hi = lo + gap;
  }
  /* lo fails, hi fits */
  while (hi - lo > step) {
    size_t mid = (lo + (hi - lo) / 2) / step * step;
    if (mid <= lo) mid = lo + step;
    (*replays)++;
    if (fits(ctx, mid))
      hi = mid;
    else
      lo = mid;
  }
  /* The budgets above hi, until FRAG_STABLE_TRIES in a row fit; a failure
   * among them moves hi to the next budget above it that fits. */
  const size_t spread = (size_t)(peak_live >> 20) / FRAG_STABLE_DIV / FRAG_STABLE_TRIES;
  const size_t stride = spread <= step ? step : (spread + step - 1) / step * step;
  for (size_t k = 1; k <= FRAG_STABLE_TRIES;) {
    (*replays)++;
    if (fits(ctx, hi + k * stride)) {
      k++;
      continue;
    }
    hi += k * stride;
    do {
      hi += step;
      if (hi > limit) return 0;
      (*replays)++;
    } while (!fits(ctx, hi));
    k = 1;
  }
  return hi;
}
