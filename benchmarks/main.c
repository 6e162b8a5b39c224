/* benchmarks/main.c: xseg-bench, the command line (docs/benchmarks.md).
 *
 *   xseg-bench [OPTION...] [COMMAND [ARG...]]
 *
 * COMMAND is all (the default), micro (latency, scale, growth, threads,
 * devices),
 * latency, scale, growth, threads, frag [TRACE...], replay TRACE, or
 * timeline TRACE (memory over time, for the plots).  Every section prints a
 * table to stdout and, with --json, a record per row into one JSON object
 * keyed by section.
 *
 * Everything the command line names is checked before the first line is
 * printed: the options, the configuration (XSEG_ALLOC_CONF and --conf, by
 * the library's parser, conf.c) and every trace, which is loaded then.  So
 * a mistake costs no measurement and leaves no half-printed table, and a
 * script can tell the cases apart by the exit status: 0, 1 when a
 * measurement failed, 2 when the command line, the configuration or an
 * input is wrong.  Messages go to stderr, once each; --help to stdout.
 *
 * This file is also the replay driver: it picks the allocator that answers
 * each budget trial of the bisection (frag.c for xseg, cuda_alt.c for the
 * GPU's own allocators), so those two layers never call each other.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "host_backend.h"
#include "init.h"

#ifndef XSEG_TRACE_DIR
#define XSEG_TRACE_DIR "benchmarks/traces"
#endif

/* --quick replays the first QUICK_EVENTS events of each trace: every
 * shipped trace has freed 500 to 1,000 blocks by then, so every table and
 * code path runs, and the bisections take about 3 s instead of 28 on two
 * idle cores.  Near the limit a replay's cost is in moving pages (mmap and
 * hole punching on the host backend), which grows with the events after
 * the peak; a coarser step or a narrower range of the bisection saved far
 * less (docs/benchmarks.md, "--quick"). */
#define QUICK_EVENTS 2000

/* The bench's own sizes on the host backend: room for growth's 8 GiB. */
#define HOST_CAPACITY_MB "16384"
/* Replays timed "with room to spare": more than any shipped trace's peak. */
#define ROOMY_MB "65536"

/* The allocators the fragmentation benchmark compares. */
typedef enum alloc_kind_e { AK_XSEG_EXP, AK_XSEG_BIN, AK_CUDAMALLOC, AK_MALLOCASYNC, AK__COUNT } alloc_kind_t;
static const char *const ak_names[AK__COUNT] = {"xseg", "xseg-binned", "cudaMalloc", "cudaMallocAsync"};

#define MAX_PASSES 16

typedef struct opts_s {
  int gpu; /* run on the CUDA backend */
  int quick;
  int npasses;        /* passes: replays of each trace (0: 2) */
  unsigned scale;     /* --scale: every allocation's size times this (0: 1) */
  const char *json;
  const char *traces; /* directory of shipped traces */
  unsigned skip;      /* frag: allocators left out (bit per alloc_kind_t) */
  conf_t conf;        /* the bench's defaults and the user's layers (conf.c) */
  trace_t *loaded;    /* the traces the command replays, loaded before it runs */
  int nloaded;
} opts_t;

/* ---- messages --------------------------------------------------------------------------- */

static void usage_hint(void) {
  fputs("usage: xseg-bench [OPTION...] [COMMAND [ARG...]]  (xseg-bench --help for more)\n", stderr);
}

/* A mistake on the command line: the message, the usage line, status 2. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("xseg-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  usage_hint();
  return 2;
}

static void help(void) {
  printf("usage: xseg-bench [OPTION...] [COMMAND [ARG...]]\n"
         "\n"
         "Commands (default: all):\n"
         "  all               latency, scale, growth, threads, devices and frag\n"
         "  micro             latency, scale, growth, threads and devices\n"
         "  latency, scale, growth, threads, devices\n"
         "                    one of those sections\n"
         "  frag [TRACE...]   min-budget overhead of each trace (default: every trace in --traces)\n"
         "  replay TRACE      replay one trace through xseg and print its statistics\n"
         "  timeline TRACE    memory over time for one trace (host backend), for plot.py\n"
         "  passes [TRACE...] each trace replayed --passes times in one process, from empty then warm:\n"
         "                    time per event and driver calls of each pass (default: every trace)\n"
         "  A TRACE is a file, or a name the tables print: logrand is DIR/logrand.trace.\n"
         "\n"
         "Options (--opt VALUE or --opt=VALUE; anywhere on the line; -- ends them):\n"
         "  --backend host|cuda  where xseg runs (default: the GPU when one is present)\n"
         "  --quick              the CI size: fewer samples, and the first %d events of each trace\n"
         "  --json FILE          also write every row as JSON, one object keyed by section\n"
         "  --conf K:V,...       xseg configuration (docs/config.md); may be repeated\n"
         "  --traces DIR         where trace names are looked up (default: %s)\n"
         "  --only A,...         frag measures only these of xseg, xseg-binned, cudaMalloc, cudaMallocAsync\n"
         "  --lag K              host backend: stream work completes only every K events, as on a GPU\n"
         "                       running behind\n"
         "  --filler MB          host backend, frag: the budget is what an allocation outside xseg leaves\n"
         "                       free on a device of MB MiB, as on the GPU (81559: an H100), not\n"
         "                       host_capacity_mb; replay: with --budget, the device's size\n"
         "  --budget MB          replay: a filler leaves this many MiB free (GPU: of the device's free\n"
         "                       memory; host backend: of --filler's device)\n"
         "  --model h100         host backend: time replays as an H100 would take them: each driver\n"
         "                       call costs what it costs there (a create more on a nearly full\n"
         "                       device), and creates wait out the scrub of just-released memory as\n"
         "                       its driver does (vmm/host_backend.h)\n"
         "  --passes N           passes: replay each trace N times (2..16, default 2)\n"
         "  --scale K            frag, replay, timeline, passes: every allocation K times its size\n"
         "                       (1..4096): the same workload on a device K times larger\n"
         "  -h, --help           this text\n"
         "\n"
         "Configuration: every xseg run merges these, key by key, each over the ones before it:\n"
         "  1. the bench's defaults: backend, and host_capacity_mb:%s on the host\n"
         "  2. XSEG_ALLOC_CONF\n"
         "  3. --conf, in the order given\n"
         "  4. --backend (a backend key in 2 or 3 also picks the backend)\n"
         "  5. what a section measures: frag sets host_capacity_mb (the budget) and\n"
         "     expandable_segments (the column); timeline backend:host, host_capacity_mb and\n"
         "     expandable_segments; latency's traced column trace_file.  Such a section says\n"
         "     which of your keys it does not use.\n"
         "  An invalid XSEG_ALLOC_CONF or --conf stops the bench before it prints anything.  The line\n"
         "  below the header shows the merged configuration and where each key came from.\n"
         "\n"
         "Exit status: 0; 1 if a measurement failed; 2 if the command line, the configuration\n"
         "or an input is wrong.\n",
         QUICK_EVENTS, XSEG_TRACE_DIR, HOST_CAPACITY_MB);
}

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

/* A JSON string: the configuration may hold quotes or backslashes (paths). */
static void jstring(const char *s) {
  fputc('"', jf);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(jf, "\\%c", c);
    else if (c < 0x20) fprintf(jf, "\\u%04x", c);
    else fputc(c, jf);
  }
  fputc('"', jf);
}

/* ---- configuration of the runs ---------------------------------------------------------- */

/* The configuration of one xseg run (conf.c): `defaults` under the user's
 * keys, `forced` over them.  The caller frees it. */
static char *run_conf(const opts_t *o, const char *defaults, const char *forced) {
  char *s;
  if (conf_run_text(&o->conf, defaults, forced, &s) != 0) {
    fprintf(stderr, "xseg-bench: out of memory\n");
    exit(1);
  }
  return s;
}

/* Say which of the user's keys a section replaces with what it measures,
 * so a figure is never read as measured under a value it was not. */
static void note_forced(const opts_t *o, const char *keys) {
  while (*keys) {
    size_t n = strcspn(keys, ",");
    char key[CONF_KEY_MAX];
    snprintf(key, sizeof key, "%.*s", (int)n, keys);
    int src;
    const char *v = conf_get(&o->conf, key, &src);
    if (v && src >= CONF_ENV)
      printf("   (%s:%s from %s is not used here: this section sets %s itself)\n", key, v, conf_source_name(src), key);
    keys += n + (keys[n] == ',');
  }
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
  size_t need = conf_describe(&o->conf, NULL, 0) + 1;
  char *d = malloc(need);
  if (d) conf_describe(&o->conf, d, need);
  printf("config: %s\n", d ? d : "?");
  if (jf) {
    fprintf(jf, "\"machine\":{\"backend\":\"%s\",\"os\":\"%s %s\",\"cpus\":%ld,\"gpu\":\"%s\",\"date\":\"%s\",\"quick\":%d,"
            "\"scale\":%u,\"config\":",
            o->gpu ? "cuda" : "host", u.sysname, u.release, cpus, gpu, date, o->quick, o->scale ? o->scale : 1);
    jstring(d ? d : "");
    fputc('}', jf);
  }
  free(d);
}

/* ---- sections -------------------------------------------------------------------------- */

static int cmd_latency(const opts_t *o) {
  const size_t sizes[] = {4096, 1u << 20, 20u << 20, 1u << 30};
  latency_t r[4];
  int samples = o->quick ? 2000 : 20000;
  printf("\n== latency: cached alloc+free pair (batches of 16; median and p99 over %d batches)\n", samples);
  note_forced(o, "trace_file");
  char *c = run_conf(o, NULL, NULL);
  int rc = bench_latency(c, sizes, 4, samples, r);
  free(c);
  if (rc != 0) return 1;
  double async_ns[4] = {-1, -1, -1, -1};
  printf("%12s %12s %12s", "size", "median ns", "p99 ns");
  printf(o->gpu ? " %20s\n" : "\n", "cuMemAlloc+Free us");
  jsection("latency");
  /* The trace recorder's cost on the same pairs (trace_file: one line per
   * allocation and free, buffered). */
  latency_t tr[4];
  char path[64], forced[96];
  snprintf(path, sizeof path, "/tmp/xseg-bench-trace-%d.trace", (int)getpid());
  snprintf(forced, sizeof forced, "trace_file:%s", path);
  c = run_conf(o, NULL, forced);
  int traced = bench_latency(c, sizes, 4, samples, tr) == 0;
  free(c);
  remove(path);
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
  char *c = run_conf(o, NULL, NULL);
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    scale_t s;
    if (bench_scale(c, lives[i], o->quick ? 2000 : 10000, &s) != 0) {
      rc = 1;
      break;
    }
    if (i == 0) base = s.pair_ns;
    printf("%10zu %14.1f %16.1f   (%.2fx the 1k pair time)\n", s.live, s.pair_ns, s.churn_ns, s.pair_ns / base);
    jrec("\"live\":%zu,\"pair_ns\":%.1f,\"churn_ns\":%.1f", s.live, s.pair_ns, s.churn_ns);
  }
  free(c);
  return rc;
}

static int cmd_growth(const opts_t *o) {
  const size_t sizes[] = {2u << 20, (2u << 20) + 4096, 32u << 20, (32u << 20) + 12345, 512u << 20, 1u << 30};
  int n = 6;
  size_t total = o->gpu ? (size_t)8 << 30 : (size_t)(o->quick ? 2 : 8) << 30;
  printf("\n== growth: new memory from an empty cache (%zu GiB per size; median per allocation)\n", total >> 30);
  printf("%14s %8s %12s %10s", "size", "count", "median us", "GB/s");
  printf(o->gpu ? " %14s %10s\n" : "\n", "cuMemAlloc us", "ratio");
  jsection("growth");
  char *c = run_conf(o, NULL, NULL);
  int rc = 0;
  for (int i = 0; i < n; i++) {
    growth_t g;
    if (bench_growth(c, sizes[i], total, &g) != 0) {
      rc = 1;
      break;
    }
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
  free(c);
  return rc;
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
  char *c = run_conf(o, NULL, NULL);
  int rc = 0;
  for (int t = 1; t <= 8; t *= 2) {
    double mops;
    if (bench_threads(c, t, o->quick ? 20000 : 200000, streams, &mops) != 0) {
      rc = 1;
      break;
    }
    printf("%8d %14.2f\n", t, mops);
    jrec("\"threads\":%d,\"mops\":%.3f", t, mops);
  }
  free(c);
  return rc;
}

/* Aggregate rate with one thread per device against the same threads on
 * one device (one lock): whether devices ever wait on each other. */
static int cmd_devices(const opts_t *o) {
  char *c = run_conf(o, "host_devices:8", NULL);
  int ndev = 0;
  if (bench_init(c) == 0) {
    ndev = xseg_device_count();
    xseg_shutdown();
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("\n== devices: one thread per device, each allocating and freeing on its own device (%d device%s, %ld CPUs)\n",
         ndev, ndev == 1 ? "" : "s", ncpu);
  printf("%8s %14s %14s %10s %16s\n", "devices", "Mops/s", "per device", "scaling", "same, 1 device");
  jsection("devices");
  int rc = ndev > 0 ? 0 : 1;
  double one = 0;
  for (int n = 1; n <= ndev && n <= XS_BENCH_MAX_DEVICES && rc == 0; n *= 2) {
    double spread = 0, shared = 0;
    int ops = o->quick ? 20000 : 200000;
    if (bench_devices(c, n, 1, ops, &spread) != 0 || bench_devices(c, n, 0, ops, &shared) != 0) {
      rc = 1;
      break;
    }
    if (n == 1) one = spread;
    printf("%8d %14.2f %14.2f %9.2fx %16.2f%s\n", n, spread, spread / n, spread / one, shared,
           n > ncpu ? "   (more threads than CPUs)" : "");
    jrec("\"devices\":%d,\"mops\":%.3f,\"scaling\":%.3f,\"one_device_mops\":%.3f,\"cpus\":%ld", n, spread,
         spread / one, shared, ncpu);
  }
  free(c);
  return rc;
}

/* ---- fragmentation: which allocator answers each budget trial --------------------------- */

typedef struct trial_s {
  const opts_t *o;
  const trace_t *t;
  alloc_kind_t k;
} trial_t;

/* Does the trace replay within budget_mb?  Host backend: the budget is
 * host_capacity_mb (xseg only).  GPU: every allocator runs with all but
 * budget_mb of the device's free memory held by a filler allocation, so
 * all are measured alike. */
static int replay_fits(void *ctx, size_t mb) {
  const trial_t *tr = ctx;
  char forced[128];
  const char *mode = tr->k == AK_XSEG_BIN ? "expandable_segments:False" : "expandable_segments:True";
  if (!tr->o->gpu) {
    if (tr->k != AK_XSEG_EXP && tr->k != AK_XSEG_BIN) return 0;
    /* --filler: a device of bench_filler_mb, all but mb of it held
     * outside xseg (the filler rounded up to whole 2 MiB pages, the
     * budget down). */
    size_t cap = bench_filler_mb ? bench_filler_mb : mb;
    size_t fill = cap > mb ? (cap - mb + 1) / 2 * 2 : 0;
    snprintf(forced, sizeof forced, "host_capacity_mb:%zu,%s", cap, mode);
    char *c = run_conf(tr->o, NULL, forced);
    int ok = replay_xseg(tr->t, c, 0, fill << 20).ok;
    free(c);
    return ok;
  }
  uint64_t filler;
  if (gpu_fill(mb << 20, &filler) != 0) return 0;
  int ok;
  if (tr->k == AK_CUDAMALLOC || tr->k == AK_MALLOCASYNC) {
    ok = replay_cuda(tr->t, tr->k == AK_CUDAMALLOC ? 0 : 1).ok;
  } else {
    char *c = run_conf(tr->o, NULL, mode);
    ok = replay_xseg(tr->t, c, 0, 0).ok;
    free(c);
  }
  gpu_unfill(filler);
  return ok;
}

static int cmd_frag(const opts_t *o, trace_t *traces, int n) {
  int kinds = o->gpu ? AK__COUNT : 2;
  printf("\n== fragmentation: min-budget overhead = smallest budget that replays / peak live bytes (");
  if (o->gpu)
    printf("GPU: the rest of device memory held by a filler");
  else if (bench_filler_mb)
    printf("host backend: a device of %zu MiB, the rest held by a filler", bench_filler_mb);
  else
    printf("host backend: host_capacity_mb");
  if (!o->gpu && bench_lag > 0) printf("; stream work completes every %d events", bench_lag);
  if (o->scale > 1) printf("; every size x %u", o->scale);
  if (o->quick) printf("; quick: the first %d events of each trace", QUICK_EVENTS);
  printf(")\n");
  note_forced(o, o->gpu ? "expandable_segments" : "host_capacity_mb,expandable_segments");
  printf("%-18s %8s %9s", "trace", "events", "peak MiB");
  for (int k = 0; k < kinds; k++) printf(" %16s", ak_names[k]);
  printf(" %14s\n", "xseg ns/event");
  jsection("frag");
  for (int i = 0; i < n; i++) {
    trace_t *t = &traces[i];
    printf("%-18s %8zu %9.0f", t->name, t->nev, (double)t->peak_live / (1 << 20));
    fflush(stdout);
    double ov[AK__COUNT];
    for (int k = 0; k < kinds; k++) {
      if (o->skip >> k & 1) {
        ov[k] = -1;
        printf(" %16s", "-");
        continue;
      }
      int replays = 0;
      trial_t tr = {o, t, (alloc_kind_t)k};
      size_t mb = min_budget_mb(t->peak_live, 2, replay_fits, &tr, &replays);
      ov[k] = mb ? (double)mb * (1 << 20) / (double)t->peak_live : 0;
      printf(" %16.4f", ov[k]);
      fflush(stdout);
    }
    /* Replay time per event from an empty cache, with room to spare. */
    char *c = run_conf(o, NULL, o->gpu ? "expandable_segments:True" : "host_capacity_mb:" ROOMY_MB ",expandable_segments:True");
    replay_t r = replay_xseg(t, c, 1, 0);
    free(c);
    double ns = r.seconds * 1e9 / (double)t->nev;
    printf(" %14.0f\n", ns);
    jrec("\"trace\":\"%s\",\"events\":%zu,\"peak_live\":%llu,\"xseg\":%.4f,\"xseg_binned\":%.4f,"
         "\"cudaMalloc\":%.4f,\"cudaMallocAsync\":%.4f,\"replay_ns_per_event\":%.0f",
         t->name, t->nev, (unsigned long long)t->peak_live, ov[0], ov[1], kinds > 2 ? ov[2] : -1, kinds > 3 ? ov[3] : -1,
         ns);
  }
  return 0;
}

static int cmd_replay(const opts_t *o, const trace_t *t) {
  /* --filler and --budget: a device of the filler's size, all but the
   * budget held outside xseg (rounded as frag rounds it). */
  char forced[64] = "";
  size_t fill = 0;
  uint64_t gpu_filler = 0;
  if (bench_budget_mb && !o->gpu) { /* run() checked --filler */
    fill = (bench_filler_mb - bench_budget_mb + 1) / 2 * 2;
    snprintf(forced, sizeof forced, "host_capacity_mb:%zu", bench_filler_mb);
    note_forced(o, "host_capacity_mb");
  } else if (bench_budget_mb && gpu_fill(bench_budget_mb << 20, &gpu_filler) != 0) {
    fprintf(stderr, "xseg-bench: could not leave exactly %zu MiB of the GPU free\n", bench_budget_mb);
    return 1;
  }
  char *c = run_conf(o, o->gpu ? NULL : "host_capacity_mb:" ROOMY_MB, *forced ? forced : NULL);
  if (bench_init(c) != 0) {
    gpu_unfill(gpu_filler);
    free(c);
    return 1;
  }
  xs_backend_t *be = xs_current_backend();
  uintptr_t filler = 0;
  void **ptr = calloc(t->nslots, sizeof *ptr);
  if (!ptr || (fill && be->mem_alloc(be, 0, fill << 20, &filler) != 0)) {
    fprintf(stderr, "xseg-bench: out of memory%s\n", ptr ? " for the filler" : "");
    free(ptr);
    xseg_shutdown();
    gpu_unfill(gpu_filler);
    free(c);
    return 1;
  }
  replay_lag_begin(t, c);
  free(c);
  double t0 = bench_clock_s();
  size_t fails = replay_events(t, ptr);
  double dt = bench_clock_s() - t0;
  replay_lag_end(t);
  printf("replayed %s: %zu events in %.3f s (%.0f ns/event), %zu failed allocations, peak live %.1f MiB", t->name,
         t->nev, dt, dt * 1e9 / (double)t->nev, fails, (double)t->peak_live / (1 << 20));
  if (!o->gpu && bench_lag > 0) printf("; stream work completes every %d events", bench_lag);
  if (o->scale > 1) printf("; every size x %u", o->scale);
  if (fill) printf("; a filler leaves %zu of %zu MiB", bench_budget_mb, bench_filler_mb);
  if (gpu_filler) printf("; a filler leaves %zu MiB of the GPU", bench_budget_mb);
  if (bench_model && xs_host_is(be)) {
    xs_host_counters_t hc;
    xs_host_counters(be, 0, &hc);
    printf("; modelled H100 time, %llu creates waited for a scrub", (unsigned long long)hc.scrub_waits);
  }
  printf("\n");
  xseg_print_summary(0, stdout);
  size_t need = xseg_stats_json(0, NULL, 0);
  char *json = malloc(need + 1);
  if (json) {
    xseg_stats_json(0, json, need + 1);
    jsection("replay");
    jrec("\"trace\":\"%s\",\"stats\":%s", t->name, json);
    printf("%s\n", json);
    free(json);
  } else {
    fprintf(stderr, "xseg-bench: out of memory for the statistics\n");
    fails++;
  }
  for (size_t s = 0; s < t->nslots; s++)
    if (ptr[s]) xseg_free(ptr[s]);
  free(ptr);
  if (filler) be->mem_free(be, 0, filler, fill << 20);
  xseg_shutdown();
  gpu_unfill(gpu_filler);
  return fails ? 1 : 0;
}

/* Each trace o->npasses times in one process (from empty, then warm) with
 * room to spare: time per event and the driver work of each pass. */
static int cmd_passes(const opts_t *o, trace_t *traces, int n) {
  const int npasses = o->npasses ? o->npasses : 2;
  printf("\n== passes: each trace %d times in one process, room to spare (%s", npasses,
         o->gpu ? "GPU" : "host backend, 2 x the peak, at least 64 GiB");
  if (!o->gpu && bench_lag > 0) printf("; stream work completes every %d events", bench_lag);
  if (o->scale > 1) printf("; every size x %u", o->scale);
  printf(")\n");
  printf("%-20s %4s %8s %9s %8s %7s %7s %7s %7s %7s %6s %6s %7s %8s\n", "trace", "pass", "events", "ns/event", "driver",
         "create", "release", "map", "unmap", "access", "grows", "conv", "c.pages", "made MiB");
  int rc = 0;
  for (int i = 0; i < n; i++) {
    const trace_t *t = &traces[i];
    /* Room to spare: on the host backend twice the trace's peak, at least 64 GiB. */
    char room[64];
    size_t mb = (size_t)(t->peak_live >> 19) + 1;
    snprintf(room, sizeof room, "host_capacity_mb:%zu", mb > 65536 ? mb : (size_t)65536);
    char *c = run_conf(o, o->gpu ? NULL : room, NULL);
    pass_t p[MAX_PASSES];
    memset(p, 0, sizeof p);
    int r = replay_passes(t, c, npasses, p);
    free(c);
    if (r != 0) return 1;
    for (int k = 0; k < npasses; k++) {
      double ns = p[k].seconds * 1e9 / (double)t->nev;
      double drv = p[k].seconds > 0 ? 100.0 * (double)p[k].driver_ns / (p[k].seconds * 1e9) : 0;
      printf("%-20s %4d %8zu %9.0f %7.1f%% %7lld %7lld %7lld %7lld %7lld %6lld %6lld %7lld %8lld%s\n", k ? "" : t->name,
             k + 1, t->nev, ns, drv, p[k].create, p[k].release, p[k].map, p[k].unmap, p[k].access, p[k].grows,
             p[k].conversions, p[k].converted_pages, p[k].created_mib, p[k].failed ? "  (failures!)" : "");
      jrec("\"trace\":\"%s\",\"pass\":%d,\"events\":%zu,\"ns_per_event\":%.1f,\"driver_ns\":%lld,\"create\":%lld,"
           "\"release\":%lld,\"map\":%lld,\"unmap\":%lld,\"set_access\":%lld,\"grows\":%lld,\"conversions\":%lld,"
           "\"converted_pages\":%lld,\"failed\":%zu,\"ns_create\":%lld,\"ns_release\":%lld,\"ns_map\":%lld,"
           "\"ns_unmap\":%lld,\"ns_set_access\":%lld,\"held_peak\":%lld,\"peak_live\":%llu,\"created_mib\":%lld,"
           "\"released_mib\":%lld",
           t->name, k + 1, t->nev, ns, p[k].driver_ns, p[k].create, p[k].release, p[k].map, p[k].unmap, p[k].access,
           p[k].grows, p[k].conversions, p[k].converted_pages, p[k].failed, p[k].ns[0], p[k].ns[1], p[k].ns[2],
           p[k].ns[3], p[k].ns[4], p[k].held_peak, (unsigned long long)t->peak_live, p[k].created_mib,
           p[k].released_mib);
      rc |= p[k].failed != 0;
    }
  }
  return rc;
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

static int cmd_timeline(const opts_t *o, const trace_t *t) {
  const char *modes[2] = {"expandable_segments:True", "expandable_segments:False"};
  size_t every = t->nev / 400 ? t->nev / 400 : 1;
  printf("\n== timeline: %s, %zu events, sampled every %zu (host backend, budget 2 x peak)\n", t->name, t->nev, every);
  note_forced(o, "backend,host_capacity_mb,expandable_segments");
  printf("%6s %10s %12s %12s %12s %12s\n", "mode", "event", "live MiB", "alloc MiB", "mapped MiB", "held MiB");
  jsection("timeline");
  static char json[1 << 16];
  for (int m = 0; m < 2; m++) {
    char forced[160];
    snprintf(forced, sizeof forced, "backend:host,host_capacity_mb:%llu,%s",
             (unsigned long long)(2 * t->peak_live >> 20) + 64, modes[m]);
    char *c = run_conf(o, NULL, forced);
    int rc = bench_init(c);
    free(c);
    if (rc != 0) return 1;
    void **ptr = calloc(t->nslots, sizeof *ptr);
    uint64_t *sz = calloc(t->nslots, sizeof *sz);
    uint64_t live = 0, live_max = 0;
    for (size_t i = 0; i < t->nev; i++) {
      const ev_t *e = &t->ev[i];
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
      if (i % every == 0 || i + 1 == t->nev) {
        /* Each sample is the maximum over its interval, so short spikes
         * (a loss computed in fp32, say) show: peaks are reset after it. */
        xseg_stats_json(0, json, sizeof json);
        long long al = jnum(json, "\"allocated_bytes\":{\"all\":", "\"peak\":"),
                  mp = jnum(json, "\"mapped_bytes\":", "\"peak\":"), hd = jnum(json, "\"held_bytes\":", "\"peak\":");
        xseg_reset_peak_stats(0);
        uint64_t lv = live_max;
        live_max = live;
        jrec("\"trace\":\"%s\",\"mode\":\"%s\",\"event\":%zu,\"live\":%llu,\"allocated\":%lld,\"mapped\":%lld,\"held\":%lld",
             t->name, m ? "binned" : "expandable", i, (unsigned long long)lv, al, mp, hd);
        if (i % (every * 50) == 0)
          printf("%6s %10zu %12.0f %12.0f %12.0f %12.0f\n", m ? "binned" : "exp", i, lv / 1048576.0, al / 1048576.0,
                 mp / 1048576.0, hd / 1048576.0);
      }
    }
    for (size_t k = 0; k < t->nslots; k++)
      if (ptr[k]) xseg_free(ptr[k]);
    free(ptr);
    free(sz);
    xseg_shutdown();
  }
  return 0;
}

/* ---- inputs, checked before anything is printed ----------------------------------------- */

/* The *.trace files of dir, sorted for stable tables; -1 if dir cannot be read. */
static int list_traces(const char *dir, char ***out) {
  DIR *d = opendir(dir);
  if (!d) return -1;
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
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(v[j - 1], v[j]) > 0; j--) {
      char *x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  *out = v;
  return n;
}

/* Load the traces the arguments name (none: every trace in --traces).
 * 0, or 2 with the reason on stderr. */
static int load_traces(const opts_t *o, int quick, char **args, int nargs, trace_t **out, int *nout) {
  char **files = NULL;
  int n = nargs, listed = 0;
  if (nargs == 0) {
    n = list_traces(o->traces, &files);
    if (n < 0) {
      fprintf(stderr, "xseg-bench: cannot read the trace directory %s: %s\n", o->traces, strerror(errno));
      return 2;
    }
    if (n == 0) {
      fprintf(stderr, "xseg-bench: no *.trace files in %s (give --traces DIR or traces)\n", o->traces);
      return 2;
    }
    listed = 1;
  }
  trace_t *t = calloc((size_t)n, sizeof *t);
  int rc = 0, loaded = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    char path[4096];
    if (listed) snprintf(path, sizeof path, "%s", files[i]);
    else if (trace_find(args[i], o->traces, path, sizeof path) != 0) rc = 2;
    if (rc == 0 && trace_load(path, &t[i]) != 0) rc = 2;
    if (rc == 0) loaded++;
    if (rc == 0 && quick) trace_prefix(&t[i], QUICK_EVENTS);
    if (rc == 0 && trace_scale(&t[i], o->scale) != 0) rc = 2;
  }
  for (int i = 0; listed && i < n; i++) free(files[i]);
  free(files);
  if (rc != 0) {
    for (int i = 0; i < loaded; i++) trace_free(&t[i]);
    free(t);
    return rc;
  }
  *out = t;
  *nout = n;
  return 0;
}

/* ---- the command line ------------------------------------------------------------------- */

enum { O_BACKEND, O_QUICK, O_JSON, O_CONF, O_TRACES, O_ONLY, O_LAG, O_FILLER, O_BUDGET, O_MODEL, O_PASSES, O_SCALE, O_HELP };

static const struct {
  const char *name; /* long form */
  const char *arg;  /* what it takes, NULL: nothing */
} options[] = {
    [O_BACKEND] = {"backend", "host|cuda"}, [O_QUICK] = {"quick", NULL}, [O_JSON] = {"json", "FILE"},
    [O_CONF] = {"conf", "K:V,..."},         [O_TRACES] = {"traces", "DIR"}, [O_ONLY] = {"only", "A,..."},
    [O_LAG] = {"lag", "K"},                 [O_FILLER] = {"filler", "MB"}, [O_BUDGET] = {"budget", "MB"},
    [O_MODEL] = {"model", "h100"},          [O_PASSES] = {"passes", "N"}, [O_SCALE] = {"scale", "K"},
    [O_HELP] = {"help", NULL},
};

static const struct {
  const char *name;
  int min, max; /* arguments; max -1: any number */
} commands[] = {{"all", 0, 0},     {"micro", 0, 0}, {"latency", 0, 0}, {"scale", 0, 0},   {"growth", 0, 0},
                {"threads", 0, 0}, {"devices", 0, 0}, {"frag", 0, -1}, {"replay", 1, 1},  {"timeline", 1, 1}, {"passes", 0, -1}};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

#define MAX_CONFS 16

typedef struct cli_s {
  const char *backend;
  const char *confs[MAX_CONFS];
  int nconfs;
  char **pos; /* command and its arguments */
  int npos;
  int help;
} cli_t;

/* A size in MiB, 1..16777216 (16 TiB); 0 if val is not one. */
static size_t mib_arg(const char *val) {
  char *end;
  long long mb = strtoll(val, &end, 10);
  return !*val || *end || mb < 1 || mb > 16777216 ? 0 : (size_t)mb;
}

/* One option and its value; 0, or 2 after saying what is wrong. */
static int take_option(opts_t *o, cli_t *cl, int id, const char *val) {
  switch (id) {
  case O_BACKEND:
    if (strcmp(val, "host") && strcmp(val, "cuda")) return usage_error("--backend takes host or cuda, not '%s'", val);
    cl->backend = val;
    return 0;
  case O_QUICK: o->quick = 1; return 0;
  case O_JSON: o->json = val; return 0;
  case O_CONF:
    if (cl->nconfs == MAX_CONFS) return usage_error("more than %d --conf options", MAX_CONFS);
    cl->confs[cl->nconfs++] = val;
    return 0;
  case O_TRACES: o->traces = val; return 0;
  case O_LAG: {
    char *end;
    long k = strtol(val, &end, 10);
    if (!*val || *end || k < 1 || k > 1000000000) return usage_error("--lag takes a number of events >= 1, not '%s'", val);
    bench_lag = (int)k;
    return 0;
  }
  case O_FILLER:
    if (!(bench_filler_mb = mib_arg(val)))
      return usage_error("--filler takes a device size in MiB (1..16777216), not '%s'", val);
    return 0;
  case O_BUDGET:
    if (!(bench_budget_mb = mib_arg(val)))
      return usage_error("--budget takes the MiB a filler leaves free (1..16777216), not '%s'", val);
    return 0;
  case O_PASSES: {
    char *end;
    long k = strtol(val, &end, 10);
    if (!*val || *end || k < 2 || k > MAX_PASSES) return usage_error("--passes takes 2..%d, not '%s'", MAX_PASSES, val);
    o->npasses = (int)k;
    return 0;
  }
  case O_SCALE: {
    char *end;
    long k = strtol(val, &end, 10);
    if (!*val || *end || k < 1 || k > 4096) return usage_error("--scale takes a factor of 1..4096, not '%s'", val);
    o->scale = (unsigned)k;
    return 0;
  }
  case O_MODEL:
    if (strcmp(val, "h100")) return usage_error("--model takes h100 (the only GPU modelled), not '%s'", val);
    bench_model = 1;
    return 0;
  case O_ONLY: {
    /* A comma-separated list of allocator names. */
    const char *l = val;
    o->skip = (1u << AK__COUNT) - 1;
    while (*l) {
      size_t n = strcspn(l, ",");
      int k = 0;
      while (k < AK__COUNT && (strlen(ak_names[k]) != n || strncmp(l, ak_names[k], n))) k++;
      if (k == AK__COUNT)
        return usage_error("--only: unknown allocator '%.*s' (xseg, xseg-binned, cudaMalloc, cudaMallocAsync)", (int)n, l);
      o->skip &= ~(1u << k);
      l += n + (l[n] == ',');
    }
    return 0;
  }
  case O_HELP: cl->help = 1; return 0;
  }
  return 2;
}

/* Options may come anywhere; what is left is the command and its
 * arguments, in order.  0, or 2 after saying what is wrong. */
static int parse_args(int argc, char **argv, opts_t *o, cli_t *cl) {
  cl->pos = calloc((size_t)argc, sizeof *cl->pos);
  int only_args = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_args || a[0] != '-' || !a[1]) {
      cl->pos[cl->npos++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      only_args = 1;
      continue;
    }
    if (!strcmp(a, "-h")) {
      cl->help = 1;
      continue;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    int id = -1;
    for (int k = 0; a[1] == '-' && k < (int)(sizeof options / sizeof options[0]); k++)
      if (strlen(options[k].name) == len - 2 && !strncmp(a + 2, options[k].name, len - 2)) id = k;
    if (id < 0) return usage_error("unknown option '%.*s'", (int)len, a);
    const char *val = NULL;
    if (options[id].arg) {
      if (eq) val = eq + 1;
      else if (i + 1 < argc) val = argv[++i];
      else return usage_error("option '--%s' needs an argument (%s)", options[id].name, options[id].arg);
    } else if (eq) {
      return usage_error("option '--%s' takes no argument", options[id].name);
    }
    int rc = take_option(o, cl, id, val);
    if (rc) return rc;
  }
  return 0;
}

/* The configuration layers (conf.c), checked; and the backend they pick.
 * 0, 1 (no GPU for backend:cuda) or 2 (invalid configuration). */
static int build_conf(opts_t *o, const cli_t *cl) {
  const char *env = getenv("XSEG_ALLOC_CONF");
  if (env && conf_check(env, "XSEG_ALLOC_CONF") != 0) return 2;
  for (int i = 0; i < cl->nconfs; i++)
    if (conf_check(cl->confs[i], "--conf") != 0) return 2;
  int rc = conf_add(&o->conf, env, CONF_ENV);
  for (int i = 0; i < cl->nconfs && rc == 0; i++) rc = conf_add(&o->conf, cl->confs[i], CONF_OPTION);
  if (rc == 0 && cl->backend) {
    char pair[32];
    snprintf(pair, sizeof pair, "backend:%s", cl->backend);
    rc = conf_add(&o->conf, pair, CONF_BACKEND);
  }
  if (rc != 0) {
    fprintf(stderr, "xseg-bench: the configuration has too many or too long keys\n");
    return 2;
  }
  int src;
  const char *be = conf_get(&o->conf, "backend", &src);
  if (be) {
    o->gpu = !strcasecmp(be, "cuda");
    /* Written as the bench compares it (the parser takes any case). */
    conf_set(&o->conf, "backend", 7, o->gpu ? "cuda" : "host", 4, src);
    be = o->gpu ? "cuda" : "host";
    if (o->gpu && gpu_open() != 0) {
      fprintf(stderr, "xseg-bench: backend:%s (from %s) needs a usable GPU, and there is none (--backend host runs on the host)\n", be,
              conf_source_name(src));
      return 1;
    }
  } else {
    o->gpu = gpu_open() == 0; /* default: the GPU when one is there */
    conf_add(&o->conf, o->gpu ? "backend:cuda" : "backend:host", CONF_BENCH);
  }
  if (!o->gpu) conf_add(&o->conf, "host_capacity_mb:" HOST_CAPACITY_MB, CONF_BENCH);
  return 0;
}

/* Check everything the command line names, then run the command; the
 * exit status.  What it allocates, main frees. */
static int run(opts_t *o, cli_t *cl) {
  if (cl->help) {
    help();
    return 0;
  }
  const char *cmd = cl->npos ? cl->pos[0] : "all";
  char **args = cl->pos + (cl->npos ? 1 : 0);
  int nargs = cl->npos ? cl->npos - 1 : 0;
  int c = 0;
  while (c < NCOMMANDS && strcmp(cmd, commands[c].name)) c++;
  if (c == NCOMMANDS)
    return usage_error("unknown command '%s' (all, micro, latency, scale, growth, threads, devices, frag, replay, "
                       "timeline, passes)", cmd);
  if (nargs < commands[c].min) return usage_error("%s needs a TRACE (a file, or a name in %s)", cmd, o->traces);
  if (commands[c].max >= 0 && nargs > commands[c].max)
    return usage_error("%s takes %s, not '%s'", cmd, commands[c].max ? "one TRACE" : "no arguments",
                       args[commands[c].max]);

  int rc = build_conf(o, cl);
  if (rc) return rc;
  if (bench_budget_mb && strcmp(cmd, "replay"))
    return usage_error("--budget is for replay (frag bisects the budget itself), not %s", cmd);
  if (bench_budget_mb && !o->gpu && bench_filler_mb < bench_budget_mb)
    return usage_error("replay --budget %zu on the host backend needs a --filler device of at least that many MiB",
                       bench_budget_mb);
  if (bench_model && o->gpu) return usage_error("--model times the host backend as a GPU; on the GPU, leave it out");

  int all = !strcmp(cmd, "all"), micro = all || !strcmp(cmd, "micro");
  int frag = all || !strcmp(cmd, "frag"), one = !strcmp(cmd, "replay") || !strcmp(cmd, "timeline");
  int passes = !strcmp(cmd, "passes");
  if (frag || one || passes) {
    /* replay and timeline take the whole trace, also with --quick */
    rc = load_traces(o, o->quick && frag, args, nargs, &o->loaded, &o->nloaded);
    if (rc) return rc;
  }
  if (o->json) {
    jf = fopen(o->json, "w");
    if (!jf) {
      fprintf(stderr, "xseg-bench: --json: cannot write %s: %s\n", o->json, strerror(errno));
      return 2;
    }
    fputs("{", jf);
  }

  header(o);
  if (micro || !strcmp(cmd, "latency")) rc |= cmd_latency(o);
  if (micro || !strcmp(cmd, "scale")) rc |= cmd_scale(o);
  if (micro || !strcmp(cmd, "growth")) rc |= cmd_growth(o);
  if (micro || !strcmp(cmd, "threads")) rc |= cmd_threads(o);
  if (micro || !strcmp(cmd, "devices")) rc |= cmd_devices(o);
  if (frag) rc |= cmd_frag(o, o->loaded, o->nloaded);
  if (!strcmp(cmd, "replay")) rc |= cmd_replay(o, &o->loaded[0]);
  if (!strcmp(cmd, "timeline")) rc |= cmd_timeline(o, &o->loaded[0]);
  if (passes) {
    jsection("passes");
    rc |= cmd_passes(o, o->loaded, o->nloaded);
  }
  if (jf) {
    fputs(jsec_open ? "]}\n" : "}\n", jf);
    fclose(jf);
  }
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* tables appear as they are measured, also in pipes */
  static opts_t o;
  o.traces = XSEG_TRACE_DIR;
  cli_t cl = {0};
  int rc = parse_args(argc, argv, &o, &cl);
  if (rc == 0) rc = run(&o, &cl);
  for (int i = 0; i < o.nloaded; i++) trace_free(&o.loaded[i]);
  free(o.loaded);
  conf_free(&o.conf);
  free(cl.pos);
  return rc;
}
