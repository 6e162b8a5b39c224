/* benchmarks/passes.c: a trace replayed several times in one process - the
 * first pass from an empty allocator, the later ones warm - with what each
 * pass cost: time per event, and the driver work behind it (calls by kind
 * and the time in them, from xseg's own counters, so it reads the same on
 * the host backend and on a GPU).  Where the microseconds go, and whether
 * a steady state still calls the driver (docs/benchmarks.md, "Growing and
 * shrinking").
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static long long counter(const char *json, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(json, k);
  return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

/* The counters a pass is measured by, read from xseg_stats_json. */
static void read_counters(pass_t *c) {
  static char json[1 << 16];
  if (xseg_stats_json(0, json, sizeof json) >= sizeof json) return;
  c->create = counter(json, "num_device_alloc");
  c->release = counter(json, "num_device_free");
  c->map = counter(json, "num_map");
  c->unmap = counter(json, "num_unmap");
  c->access = counter(json, "num_set_access");
  c->conversions = counter(json, "num_conversions");
  c->grows = counter(json, "num_grows");
  c->converted_pages = counter(json, "converted_bytes") / counter(json, "granularity");
  c->created_mib = counter(json, "created_bytes") >> 20;
  c->released_mib = counter(json, "released_bytes") >> 20;
  static const char *const kinds[5] = {"time_create_ns", "time_release_ns", "time_map_ns", "time_unmap_ns",
                                       "time_set_access_ns"};
  c->driver_ns = 0;
  for (int k = 0; k < 5; k++) c->driver_ns += c->ns[k] = counter(json, kinds[k]);
  const char *h = strstr(json, "\"held_bytes\":{");
  c->held_peak = h ? counter(h, "peak") : -1;
}

static void diff(pass_t *d, const pass_t *a, const pass_t *b) {
  d->create = b->create - a->create;
  d->release = b->release - a->release;
  d->map = b->map - a->map;
  d->unmap = b->unmap - a->unmap;
  d->access = b->access - a->access;
  d->conversions = b->conversions - a->conversions;
  d->grows = b->grows - a->grows;
  d->converted_pages = b->converted_pages - a->converted_pages;
  d->created_mib = b->created_mib - a->created_mib;
  d->released_mib = b->released_mib - a->released_mib;
  d->driver_ns = b->driver_ns - a->driver_ns;
  for (int k = 0; k < 5; k++) d->ns[k] = b->ns[k] - a->ns[k];
  d->held_peak = b->held_peak;
}

size_t replay_events(const trace_t *t, void **ptr) {
  size_t fails = 0;
  for (size_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    replay_lag_tick(t, i);
    if (e->alloc) {
      ptr[e->slot] = xseg_malloc(e->bytes, 0, (xseg_stream_t)(uintptr_t)e->stream);
      fails += !ptr[e->slot];
    } else if (ptr[e->slot]) {
      xseg_free(ptr[e->slot]);
      ptr[e->slot] = NULL;
    }
  }
  return fails;
}

int replay_passes(const trace_t *t, const char *conf, int npasses, pass_t *out) {
  if (bench_init(conf) != 0) return -1;
  replay_lag_begin(t, conf); /* --lag: as in the fragmentation replay, a GPU running behind */
  void **ptr = calloc(t->nslots, sizeof *ptr);
  int rc = ptr ? 0 : -1;
  for (int k = 0; k < npasses && rc == 0; k++) {
    pass_t before = {0}, after = {0};
    read_counters(&before);
    double t0 = bench_clock_s();
    size_t fails = replay_events(t, ptr);
    /* A pass ends with nothing live, so the next one starts where a
     * training step or a serving wave would: the cache warm. */
    for (size_t s = 0; s < t->nslots; s++)
      if (ptr[s]) {
        xseg_free(ptr[s]);
        ptr[s] = NULL;
      }
    double dt = bench_clock_s() - t0;
    read_counters(&after);
    diff(&out[k], &before, &after);
    out[k].seconds = dt;
    out[k].failed = fails;
  }
  replay_lag_end(t);
  free(ptr);
  xseg_shutdown();
  return rc;
}
