/* benchmarks/main.c: xseg-bench, the command line (docs/benchmarks.md).
 *
 *   xseg-bench [--backend host|cuda] [--quick] [--json FILE] [--conf K:V,...]
 *              [--traces DIR] [COMMAND [ARGS]]
 *
 * COMMAND is all (the default), micro (latency, scale, growth, threads),
 * latency, scale, growth, threads, frag [TRACE...], replay TRACE, or
 * timeline TRACE (memory over time, for the plots).  Every section prints a table to stdout and,
 * with --json, a record per row into one JSON object keyed by section.
 *
 * This file is also the replay driver: it picks the allocator that answers
 * each budget trial of the bisection (frag.c for xseg, cuda_alt.c for the
 * GPU's own allocators), so those two layers never call each other.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#ifndef XSEG_TRACE_DIR
#define XSEG_TRACE_DIR "benchmarks/traces"
#endif

typedef struct opts_s {
  int gpu;            /* run on the CUDA backend */
  int quick;
  const char *json;
  const char *extra;  /* more configuration for every xseg run */
  const char *traces; /* directory of shipped traces */
  unsigned skip;      /* frag: allocators left out (bit per alloc_kind_t) */
} opts_t;

/* ---- JSON, written as the sections run ----------------------------------------------- */

static FILE *jf;
static int jsec_open, jrec_first = 1;

/* Sections follow the "machine" object: close the open one, open the next. */
static void jsection(const char *name) {
  if (!jf) return;
  fprintf(jf, "%s,\n\"%s\":[", jsec_open ? "]" : "", name);
  jsec_open = 1;
  jrec_first = 1;
}

static void jrec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void jrec(const char *fmt, ...) {
  if (!jf) return;
  va_list ap;
  va_start(ap, fmt);
  fputs(jrec_first ? "\n {" : ",\n {", jf);
  vfprintf(jf, fmt, ap);
  fputc('}', jf);
  va_end(ap);
  jrec_first = 0;
  fflush(jf); /* a run cut short keeps what it measured */
}

static char conf_buf[1024];

/* The configuration for an xseg run: backend, then the user's extras. */
static const char *conf(const opts_t *o, const char *more) {
  snprintf(conf_buf, sizeof conf_buf, "%s%s%s%s%s", o->gpu ? "backend:cuda" : "backend:host,host_capacity_mb:16384",
           more && *more ? "," : "", more ? more : "", o->extra ? "," : "", o->extra ? o->extra : "");
  return conf_buf;
}

static void header(const opts_t *o) {
  struct utsname u;
  uname(&u);
  char gpu[256] = "none";
  if (o->gpu) gpu_describe(gpu, sizeof gpu);
  time_t now = time(NULL);
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  printf("xseg-bench %s | %s backend | %s %s, %ld CPUs | GPU: %s | %s%s\n", xseg_version(), o->gpu ? "cuda" : "host",
         u.sysname, u.machine, cpus, gpu, date, o->quick ? " | quick" : "");
  if (jf)
    fprintf(jf, "\"machine\":{\"backend\":\"%s\",\"os\":\"%s %s\",\"cpus\":%ld,\"gpu\":\"%s\",\"date\":\"%s\",\"quick\":%d}",
            o->gpu ? "cuda" : "host", u.sysname, u.release, cpus, gpu, date, o->quick);
}

/* ---- sections -------------------------------------------------------------------------- */

static int cmd_latency(const opts_t *o) {
  const size_t sizes[] = {4096, 1u << 20, 20u << 20, 1u << 30};
  latency_t r[4];
  int samples = o->quick ? 2000 : 20000;
  printf("\n== latency: cached alloc+free pair (batches of 16; median and p99 over %d batches)\n", samples);
  if (bench_latency(conf(o, NULL), sizes, 4, samples, r) != 0) return 1;
  double async_ns[4] = {-1, -1, -1, -1};
  printf("%12s %12s %12s", "size", "median ns", "p99 ns");
  printf(o->gpu ? " %20s\n" : "\n", "cuMemAlloc+Free us");
  jsection("latency");
  /* The trace recorder's cost on the same pairs (trace_file: one line per
   * allocation and free, buffered). */
  latency_t tr[4];
  char tconf[1024];
  snprintf(tconf, sizeof tconf, "%s,trace_file:/tmp/xseg-bench-trace-%d.trace", conf(o, NULL), (int)getpid());
  int traced = bench_latency(tconf, sizes, 4, samples, tr) == 0;
  snprintf(tconf, sizeof tconf, "/tmp/xseg-bench-trace-%d.trace", (int)getpid());
  remove(tconf);
  for (int i = 0; i < 4; i++) {
    printf("%12zu %12.1f %12.1f", r[i].size, r[i].median_ns, r[i].p99_ns);
    if (traced) printf("   (traced: %.1f)", tr[i].median_ns);
    if (o->gpu) {
      double fr = 0, al = gpu_time_malloc_free(sizes[i], o->quick ? 8 : 32, &fr);
      async_ns[i] = (al + fr) * 1e9;
      printf(" %20.1f", (al + fr) * 1e6);
    }
    printf("\n");
    jrec("\"size\":%zu,\"median_ns\":%.1f,\"p99_ns\":%.1f,\"traced_median_ns\":%.1f,\"cumemalloc_pair_ns\":%.1f",
         r[i].size, r[i].median_ns, r[i].p99_ns, traced ? tr[i].median_ns : -1.0, async_ns[i]);
  }
  return 0;
}

static int cmd_scale(const opts_t *o) {
  size_t lives[] = {1000, 10000, 100000, 1000000};
  int n = o->quick ? 3 : 4;
  printf("\n== scale: operation time with N live blocks (sizes 512 B..8.5 KiB; median ns)\n");
  printf("%10s %14s %16s\n", "live", "alloc+free", "free+alloc rand");
  jsection("scale");
  double base = 0;
  for (int i = 0; i < n; i++) {
    scale_t s;
    if (bench_scale(conf(o, NULL), lives[i], o->quick ? 2000 : 10000, &s) != 0) return 1;
    if (i == 0) base = s.pair_ns;
    printf("%10zu %14.1f %16.1f   (%.2fx the 1k pair time)\n", s.live, s.pair_ns, s.churn_ns, s.pair_ns / base);
    jrec("\"live\":%zu,\"pair_ns\":%.1f,\"churn_ns\":%.1f", s.live, s.pair_ns, s.churn_ns);
  }
  return 0;
}

static int cmd_growth(const opts_t *o) {
  const size_t sizes[] = {2u << 20, (2u << 20) + 4096, 32u << 20, (32u << 20) + 12345, 512u << 20, 1u << 30};
  int n = 6;
  size_t total = o->gpu ? (size_t)8 << 30 : (size_t)(o->quick ? 2 : 8) << 30;
  printf("\n== growth: new memory from an empty cache (%zu GiB per size; median per allocation)\n", total >> 30);
  printf("%14s %8s %12s %10s", "size", "count", "median us", "GB/s");
  printf(o->gpu ? " %14s %10s\n" : "\n", "cuMemAlloc us", "ratio");
  jsection("growth");
  for (int i = 0; i < n; i++) {
    growth_t g;
    if (bench_growth(conf(o, NULL), sizes[i], total, &g) != 0) return 1;
    printf("%14zu %8d %12.1f %10.2f", g.size, g.count, g.median_us, g.gbps);
    double cu = -1;
    if (o->gpu) {
      cu = gpu_time_malloc_free(sizes[i], 8, NULL) * 1e6;
      printf(" %14.1f %10.2f", cu, g.median_us / cu);
    }
    printf("\n");
    jrec("\"size\":%zu,\"count\":%d,\"median_us\":%.2f,\"gbps\":%.3f,\"cumemalloc_us\":%.2f", g.size, g.count,
         g.median_us, g.gbps, cu);
  }
  return 0;
}

static int cmd_threads(const opts_t *o) {
  printf("\n== threads: alloc+free throughput, each thread on its own stream, a quarter freed by another thread\n");
  printf("%8s %14s\n", "threads", "Mops/s");
  jsection("threads");
  void *streams[8];
  for (int i = 0; i < 8; i++) {
    /* Real streams on the GPU: the driver cannot record events on made-up ones. */
    streams[i] = o->gpu ? gpu_new_stream() : (void *)(uintptr_t)(0x1000 + i);
    if (!streams[i]) return 1;
  }
  for (int t = 1; t <= 8; t *= 2) {
    double mops;
    if (bench_threads(conf(o, NULL), t, o->quick ? 20000 : 200000, streams, &mops) != 0) return 1;
    printf("%8d %14.2f\n", t, mops);
    jrec("\"threads\":%d,\"mops\":%.3f", t, mops);
  }
  return 0;
}

/* ---- fragmentation: which allocator answers each budget trial --------------------------- */

/* The allocators the fragmentation benchmark compares. */
typedef enum alloc_kind_e { AK_XSEG_EXP, AK_XSEG_BIN, AK_CUDAMALLOC, AK_MALLOCASYNC, AK__COUNT } alloc_kind_t;
static const char *const ak_names[AK__COUNT] = {"xseg", "xseg-binned", "cudaMalloc", "cudaMallocAsync"};

typedef struct trial_s {
  const trace_t *t;
  alloc_kind_t k;
  int gpu;
  const char *extra;
} trial_t;

/* Does the trace replay within budget_mb?  Host backend: the budget is
 * host_capacity_mb (xseg only).  GPU: every allocator runs with all but
 * budget_mb of the device's free memory held by a filler allocation, so
 * all are measured alike. */
static int replay_fits(void *ctx, size_t mb) {
  const trial_t *tr = ctx;
  char c[1024];
  const char *mode = tr->k == AK_XSEG_BIN ? "expandable_segments:False" : "expandable_segments:True";
  const char *extra = tr->extra, *sep = extra && *extra ? "," : "";
  if (!tr->gpu) {
    if (tr->k != AK_XSEG_EXP && tr->k != AK_XSEG_BIN) return 0;
    snprintf(c, sizeof c, "backend:host,host_capacity_mb:%zu,%s%s%s", mb, mode, sep, extra ? extra : "");
    return replay_xseg(tr->t, c, 0).ok;
  }
  uint64_t filler;
  if (gpu_fill(mb << 20, &filler) != 0) return 0;
  int ok;
  if (tr->k == AK_CUDAMALLOC || tr->k == AK_MALLOCASYNC) {
    ok = replay_cuda(tr->t, tr->k == AK_CUDAMALLOC ? 0 : 1).ok;
  } else {
    snprintf(c, sizeof c, "backend:cuda,%s%s%s", mode, sep, extra ? extra : "");
    ok = replay_xseg(tr->t, c, 0).ok;
  }
  gpu_unfill(filler);
  return ok;
}

static int list_traces(const char *dir, char ***out) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  char **v = NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 7 || strcmp(e->d_name + l - 6, ".trace")) continue;
    v = realloc(v, (size_t)(n + 1) * sizeof *v);
    v[n] = malloc(strlen(dir) + l + 2);
    sprintf(v[n], "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  for (int i = 1; i < n; i++) /* sorted, for stable tables */
    for (int j = i; j > 0 && strcmp(v[j - 1], v[j]) > 0; j--) {
      char *x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  *out = v;
  return n;
}

static int cmd_frag(const opts_t *o, int argc, char **argv) {
  char **files = argv;
  int n = argc;
  if (n == 0) n = list_traces(o->traces, &files);
  if (n == 0) {
    fprintf(stderr, "xseg-bench: no traces in %s (give --traces DIR or files)\n", o->traces);
    return 1;
  }
  int kinds = o->gpu ? AK__COUNT : 2;
  printf("\n== fragmentation: min-budget overhead = smallest budget that replays / peak live bytes (%s",
         o->gpu ? "GPU: the rest of device memory held by a filler" : "host backend: host_capacity_mb");
  if (!o->gpu && bench_lag > 0) printf("; stream work completes every %d events", bench_lag);
  printf(")\n");
  printf("%-18s %8s %9s", "trace", "events", "peak MiB");
  for (int k = 0; k < kinds; k++) printf(" %16s", ak_names[k]);
  printf(" %14s\n", "xseg ns/event");
  jsection("frag");
  for (int i = 0; i < n; i++) {
    trace_t t;
    if (trace_load(files[i], &t) != 0) return 1;
    printf("%-18s %8zu %9.0f", t.name, t.nev, (double)t.peak_live / (1 << 20));
    fflush(stdout);
    double ov[AK__COUNT];
    for (int k = 0; k < kinds; k++) {
      if (o->skip >> k & 1) {
        ov[k] = -1;
        printf(" %16s", "-");
        continue;
      }
      int replays = 0;
      trial_t tr = {&t, (alloc_kind_t)k, o->gpu, o->extra};
      size_t mb = min_budget_mb(t.peak_live, 2, replay_fits, &tr, &replays);
      ov[k] = mb ? (double)mb * (1 << 20) / (double)t.peak_live : 0;
      printf(" %16.4f", ov[k]);
      fflush(stdout);
    }
    /* Replay time per event from an empty cache, with room to spare. */
    char c[1024];
    snprintf(c, sizeof c, "%s", conf(o, o->gpu ? NULL : "host_capacity_mb:65536"));
    replay_t r = replay_xseg(&t, c, 1);
    double ns = r.seconds * 1e9 / (double)t.nev;
    printf(" %14.0f\n", ns);
    jrec("\"trace\":\"%s\",\"events\":%zu,\"peak_live\":%llu,\"xseg\":%.4f,\"xseg_binned\":%.4f,"
         "\"cudaMalloc\":%.4f,\"cudaMallocAsync\":%.4f,\"replay_ns_per_event\":%.0f",
         t.name, t.nev, (unsigned long long)t.peak_live, ov[0], ov[1], kinds > 2 ? ov[2] : -1, kinds > 3 ? ov[3] : -1, ns);
    trace_free(&t);
  }
  return 0;
}

static int cmd_replay(const opts_t *o, int argc, char **argv) {
  if (argc < 1) {
    fprintf(stderr, "xseg-bench replay TRACE\n");
    return 2;
  }
  trace_t t;
  if (trace_load(argv[0], &t) != 0) return 1;
  if (xseg_init(conf(o, o->gpu ? NULL : "host_capacity_mb:65536")) != 0) {
    fprintf(stderr, "%s\n", xseg_last_error());
    return 1;
  }
  void **ptr = calloc(t.nslots, sizeof *ptr);
  size_t fails = 0;
  double t0 = now_s();
  for (size_t i = 0; i < t.nev; i++) {
    const ev_t *e = &t.ev[i];
    if (e->alloc) {
      ptr[e->slot] = xseg_malloc(e->bytes, 0, (xseg_stream_t)(uintptr_t)e->stream);
      fails += !ptr[e->slot];
    } else if (ptr[e->slot]) {
      xseg_free(ptr[e->slot]);
      ptr[e->slot] = NULL;
    }
  }
  double dt = now_s() - t0;
  printf("replayed %s: %zu events in %.3f s (%.0f ns/event), %zu failed allocations, peak live %.1f MiB\n", t.name,
         t.nev, dt, dt * 1e9 / (double)t.nev, fails, (double)t.peak_live / (1 << 20));
  xseg_print_summary(0, stdout);
  size_t need = xseg_stats_json(0, NULL, 0);
  char *json = malloc(need + 1);
  xseg_stats_json(0, json, need + 1);
  jsection("replay");
  jrec("\"trace\":\"%s\",\"stats\":%s", t.name, json);
  printf("%s\n", json);
  free(json);
  for (size_t s = 0; s < t.nslots; s++)
    if (ptr[s]) xseg_free(ptr[s]);
  free(ptr);
  xseg_shutdown();
  trace_free(&t);
  return fails ? 1 : 0;
}

/* Memory over time for one trace, for both xseg modes on the host backend:
 * live (requested) bytes from the trace, and xseg's allocated, mapped and
 * held bytes, in about 400 samples, each the maximum over its interval.  The budget is generous (twice the
 * peak), as in normal use. */
static long long jnum(const char *json, const char *key, const char *field) {
  const char *p = strstr(json, key);
  if (!p) return -1;
  if (field) {
    p = strstr(p, field);
    if (!p) return -1;
    p += strlen(field);
  } else {
    p += strlen(key);
  }
  return strtoll(p, NULL, 10);
}

static int cmd_timeline(const opts_t *o, int argc, char **argv) {
  if (argc < 1) {
    fprintf(stderr, "xseg-bench timeline TRACE\n");
    return 2;
  }
  trace_t t;
  if (trace_load(argv[0], &t) != 0) return 1;
  const char *modes[2] = {"expandable_segments:True", "expandable_segments:False"};
  size_t every = t.nev / 400 ? t.nev / 400 : 1;
  printf("\n== timeline: %s, %zu events, sampled every %zu (host backend, budget 2 x peak)\n", t.name, t.nev, every);
  printf("%6s %10s %12s %12s %12s %12s\n", "mode", "event", "live MiB", "alloc MiB", "mapped MiB", "held MiB");
  jsection("timeline");
  static char json[1 << 16];
  for (int m = 0; m < 2; m++) {
    char c[512];
    snprintf(c, sizeof c, "backend:host,host_capacity_mb:%llu,%s%s%s",
             (unsigned long long)(2 * t.peak_live >> 20) + 64, modes[m], o->extra ? "," : "", o->extra ? o->extra : "");
    if (xseg_init(c) != 0) {
      fprintf(stderr, "%s\n", xseg_last_error());
      return 1;
    }
    void **ptr = calloc(t.nslots, sizeof *ptr);
    uint64_t *sz = calloc(t.nslots, sizeof *sz);
    uint64_t live = 0, live_max = 0;
    for (size_t i = 0; i < t.nev; i++) {
      const ev_t *e = &t.ev[i];
      if (e->alloc) {
        ptr[e->slot] = xseg_malloc(e->bytes, 0, (xseg_stream_t)(uintptr_t)e->stream);
        sz[e->slot] = e->bytes;
        if (ptr[e->slot]) live += e->bytes;
        if (live > live_max) live_max = live;
      } else if (ptr[e->slot]) {
        xseg_free(ptr[e->slot]);
        ptr[e->slot] = NULL;
        live -= sz[e->slot];
      }
      if (i % every == 0 || i + 1 == t.nev) {
        /* Each sample is the maximum over its interval, so short spikes
         * (a loss computed in fp32, say) show: peaks are reset after it. */
        xseg_stats_json(0, json, sizeof json);
        long long al = jnum(json, "\"allocated_bytes\":{\"all\":", "\"peak\":"),
                  mp = jnum(json, "\"mapped_bytes\":", "\"peak\":"), hd = jnum(json, "\"held_bytes\":", "\"peak\":");
        xseg_reset_peak_stats(0);
        uint64_t lv = live_max;
        live_max = live;
        jrec("\"trace\":\"%s\",\"mode\":\"%s\",\"event\":%zu,\"live\":%llu,\"allocated\":%lld,\"mapped\":%lld,\"held\":%lld",
             t.name, m ? "binned" : "expandable", i, (unsigned long long)lv, al, mp, hd);
        if (i % (every * 50) == 0)
          printf("%6s %10zu %12.0f %12.0f %12.0f %12.0f\n", m ? "binned" : "exp", i, lv / 1048576.0, al / 1048576.0,
                 mp / 1048576.0, hd / 1048576.0);
      }
    }
    for (size_t k = 0; k < t.nslots; k++)
      if (ptr[k]) xseg_free(ptr[k]);
    free(ptr);
    free(sz);
    xseg_shutdown();
  }
  trace_free(&t);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: xseg-bench [--backend host|cuda] [--quick] [--json FILE] [--conf K:V,...] [--traces DIR] [--only A,...]\n"
          "                  [--lag K]\n"
          "                  [all | micro | latency | scale | growth | threads | frag [TRACE...] | replay TRACE |\n"
          "                   timeline TRACE]\n"
          "  all (default): every section; micro: latency, scale, growth and threads\n"
          "  --only: frag measures only these of xseg, xseg-binned, cudaMalloc, cudaMallocAsync\n"
          "  --lag K: host backend: stream work completes only every K events, like a GPU running behind\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* tables appear as they are measured, also in pipes */
  opts_t o = {-1, 0, NULL, NULL, XSEG_TRACE_DIR, 0};
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
      i++;
      if (strcmp(argv[i], "host") && strcmp(argv[i], "cuda")) {
        usage();
        return 2;
      }
      o.gpu = !strcmp(argv[i], "cuda");
    } else if (!strcmp(argv[i], "--quick")) {
      o.quick = 1;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
      o.json = argv[++i];
    } else if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
      o.extra = argv[++i];
    } else if (!strcmp(argv[i], "--lag") && i + 1 < argc) {
      bench_lag = atoi(argv[++i]);
      if (bench_lag < 1) {
        fprintf(stderr, "xseg-bench: --lag takes a number of events >= 1\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--traces") && i + 1 < argc) {
      o.traces = argv[++i];
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      /* A comma-separated list of allocator names. */
      const char *l = argv[++i];
      o.skip = (1u << AK__COUNT) - 1;
      while (*l) {
        size_t n = strcspn(l, ",");
        int k = 0;
        while (k < AK__COUNT && (strlen(ak_names[k]) != n || strncmp(l, ak_names[k], n))) k++;
        if (k == AK__COUNT) {
          fprintf(stderr, "xseg-bench: --only: unknown allocator '%.*s'\n", (int)n, l);
          return 2;
        }
        o.skip &= ~(1u << k);
        l += n + (l[n] == ',');
      }
    } else {
      usage();
      return 2;
    }
  }
  const char *cmd = i < argc ? argv[i++] : "all";
  if (o.gpu < 0) {
    o.gpu = gpu_open() == 0; /* default: the GPU when one is there */
  }
  if (o.gpu && gpu_open() != 0) {
    fprintf(stderr, "xseg-bench: no usable GPU for --backend cuda\n");
    return 1;
  }
  if (o.json) {
    jf = fopen(o.json, "w");
    if (!jf) {
      fprintf(stderr, "xseg-bench: cannot write %s\n", o.json);
      return 1;
    }
    fputs("{", jf);
  }
  header(&o);
  int rc = 0, all = !strcmp(cmd, "all"), micro = all || !strcmp(cmd, "micro");
  int known = micro || !strcmp(cmd, "frag") || !strcmp(cmd, "replay") || !strcmp(cmd, "timeline");
  if (micro || !strcmp(cmd, "latency")) rc |= cmd_latency(&o), known = 1;
  if (micro || !strcmp(cmd, "scale")) rc |= cmd_scale(&o), known = 1;
  if (micro || !strcmp(cmd, "growth")) rc |= cmd_growth(&o), known = 1;
  if (micro || !strcmp(cmd, "threads")) rc |= cmd_threads(&o), known = 1;
  if (all || !strcmp(cmd, "frag")) rc |= cmd_frag(&o, all ? 0 : argc - i, argv + i);
  if (!strcmp(cmd, "replay")) rc |= cmd_replay(&o, argc - i, argv + i);
  if (!strcmp(cmd, "timeline")) rc |= cmd_timeline(&o, argc - i, argv + i);
  if (!known) {
    usage();
    rc = 2;
  }
  if (jf) {
    fputs(jsec_open ? "]}\n" : "}\n", jf);
    fclose(jf);
  }
  return rc;
}
