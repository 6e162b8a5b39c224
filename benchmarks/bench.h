/* benchmarks/bench.h: what the parts of xseg-bench share. */
#ifndef XSEG_BENCH_H
#define XSEG_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xseg.h"

/* ---- traces (trace.c) ---------------------------------------------------- */

typedef struct ev_s {
  uint32_t slot;   /* dense index of the allocation id */
  uint8_t alloc;   /* 1 alloc, 0 free */
  uint8_t stream;  /* 0 = default stream */
  uint64_t bytes;  /* alloc only */
} ev_t;

typedef struct trace_s {
  char name[128];
  ev_t *ev;
  size_t nev;
  size_t nslots;       /* distinct ids */
  uint64_t peak_live;  /* max over time of the requested bytes live */
  uint64_t allocs, frees;
  int nstreams;        /* highest stream number + 1 */
} trace_t;

/* The file a command-line argument names: the path as given, or for a bare
 * name the trace of that name in dir (NAME.trace).  0 with the path in out,
 * or -1 with a message on stderr naming arg and the OS's reason. */
int trace_find(const char *arg, const char *dir, char *out, size_t len);
/* Load a trace; 0 or -1 with a message on stderr. */
int trace_load(const char *path, trace_t *t);
/* Keep only the first nev events (the peak and counts are recomputed); the
 * replays free what is still live at the end. */
void trace_prefix(trace_t *t, size_t nev);
/* Multiply every allocation's size, and the peak, by k (--scale): the same
 * workload on a device k times the size, so that the rules that depend on
 * the room (growth chunks and early pins of any size, from 64 GiB) meet it
 * at its min budget, which no shipped trace's reaches.  0, or -1 with a
 * message on stderr naming the trace if the peak would pass
 * TRACE_MAX_BYTES, 4 TiB, so that the budgets the commands try (up to
 * twice the peak) stay within host_capacity_mb's range (the trace is left
 * as it was). */
#define TRACE_MAX_BYTES ((uint64_t)1 << 42)
int trace_scale(trace_t *t, unsigned k);
void trace_free(trace_t *t);

/* What a replay reports, whichever allocator ran it (frag.c, cuda_alt.c). */
typedef struct replay_s {
  int ok;             /* 1: every allocation succeeded */
  size_t failed_at;   /* event index of the first failure */
  double seconds;     /* wall time of the replay */
  uint64_t held_peak; /* xseg's held_bytes.peak (xseg replays only) */
} replay_t;

/* ---- passes (passes.c) ----------------------------------------------------------------- */

/* One pass of a trace: its wall time and the driver work within it. */
typedef struct pass_s {
  double seconds;
  size_t failed;                  /* allocations that failed */
  long long create, release, map, unmap, access, conversions, grows, converted_pages;
  long long created_mib, released_mib; /* bytes of the handles created and released, in MiB */
  long long driver_ns;            /* time in create, release, map, unmap, set access */
  long long ns[5];                /* that time by kind: create, release, map, unmap, set access */
  long long held_peak;            /* held_bytes.peak at the end of the pass */
} pass_t;

/* Replay t npasses times in one process under conf (each pass frees what
 * is left live at its end); out[k] is pass k.  0, or -1 if the library did
 * not start. */
int replay_passes(const trace_t *t, const char *conf, int npasses, pass_t *out);
/* Every event of t through xseg on device 0; ptr has t->nslots entries
 * (NULL where nothing is live).  Returns the allocations that failed. */
size_t replay_events(const trace_t *t, void **ptr);

/* ---- xseg replay and budgets (frag.c) -------------------------------------------------- */

/* --lag K (host backend): stream work completes only every K events. */
extern int bench_lag;
/* Under --lag on the host backend: how 0 holds every stream of t (events
 * recorded on it stay pending), 1 completes their work, 2 lets them go. */
void bench_lag_streams(const trace_t *t, int how);
/* Around a replay of t, after bench_init(conf): under --lag on the host
 * backend, begin holds t's streams (returns 1), tick before event i
 * completes their work every bench_lag events, end lets them go.
 * Elsewhere all three do nothing (begin returns 0). */
int replay_lag_begin(const trace_t *t, const char *conf);
void replay_lag_tick(const trace_t *t, size_t i);
void replay_lag_end(const trace_t *t);

/* --filler MB (host backend): frag's budget is what an allocation outside
 * xseg leaves free on a device of MB MiB, as on the GPU; 0: the budget is
 * host_capacity_mb. */
extern size_t bench_filler_mb;

/* --model h100 (host backend): every xseg run keeps modelled time
 * (xs_host_model_time with an H100's call costs, and the driver's scrub
 * after releases, xs_host_scrub): replay times are what the same calls,
 * waits and sleeps take on that GPU, plus the host's own time.  xseg itself
 * reads modelled time only (xs_host_model_clock), so its decisions do not
 * depend on the host's load.  bench_model_on is called by bench_init;
 * bench_clock_s is the clock replays are timed with (the backend's, so
 * modelled time where it runs, plus CLOCK_MONOTONIC under --model; else
 * CLOCK_MONOTONIC). */
extern int bench_model;
void bench_model_on(void);
double bench_clock_s(void);
/* --budget MB (host backend, replay, with --filler): what the filler leaves
 * free; 0: none. */
extern size_t bench_budget_mb;

/* Replay through xseg under configuration `conf` (xseg_init); with fill
 * bytes > 0, an allocation of that many bytes is made on device 0 through
 * the backend, outside xseg, before the replay (a filler). */
replay_t replay_xseg(const trace_t *t, const char *conf, int keep_running, size_t fill);

/* Does the trace replay in a budget of budget_mb MiB?  The caller decides
 * what "the budget" means and which allocator runs. */
typedef int (*budget_fits_fn)(void *ctx, size_t budget_mb);

/* Smallest budget (a multiple of step_mb) for which fits() holds, and for
 * budgets spread over the next 0.5 % of the peak too (frag.c,
 * FRAG_STABLE_TRIES), by bisection
 * between the peak and 16 x the peak; 0 if none fits. */
size_t min_budget_mb(uint64_t peak_live, size_t step_mb, budget_fits_fn fits, void *ctx, int *replays);

/* ---- the GPU's own allocators (cuda_alt.c) ------------------------------------------ */

int gpu_open(void);
void gpu_describe(char *buf, size_t len);
size_t gpu_free_bytes(void);
void *gpu_new_stream(void);
int gpu_fill(size_t budget, uint64_t *handle);
void gpu_unfill(uint64_t handle);
double gpu_time_malloc_free(size_t size, int reps, double *free_s); /* seconds per call */
replay_t replay_cuda(const trace_t *t, int kind); /* 0: cuMemAlloc, 1: cuMemAllocAsync */

/* ---- micro-benchmarks (micro.c) ----------------------------------------------------- */

typedef struct latency_s {
  size_t size;
  double median_ns, p99_ns;
} latency_t;

typedef struct scale_s {
  size_t live;
  double pair_ns, churn_ns;
} scale_t;

typedef struct growth_s {
  size_t size;
  int count;
  double median_us, gbps;
} growth_t;

int bench_latency(const char *conf, const size_t *sizes, int nsizes, int samples, latency_t *out);
int bench_scale(const char *conf, size_t live, int samples, scale_t *out);
int bench_growth(const char *conf, size_t size, size_t total, growth_t *out);
/* streams: one per thread (real CUDA streams on the GPU; any distinct
 * values on the host backend). */
int bench_threads(const char *conf, int nthreads, int ops, void *const *streams, double *mops);
/* nthreads threads, each allocating and freeing a steady mix; spread:
 * thread i on device i, else all on device 0 (the contrast: one lock).
 * *mops: allocations and frees per second, all threads, in millions. */
#define XS_BENCH_MAX_DEVICES 64
int bench_devices(const char *conf, int nthreads, int spread, int ops, double *mops);
double pct(double *v, size_t n, double q);

/* ---- configuration of the xseg runs (conf.c) ------------------------------------------- */

/* Layers, lowest first: a layer's value replaces those of the layers below. */
enum { CONF_BENCH, CONF_DEFAULT, CONF_ENV, CONF_OPTION, CONF_BACKEND, CONF_SECTION, CONF__COUNT };

#define CONF_KEY_MAX 64
#define CONF_MAX_PAIRS 64

typedef struct conf_pair_s {
  char key[CONF_KEY_MAX];
  char *val; /* owned */
  int src;   /* CONF_* */
} conf_pair_t;

typedef struct conf_s {
  int n;
  conf_pair_t kv[CONF_MAX_PAIRS]; /* in the order first set */
} conf_t;

/* Check a user's text with the library's parser; 0, or -1 with the
 * library's message ("xseg: ORIGIN: ...") printed to stderr. */
int conf_check(const char *text, const char *origin);
/* Merge a checked text (NULL: nothing) into c at layer src; 0 or -1. */
int conf_add(conf_t *c, const char *text, int src);
int conf_set(conf_t *c, const char *key, size_t klen, const char *val, size_t vlen, int src);
const char *conf_get(const conf_t *c, const char *key, int *src); /* NULL if unset */
int conf_copy(conf_t *dst, const conf_t *src);
void conf_free(conf_t *c);
const char *conf_source_name(int src);
/* "key:value,..." for xseg_init, and "key:value (source), ..." for people;
 * both snprintf-like. */
size_t conf_text(const conf_t *c, char *buf, size_t len);
size_t conf_describe(const conf_t *c, char *buf, size_t len);
/* The configuration of one run: base, then a section's defaults under the
 * user's layers, then the keys it measures over everything; *out is
 * malloc'd.  0 or -1. */
int conf_run_text(const conf_t *base, const char *defaults, const char *forced, char **out);
/* xseg_init, saying a failure once (the library says most itself). */
int bench_init(const char *conf);

/* ---- the clock (clock.c) ---------------------------------------------------------------- */

double now_s(void); /* CLOCK_MONOTONIC, seconds */

#endif
