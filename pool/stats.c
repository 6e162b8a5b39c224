/* pool/stats.c: statistics out: JSON, the human summary, derived
 * fragmentation figures, peak reset and the out-of-memory diagnosis.
 *
 * The counters themselves are updated where things happen (alloc.c,
 * block.c, and the physical layer's in vmm/phys.c); this file only reads them, always under the device
 * lock, so every figure is exact at the moment it is written.  All output
 * walks the X-macro lists of stats.h, so no field can be left out of one.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

/* ---- an snprintf-like builder ----------------------------------------------------------- */

void xs_sbuf_put(xs_sbuf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = b->len < b->cap ? b->cap - b->len : 0;
  int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) b->len += (size_t)n;
}

size_t xs_sbuf_finish(xs_sbuf_t *b) {
  if (b->cap) b->p[b->len < b->cap ? b->len : b->cap - 1] = '\0';
  return b->len;
}

/* A fraction in [0, 1] with six decimals, whatever LC_NUMERIC says (JSON
 * needs a '.', and a program may have set a decimal-comma locale). */
static const char *fmt_frac(char *out, size_t n, double x) {
  if (!(x >= 0)) x = 0; /* NaN too */
  unsigned long long m = (unsigned long long)(x * 1e6 + 0.5);
  snprintf(out, n, "%llu.%06llu", m / 1000000, m % 1000000);
  return out;
}

/* ---- derived figures ------------------------------------------------------------------ */

/* Where free block f of an expandable segment lies: its bytes in pages
 * that its (live or pending) neighbours hold in part, and its whole pages
 * in chunks that reach past it into such a neighbour.  A free block's
 * neighbours are never free blocks of the same mapping (they merge), and
 * an unmapped neighbour ends on a page boundary, so a page f shares with a
 * neighbour and a chunk reaching past f both hold data. */
static void free_block_where(const xs_block_t *f, xs_derived_t *r) {
  const xs_vseg_t *vs = &f->seg->vs;
  const uintptr_t m = vs->page - 1, f0 = f->addr, f1 = xs_block_end(f);
  const uintptr_t w0 = (f0 + m) & ~m, w1 = f1 & ~m; /* the whole pages: [w0, w1) */
  if (w0 >= w1) { /* no whole page: f lies in one or two pages it shares */
    r->free_in_shared_pages_bytes += f1 - f0;
    return;
  }
  r->free_in_shared_pages_bytes += (w0 - f0) + (f1 - w1);
  for (uintptr_t x = w0; x < w1;) {
    const xs_extent_t c = xs_vseg_extent_at(vs, x);
    const uintptr_t end = c.addr + c.size < w1 ? c.addr + c.size : w1;
    if (c.addr < f0 || c.addr + c.size > f1) r->free_in_pinned_handles_bytes += end - x;
    x = end;
  }
}

static xs_derived_t derive(const xs_device_t *d) {
  xs_derived_t r = {0};
  for (size_t i = 0; i < d->nstreams; i++) {
    for (int k = 0; k < XS_NCLASS; k++) {
      const xs_tree_t *free_set = &d->streams[i]->pools[k].free;
      const xs_block_t *b = xs_tree_last(free_set);
      if (b && b->size > r.largest_free_block) r.largest_free_block = b->size;
      if (d->strat != &xs_expandable_strategy) continue;
      for (b = xs_tree_first(free_set); b; b = xs_tree_next(b))
        if (!b->seg->binned) free_block_where(b, &r);
    }
  }
  r.external_fragmentation =
      d->free_mapped ? 1.0 - (double)r.largest_free_block / (double)d->free_mapped : 0.0;
  int64_t peak_res = d->vmm.st.reserved_bytes[XS_STAT_ALL].peak;
  r.utilization = peak_res ? (double)d->stats.allocated_bytes[XS_STAT_ALL].peak / (double)peak_res : 0.0;
  r.rounding_waste_bytes =
      d->stats.allocated_bytes[XS_STAT_ALL].current - d->stats.requested_bytes[XS_STAT_ALL].current;
  return r;
}

void xs_stats_reset_peaks(xs_stats_t *s) {
#define RESET_POOLED(name, help) \
  for (int t = 0; t < XS_STAT_NTYPES; t++) s->name[t].peak = s->name[t].current;
  XS_STATS_POOLED(RESET_POOLED)
#undef RESET_POOLED
#define RESET_SINGLE(name, help) s->name.peak = s->name.current;
  XS_STATS_SINGLE(RESET_SINGLE)
#undef RESET_SINGLE
#define RESET_GAUGE(name, help) s->name.peak = s->name.current;
  XS_STATS_GAUGES(RESET_GAUGE)
#undef RESET_GAUGE
}

void xs_stats_reset_accumulated(xs_stats_t *s) {
#define RESET_POOLED(name, help) \
  for (int t = 0; t < XS_STAT_NTYPES; t++) s->name[t].allocated = s->name[t].freed = 0;
  XS_STATS_POOLED(RESET_POOLED)
#undef RESET_POOLED
#define RESET_SINGLE(name, help) s->name.allocated = s->name.freed = 0;
  XS_STATS_SINGLE(RESET_SINGLE)
#undef RESET_SINGLE
#define RESET_COUNTER(name, help) s->name = 0;
  XS_STATS_COUNTERS(RESET_COUNTER)
#undef RESET_COUNTER
}

/* ---- JSON ------------------------------------------------------------------------------- */

static const char *const type_names[XS_STAT_NTYPES] = {"all", "small_pool", "large_pool"};

static void json_pooled(xs_sbuf_t *b, const char *name, const xs_stat_t st[XS_STAT_NTYPES]) {
  xs_sbuf_put(b, "\"%s\":{", name);
  for (int t = 0; t < XS_STAT_NTYPES; t++)
    xs_sbuf_put(b, "%s\"%s\":{\"current\":%lld,\"peak\":%lld,\"allocated\":%lld,\"freed\":%lld}", t ? "," : "",
                type_names[t], (long long)st[t].current, (long long)st[t].peak, (long long)st[t].allocated,
                (long long)st[t].freed);
  xs_sbuf_put(b, "},");
}

static void json_single(xs_sbuf_t *b, const char *name, const xs_stat_t *st) {
  xs_sbuf_put(b, "\"%s\":{\"current\":%lld,\"peak\":%lld,\"allocated\":%lld,\"freed\":%lld},", name,
              (long long)st->current, (long long)st->peak, (long long)st->allocated, (long long)st->freed);
}

static void json_gauge(xs_sbuf_t *b, const char *name, const xs_gauge_t *g) {
  xs_sbuf_put(b, "\"%s\":{\"current\":%lld,\"peak\":%lld},", name, (long long)g->current, (long long)g->peak);
}

size_t xs_stats_json_device(xs_device_t *d, const char *backend, char *buf, size_t len) {
  xs_sbuf_t b = {buf, 0, len};
  const xs_stats_t *s = &d->stats;
  const xs_vmm_stats_t *v = &d->vmm.st;
  xs_derived_t dv = derive(d);
  xs_sbuf_put(&b, "{\"device\":%d,\"backend\":\"%s\",\"mode\":\"%s\",\"granularity\":%zu,\"total_memory\":%zu,"
          "\"limit\":%zu,",
      d->id, backend, d->strat->name, d->vmm.gran, d->vmm.total, d->vmm.limit);
#define JSON_POOLED(name, help) json_pooled(&b, #name, s->name);
#define JSON_VPOOLED(name, help) json_pooled(&b, #name, v->name);
  XS_STATS_POOLED(JSON_POOLED)
  XS_VMM_POOLED(JSON_VPOOLED)
#undef JSON_POOLED
#undef JSON_VPOOLED
#define JSON_SINGLE(name, help) json_single(&b, #name, &s->name);
  XS_STATS_SINGLE(JSON_SINGLE)
#undef JSON_SINGLE
#define JSON_GAUGE(name, help) json_gauge(&b, #name, &s->name);
#define JSON_VGAUGE(name, help) json_gauge(&b, #name, &v->name);
  XS_STATS_GAUGES(JSON_GAUGE)
  XS_VMM_GAUGES(JSON_VGAUGE)
#undef JSON_GAUGE
#undef JSON_VGAUGE
#define JSON_COUNTER(name, help) xs_sbuf_put(&b, "\"" #name "\":%llu,", (unsigned long long)s->name);
#define JSON_VCOUNTER(name, help) xs_sbuf_put(&b, "\"" #name "\":%llu,", (unsigned long long)v->name);
  XS_STATS_COUNTERS(JSON_COUNTER)
  XS_VMM_COUNTERS(JSON_VCOUNTER)
#undef JSON_COUNTER
#undef JSON_VCOUNTER
  char f1[32], f2[32];
  xs_sbuf_put(&b, "\"largest_free_block\":%llu,\"external_fragmentation\":%s,\"utilization\":%s,"
          "\"rounding_waste_bytes\":%lld,\"free_in_shared_pages_bytes\":%llu,\"free_in_pinned_handles_bytes\":%llu}",
      (unsigned long long)dv.largest_free_block, fmt_frac(f1, sizeof f1, dv.external_fragmentation),
      fmt_frac(f2, sizeof f2, dv.utilization), (long long)dv.rounding_waste_bytes,
      (unsigned long long)dv.free_in_shared_pages_bytes, (unsigned long long)dv.free_in_pinned_handles_bytes);
  return xs_sbuf_finish(&b);
}

/* ---- summary ------------------------------------------------------------------------------ */

static const char *fmt_size(char *out, size_t n, uint64_t v, int negative) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = (double)v;
  int i = 0;
  while (x >= 1024 && i < 6) {
    x /= 1024;
    i++;
  }
  snprintf(out, n, "%s%.*f %s", negative ? "-" : "", i ? 2 : 0, x, u[i]);
  return out;
}

/* Signed figures (a gauge could in principle go below zero). */
static const char *fmt_bytes(char *out, size_t n, int64_t v) {
  return fmt_size(out, n, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
}

static void summary_rows(FILE *out, const char *title, const xs_stat_t st[XS_STAT_NTYPES], int bytes) {
  for (int t = 0; t < XS_STAT_NTYPES; t++) {
    char a[32], b[32], c[32], e[32];
    const xs_stat_t *x = &st[t];
    const char *label = t == 0 ? title : (t == 1 ? "      from small pool" : "      from large pool");
    if (bytes)
      fprintf(out, "| %-27s | %12s | %12s | %12s | %12s |\n", label, fmt_bytes(a, 32, x->current),
              fmt_bytes(b, 32, x->peak), fmt_bytes(c, 32, x->allocated), fmt_bytes(e, 32, x->freed));
    else
      fprintf(out, "| %-27s | %12lld | %12lld | %12lld | %12lld |\n", label, (long long)x->current,
              (long long)x->peak, (long long)x->allocated, (long long)x->freed);
  }
}

void xs_stats_summary(xs_device_t *d, const char *backend, FILE *out) {
  const xs_stats_t *s = &d->stats;
  const xs_vmm_stats_t *v = &d->vmm.st;
  xs_derived_t dv = derive(d);
  char a[32], b[32], c[32];
  const char *rule = "|=============================================================================================|\n";
  const char *line = "|---------------------------------------------------------------------------------------------|\n";
  fputs(rule, out);
  fprintf(out, "|                  xseg memory summary, device %-3d (%-10s mode, %-4s backend)             |\n",
          d->id, d->strat->name, backend);
  fputs(line, out);
  fprintf(out, "| %-27s | %12s | %12s | %12s | %12s |\n", "Metric", "Cur Usage", "Peak Usage", "Tot Alloc",
          "Tot Freed");
  fputs(line, out);
  summary_rows(out, "Allocated memory", s->allocated_bytes, 1);
  fputs(line, out);
  summary_rows(out, "Active memory", s->active_bytes, 1);
  fputs(line, out);
  summary_rows(out, "Requested memory", s->requested_bytes, 1);
  fputs(line, out);
  summary_rows(out, "GPU reserved (mapped) memory", v->reserved_bytes, 1);
  fputs(line, out);
  summary_rows(out, "Non-releasable memory", s->inactive_split_bytes, 1);
  fputs(line, out);
  summary_rows(out, "Allocations", s->allocation, 0);
  fputs(line, out);
  summary_rows(out, "Active allocs", s->active, 0);
  fputs(line, out);
  summary_rows(out, "GPU reserved segments", v->segment, 0);
  fputs(line, out);
  summary_rows(out, "Non-releasable allocs", s->inactive_split, 0);
  fputs(rule, out);
  char e[32];
  fprintf(out, "| Held: %s (peak %s) of a %s limit; cached handles: %lld (%s)\n",
          fmt_bytes(a, 32, v->held_bytes.current), fmt_bytes(b, 32, v->held_bytes.peak),
          fmt_bytes(c, 32, (int64_t)d->vmm.limit), (long long)v->handles_cached.current,
          fmt_bytes(e, 32, v->cached_handle_bytes.current));
  fprintf(out, "| Free inside segments: %s, largest free block %s, external fragmentation %.1f%%",
          fmt_bytes(a, 32, (int64_t)d->free_mapped), fmt_bytes(b, 32, (int64_t)dv.largest_free_block),
          100.0 * dv.external_fragmentation);
  if (d->strat == &xs_expandable_strategy)
    fprintf(out, "; in pages live blocks share: %s, in handles they pin: %s",
            fmt_bytes(a, 32, (int64_t)dv.free_in_shared_pages_bytes),
            fmt_bytes(b, 32, (int64_t)dv.free_in_pinned_handles_bytes));
  fputc('\n', out);
  fprintf(out, "| Utilization (peak allocated / peak reserved): %.1f%%; rounding waste: %s\n",
          100.0 * dv.utilization, fmt_bytes(a, 32, dv.rounding_waste_bytes));
  fprintf(out, "| Driver calls: %llu create (%.2f ms), %llu release (%.2f ms), %llu map (%.2f ms), %llu unmap (%.2f ms), %llu set access (%.2f ms)\n",
          (unsigned long long)v->num_device_alloc, v->time_create_ns / 1e6,
          (unsigned long long)v->num_device_free, v->time_release_ns / 1e6,
          (unsigned long long)v->num_map, v->time_map_ns / 1e6, (unsigned long long)v->num_unmap,
          v->time_unmap_ns / 1e6, (unsigned long long)v->num_set_access, v->time_set_access_ns / 1e6);
  fprintf(out, "| Remapped: %s in %llu moves; retries: %llu; OOMs: %llu; fence waits: %llu; trims: %llu (%s)\n",
          fmt_bytes(a, 32, (int64_t)v->remapped_bytes), (unsigned long long)v->num_remaps,
          (unsigned long long)s->num_alloc_retries, (unsigned long long)s->num_ooms,
          (unsigned long long)s->num_fence_waits, (unsigned long long)s->num_trims,
          fmt_bytes(b, 32, (int64_t)s->trimmed_bytes));
  fputs(rule, out);
}

/* ---- out of memory -------------------------------------------------------------------------- */

/* Expandable mode: where the free memory inside segments lies that no
 * page move can give out (the derived figures), and how many whole pages
 * the free ones and `room` (what may still be mapped) came to against
 * the pages the request needs. */
static void put_stuck(const xs_device_t *d, const xs_derived_t *dv, size_t rounded, size_t room, xs_sbuf_t *b) {
  char f[32], s[32], p[32], g[32];
  const size_t page = d->vmm.gran, shared = dv->free_in_shared_pages_bytes, pinned = dv->free_in_pinned_handles_bytes;
  const size_t stuck = shared + pinned, whole = d->free_mapped > stuck ? d->free_mapped - stuck : 0;
  xs_sbuf_put(b, "of the %s free inside xseg's segments, %s lies in pages that live blocks share (the GPU maps %s "
                 "pages: only freeing those blocks gives it back) and %s in handles that live blocks pin; the whole "
                 "free pages and the room left come to %zu pages, and the request needs %zu",
              fmt_bytes(f, 32, (int64_t)d->free_mapped), fmt_bytes(s, 32, (int64_t)shared), fmt_size(g, 32, page, 0),
              fmt_bytes(p, 32, (int64_t)pinned), (whole + room) / page, (rounded + page - 1) / page);
}

/* Expandable mode, neither pressure nor memory outside xseg: every whole
 * free page was moved, and they were too few. */
static void oom_page_cause(const xs_device_t *d, const xs_derived_t *dv, size_t rounded, xs_sbuf_t *b) {
  const size_t page = d->vmm.gran, room = d->vmm.limit > d->vmm.held ? d->vmm.limit - d->vmm.held : 0;
  xs_sbuf_put(b, "fragmentation: ");
  put_stuck(d, dv, rounded, room, b);
  if (dv->free_in_pinned_handles_bytes > dv->free_in_shared_pages_bytes)
    xs_sbuf_put(b, "; smaller handles can be moved one by one: try page_size_mb:%zu", page >> 20 ? page >> 20 : 1);
  else
    xs_sbuf_put(b, "; free tensors, or lower the batch");
}

void xs_stats_oom_message(xs_device_t *d, size_t size, size_t rounded, char *buf, size_t len) {
  xs_sbuf_t b = {buf, 0, len};
  const xs_stats_t *s = &d->stats;
  const xs_vmm_stats_t *v = &d->vmm.st;
  xs_derived_t dv = derive(d);
  size_t drv_free = 0, drv_total = 0;
  int have_info = xs_vmm_mem_info(&d->vmm, &drv_free, &drv_total) == 0;
  xs_error_clear();
  char r[32], l[32], m[32], f[32], g[32], h[32], t[32];
  size_t live = (size_t)s->allocated_bytes[XS_STAT_ALL].current;
  size_t page = d->vmm.gran;
  size_t limit = d->vmm.limit;
  xs_sbuf_put(&b, "xseg: out of memory on device %d: cannot allocate %s (%zu bytes requested",
      d->id, fmt_size(r, 32, size, 0), size);
  if (rounded != SIZE_MAX) xs_sbuf_put(&b, ", %zu after rounding", rounded);
  xs_sbuf_put(&b, "). Live: %s in %lld blocks; mapped: %s; free inside segments: %s (largest free block %s); "
          "cached handles: %s; held: %s of a %s limit",
      fmt_bytes(l, 32, (int64_t)live), (long long)s->allocation[XS_STAT_ALL].current,
      fmt_bytes(m, 32, v->mapped_bytes.current), fmt_bytes(f, 32, (int64_t)d->free_mapped),
      fmt_bytes(g, 32, (int64_t)dv.largest_free_block), fmt_bytes(h, 32, v->cached_handle_bytes.current),
      fmt_bytes(t, 32, (int64_t)d->vmm.held), fmt_bytes(r, 32, (int64_t)limit));
  if (have_info) xs_sbuf_put(&b, "; the driver reports %s free of %s", fmt_bytes(l, 32, (int64_t)drv_free),
                     fmt_bytes(m, 32, (int64_t)drv_total));
  xs_sbuf_put(&b, ". Cause: ");
  const char *limit_key = d->cfg->max_memory ? "max_memory_mb" : "per_process_memory_fraction";
  if (rounded == SIZE_MAX || rounded > limit) {
    xs_sbuf_put(&b, "the request alone is larger than the memory xseg may use");
    if (limit < d->vmm.total) xs_sbuf_put(&b, " (the limit comes from %s)", limit_key);
  } else if ((live + page - 1) / page * page + rounded > limit) {
    xs_sbuf_put(&b, "memory pressure: live memory plus this request exceed the limit; free tensors, lower the batch");
    if (limit < d->vmm.total) xs_sbuf_put(&b, ", or raise %s", limit_key);
  } else if (have_info && d->vmm.held + drv_free < limit) {
    xs_sbuf_put(&b, "memory held outside this allocator (other processes, or cudaMalloc outside xseg): %s "
            "of the device is neither xseg's nor free",
        fmt_bytes(l, 32, (int64_t)(drv_total - d->vmm.held - drv_free)));
    if (d->strat == &xs_expandable_strategy && d->free_mapped > 0) {
      /* What of the failure is xseg's own: the room left is what the driver has. */
      const size_t room = limit > d->vmm.held ? limit - d->vmm.held : 0;
      xs_sbuf_put(&b, "; ");
      put_stuck(d, &dv, rounded, drv_free < room ? drv_free : room, &b);
    }
  } else if (d->strat == &xs_binned_strategy) {
    xs_sbuf_put(&b, "fragmentation: %s is free inside segments but split by live blocks; "
            "try expandable_segments:True, or max_split_size_mb / garbage_collection_threshold",
        fmt_bytes(l, 32, (int64_t)d->free_mapped));
  } else {
    oom_page_cause(d, &dv, rounded, &b);
  }
  xs_sbuf_finish(&b);
}
